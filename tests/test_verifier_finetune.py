"""`fspo verifier train`: a tiny cross-encoder fine-tuned for a few steps, saved, reloaded by the `nli` backend."""

from __future__ import annotations

import json

import pytest
import torch

from fspo.cli import main as fspo_main
from fspo.config.verifier import verifier_config
from fspo.verifier_tools.finetune import batches, learning_rate_at
from fspo.verifier_tools.labelled import LabelledPair
from fspo.verifier_tools.quality import auroc
from fspo.verifiers import build_verifier

EVIDENCE = "Paris is the capital of France. The Seine flows through Paris."
# The label rides on one word, so a 2-layer model learns it in a few dozen steps.
ROWS = [
    {"evidence": EVIDENCE, "claim": f"{subject} is {'true' if label else 'false'}.", "label": label}
    for subject in ("Paris", "The Seine", "France", "The capital", "The river", "The city")
    for label in (1, 0)
]


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    """A randomly initialised 2-layer BERT with the real all-MiniLM-L6-v2 WordPiece tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from fspo.launch.preflight import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_encoder")
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_fine_tune_saves_a_directory_the_nli_backend_loads(tiny_encoder, tmp_path, capsys):
    data = tmp_path / "claims.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    out = tmp_path / "verifier"
    args = [
        "verifier",
        "train",
        "--data",
        str(data),
        "--output-dir",
        str(out),
        "--base-model",
        str(tiny_encoder),
        "--steps",
        "60",
        "--batch-size",
        "8",
        "--learning-rate",
        "3e-3",
        "--max-length",
        "64",
        "--threads",
        "1",
    ]
    assert fspo_main(args) == 0
    assert f"fspo.verifier.model_path={out}" in capsys.readouterr().out
    training = json.loads((out / "training.json").read_text())
    assert training["data"] == [str(data)] and training["steps"] == 60 and training["pairs"] == len(ROWS)

    verifier = build_verifier(verifier_config({"name": "nli", "model_path": str(out), "device": "cpu"}))
    assert verifier.label_index == 1 and verifier.max_length == 64  # "supported"; the training window
    scores = verifier.score([(r["evidence"], r["claim"]) for r in ROWS])
    assert all(0.0 <= s <= 1.0 for s in scores)
    # It learnt the task, the right way round: every supported claim outscores every unsupported one.
    assert auroc(scores, [r["label"] for r in ROWS]) == 1.0


def test_untrained_head_is_not_already_perfect(tiny_encoder, tmp_path):
    """The fine-tune test above can fail: the same model with 1 step at a tiny rate does not separate."""
    from fspo.verifier_tools.finetune import train_cross_encoder

    pairs = [LabelledPair(r["evidence"], r["claim"], r["label"]) for r in ROWS]
    threads = torch.get_num_threads()
    out = train_cross_encoder(
        pairs,
        tmp_path / "v",
        str(tiny_encoder),
        steps=1,
        batch_size=2,
        learning_rate=1e-8,
        max_length=64,
        log_every=0,
        threads=1,
    )
    scores = build_verifier(verifier_config({"name": "nli", "model_path": str(out), "device": "cpu"})).score(
        [(p.evidence, p.claim) for p in pairs]
    )
    assert auroc(scores, [p.label for p in pairs]) < 1.0
    assert torch.get_num_threads() == threads  # threads=1 held only while training


def test_training_into_a_used_folder_keeps_the_users_files(tiny_encoder, tmp_path, capsys):
    """fspo.utils.output_dir's rule: a user's config.json is refused before training; a user's other files stay; a
    re-run replaces the earlier model; a link where the weights go is refused, not written through."""
    from fspo.utils.output_dir import RECORD, OutputConflict
    from fspo.verifier_tools.finetune import EXPECTED_FILES, train_cross_encoder

    data = tmp_path / "claims.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n")
    out = tmp_path / "verifier"
    out.mkdir()
    (out / "config.json").write_text("{}")
    argv = ["verifier", "train", "--data", str(data), "--output-dir", str(out), "--base-model", str(tiny_encoder)]
    argv += ["--steps", "1", "--batch-size", "2", "--max-length", "64", "--threads", "1"]
    capsys.readouterr()
    assert fspo_main(argv) == 2
    err = capsys.readouterr().err
    assert "config.json was not written by fspo" in err and err.count("\n") == 1
    assert sorted(p.name for p in out.iterdir()) == ["config.json"]
    (out / "config.json").unlink()
    (out / "NOTES.md").write_text("mine")
    assert fspo_main(argv) == 0 and fspo_main(argv) == 0
    assert (out / "NOTES.md").read_text() == "mine" and (out / "config.json").is_file()
    assert sorted(p.name for p in out.iterdir()) == sorted([*EXPECTED_FILES, RECORD, "NOTES.md"])  # no staging left
    # a model the first run saved under this name is the run's own: the record lists it
    (out / "NOTES.md").unlink()
    with pytest.raises(OutputConflict, match="model.safetensors.* symbolic link"):
        (out / "model.safetensors").unlink()
        (out / "model.safetensors").symlink_to(tmp_path / "weights.safetensors")
        pairs = [LabelledPair(r["evidence"], r["claim"], r["label"]) for r in ROWS]
        train_cross_encoder(pairs, out, str(tiny_encoder), steps=1, batch_size=2, max_length=64, log_every=0)
    assert not (tmp_path / "weights.safetensors").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "absent.jsonl"], "fspo verifier train: no labelled file 'absent.jsonl'"),
        (["--data", "{one_class}"], "needs both supported (1) and unsupported (0) pairs"),
    ],
)
def test_train_errors_exit_2_with_one_line(tmp_path, capsys, args, message):
    one_class, both = tmp_path / "one.jsonl", tmp_path / "both.jsonl"
    one_class.write_text(json.dumps(ROWS[0]) + "\n")
    both.write_text("\n".join(json.dumps(r) for r in ROWS[:2]) + "\n")
    argv = [
        "verifier",
        "train",
        *[a.format(one_class=one_class, both=both) for a in args],
        "--output-dir",
        str(tmp_path / "o"),
    ]
    assert fspo_main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()


def test_verifier_command_names_its_subcommand(capsys):
    assert fspo_main(["verifier"]) == 2
    assert "fspo verifier train" in capsys.readouterr().err


def test_batches_cover_every_pair_each_epoch():
    pairs = [LabelledPair("e", str(i), i % 2) for i in range(10)]
    drawn = [p.claim for batch in batches(pairs, 4, 5, seed=0) for p in batch]
    assert len(drawn) == 20 and sorted(drawn[:10]) == sorted(p.claim for p in pairs)
    assert drawn == [p.claim for batch in batches(pairs, 4, 5, seed=0) for p in batch]  # seeded


def test_learning_rate_warms_up_then_decays():
    rates = [learning_rate_at(step, 100, 1.0) for step in range(100)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert rates[50] == pytest.approx(50 / 90) and rates[-1] == pytest.approx(1 / 90)


def test_train_refuses_a_bad_number_where_it_parses_it(capsys):
    """A number out of its declared range (fspo.config.numeric_options) is argparse's one line after the usage."""
    with pytest.raises(SystemExit) as stopped:
        fspo_main(["verifier", "train", "--data", "x.jsonl", "--steps", "0"])
    lines = capsys.readouterr().err.splitlines()
    assert stopped.value.code == 2 and lines[-1] == "fspo verifier train: error: argument --steps: must be >= 1, got 0"
