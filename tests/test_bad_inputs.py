"""Bad inputs of every command, as users' files look in the wild: each is refused before anything slow (no model
is loaded, no Ray started) with one line on stderr naming what to fix, or read as the user meant.

One table per command; a case is ``(id, argv, expected exit status, what stderr's one line says)``. ``{name}`` in
argv is a file of the ``inputs`` fixture.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.cli import main as fspo_main
from fspo_testing.command_guard import message_lines

BOM = "\ufeff"
EVIDENCE = "The Eiffel Tower is in Paris."


def rl_row(**changes) -> dict:
    """One verl RL row as `fspo data` writes it, with ``changes`` applied."""
    row = {
        "data_source": "hotpotqa",
        "prompt": [{"role": "user", "content": "Where is the Eiffel Tower?"}],
        "reward_model": {"style": "rule", "ground_truth": "Paris"},
        "extra_info": {"index": 0, "split": "train", "evidence": EVIDENCE},
    }
    return {**row, **changes}


QUESTION = {"role": "user", "content": "Where is the Eiffel Tower?"}
# Prompts whose messages no chat template renders as written, one file each (the `inputs` fixture).
MESSAGE_CASES = {
    "content_null": [{"role": "user", "content": None}],
    "content_int": [{"role": "user", "content": 5}],
    "content_parts": [{"role": "user", "content": [{"type": "text", "text": "Where is the Eiffel Tower?"}]}],
    "role_empty": [{"role": "system", "content": "Be brief."}, {"role": "", "content": "Where is it?"}],
    "role_null": [{"role": None, "content": "Be brief."}, QUESTION],
    "role_tool": [QUESTION, {"role": "tool", "content": "It is in Paris."}],
    "message_null": [QUESTION, None],
}
# Contents a parquet column cannot hold beside text: the file's every row has them.
WHOLE_COLUMN = {"content_int", "content_parts"}


def write_table(path, rows: list[dict], schema=None):
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Every input file the tables name, built once."""
    from fspo_testing.tiny_model import qwen_tokenizer_dir

    root = tmp_path_factory.mktemp("bad_inputs")
    files = {"root": root, "folder": root / "a_folder"}
    files["folder"].mkdir()
    (root / "a_file").write_text("not a folder\n")
    files["a_file"] = root / "a_file"
    # CSV renamed .parquet, the commonest wrong file.
    (root / "csv.parquet").write_text("question,answer\nWhere?,Paris\n")
    files["csv_parquet"] = root / "csv.parquet"
    files["good"] = write_table(root / "good.parquet", [rl_row(), rl_row()])
    files["extra_info_json_text"] = write_table(
        root / "extra_info_json_text.parquet", [rl_row(extra_info=json.dumps(rl_row()["extra_info"]))]
    )
    files["evidence_mapping"] = write_table(
        root / "evidence_mapping.parquet", [rl_row(extra_info={"index": 0, "evidence": {"text": EVIDENCE}})]
    )
    files["evidence_bytes"] = write_table(
        root / "evidence_bytes.parquet", [rl_row(extra_info={"index": 0, "evidence": EVIDENCE.encode()})]
    )
    files["empty_truth"] = write_table(
        root / "empty_truth.parquet",
        [
            rl_row(reward_model={"style": "rule", "ground_truth": ""}),
            rl_row(reward_model={"style": "rule", "ground_truth": "  "}),
        ],
    )
    files["no_rows"] = write_table(root / "no_rows.parquet", [], schema=pa.Table.from_pylist([rl_row()]).schema)
    files["no_messages"] = write_table(root / "no_messages.parquet", [rl_row(), rl_row(prompt=[])])
    for name, messages in MESSAGE_CASES.items():  # the second row's messages do not fit, or both where a column
        rows = [rl_row(prompt=messages)] * 2 if name in WHOLE_COLUMN else [rl_row(), rl_row(prompt=messages)]
        files[name] = write_table(root / f"{name}.parquet", rows)
    # fspo verify rows
    (root / "empty.jsonl").write_text("")
    files["empty_jsonl"] = root / "empty.jsonl"
    (root / "evidence_dict.jsonl").write_text(json.dumps({"evidence": {"text": EVIDENCE}, "response": "x"}) + "\n")
    files["evidence_dict"] = root / "evidence_dict.jsonl"
    (root / "null_response.jsonl").write_text(json.dumps({"evidence": EVIDENCE, "response": None}) + "\n")
    files["null_response"] = root / "null_response.jsonl"
    row = {
        "evidence": EVIDENCE,
        "response": "<think>La tour Eiffel est à Paris. The Eiffel Tower is in Paris.</think> Paris",
    }
    (root / "bom.jsonl").write_text(BOM + json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8")
    files["bom_jsonl"] = root / "bom.jsonl"
    labelled = [
        {"evidence": EVIDENCE, "claim": "The Eiffel Tower is in Paris.", "label": 1},
        {"evidence": EVIDENCE, "claim": "The Eiffel Tower is in Rome.", "label": 0},
    ]
    (root / "labelled_bom.jsonl").write_text(BOM + "\n".join(json.dumps(r) for r in labelled) + "\n", encoding="utf-8")
    files["labelled_bom"] = root / "labelled_bom.jsonl"
    # lexical scores a claim without content words NaN: here every supported claim.
    unscorable = [{"evidence": EVIDENCE, "claim": "It is.", "label": 1}, labelled[1]]
    (root / "labelled_nan.jsonl").write_text("\n".join(json.dumps(r) for r in unscorable) + "\n")
    files["labelled_nan"] = root / "labelled_nan.jsonl"
    # source files of `fspo data halueval`
    record = {
        "knowledge": EVIDENCE,
        "question": "Where is the Eiffel Tower?",
        "right_answer": "Paris",
        "hallucinated_answer": "Rome",
    }
    (root / "halueval_bom.jsonl").write_text(BOM + json.dumps(record) + "\n", encoding="utf-8")
    files["halueval_bom"] = root / "halueval_bom.jsonl"
    (root / "number.json").write_text("12345678901234567890\n")
    files["json_number"] = root / "number.json"
    # model folders: one that would load, and broken ones, none of them loaded by a refusal
    tokenizer = qwen_tokenizer_dir()
    # Small sizes: a case that stops being refused before the model loads then loads 5M parameters (the embedding
    # every id of the tokenizer needs, tied), not Qwen2's defaults (7B: the run is killed for memory).
    bpe = json.loads((tokenizer / "tokenizer.json").read_text(encoding="utf-8"))
    token_ids = {*bpe["model"]["vocab"].values(), *(token["id"] for token in bpe["added_tokens"])}
    small_qwen2 = {
        "model_type": "qwen2",
        "vocab_size": max(token_ids) + 1,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": True,
        "eos_token_id": 151645,
        "pad_token_id": 151643,
    }

    def model_folder(
        name: str, config: str | None = json.dumps(small_qwen2), weights: bool = True, chat_template: bool = True
    ):
        folder = root / name
        shutil.copytree(tokenizer, folder)
        if config is not None:
            (folder / "config.json").write_text(config)
        if weights:  # a readable header that holds no tensor: fspo.utils.checked_load passes it
            (folder / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")
        if not chat_template:
            settings = json.loads((folder / "tokenizer_config.json").read_text())
            settings.pop("chat_template", None)
            (folder / "tokenizer_config.json").write_text(json.dumps(settings))
        return folder

    files["model"] = model_folder("model")
    files["model_without_weights"] = model_folder("model_without_weights", weights=False)
    files["model_bad_config"] = model_folder("model_bad_config", config="{not json")
    files["model_without_template"] = model_folder("model_without_template", chat_template=False)
    return files


def run(argv: list[str], inputs: dict, capsys) -> tuple[int, str, str]:
    """`fspo argv` with ``{name}`` replaced by the fixture's paths: (exit status, stdout, stderr)."""
    argv = [arg.format(**inputs) for arg in argv]
    capsys.readouterr()
    try:
        code = fspo_main(argv)
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_refused(result: tuple[int, str, str], status: int, message: str) -> None:
    code, out, err = result
    assert code == status, (code, out[-1000:], err[-2000:])
    if status == 2:
        # One line on stderr, naming the fix (after argparse's usage block, for a value it parses: a number).
        assert len(message_lines(err)) == 1 and message in err, err
    else:
        assert message in out + err, (out[-2000:], err[-2000:])
    assert "Traceback" not in err


DATA_CHECK = [
    ("extra_info as JSON text", ["{extra_info_json_text}"], 1, "extra_info as text, not a mapping"),
    ("evidence as a mapping", ["{evidence_mapping}"], 1, "hold evidence under 'evidence' as dict"),
    ("evidence as bytes", ["{evidence_bytes}"], 1, "hold evidence under 'evidence' as bytes"),
    ("empty ground truths", ["{empty_truth}"], 1, "2 rows have an empty reward_model.ground_truth"),
    ("no rows", ["{no_rows}"], 1, "has no rows"),
    ("a row without messages", ["{no_messages}"], 1, "1 rows have no prompt messages (first: 1)"),
    (
        "a null message content",
        ["{content_null}"],
        1,
        "1 rows have a prompt message whose content is null, not text (first: 1)",
    ),
    (
        "an integer message content",
        ["{content_int}"],
        1,
        "2 rows have a prompt message whose content is an integer, not text (first: 0, 1)",
    ),
    (
        "a message of content parts",
        ["{content_parts}"],
        1,
        "2 rows have a prompt message whose content is a list, not text (first: 0, 1)",
    ),
    (
        "an empty role",
        ["{role_empty}"],
        1,
        "1 rows have a prompt message whose role is '', not system, user or assistant (first: 1)",
    ),
    (
        "a null role",
        ["{role_null}"],
        1,
        "1 rows have a prompt message whose role is null, not system, user or assistant (first: 1)",
    ),
    (
        "a tool message",
        ["{role_tool}"],
        1,
        "1 rows have a prompt message whose role is 'tool', not system, user or assistant (first: 1)",
    ),
    (
        "a null message",
        ["{message_null}"],
        1,
        "1 rows have a prompt message that is null, not a {role, content} mapping (first: 1)",
    ),
    (
        "--max-prompt-length without --tokenizer",
        ["{good}", "--max-prompt-length", "512"],
        2,
        "--max-prompt-length count prompt tokens: give --tokenizer",
    ),
    ("--prompt-format without --tokenizer", ["{good}", "--prompt-format", "qwen-base"], 2, "give --tokenizer"),
    ("an empty --evidence-key", ["{good}", "--evidence-key", " "], 2, "--evidence-key is empty"),
]


@pytest.mark.parametrize(
    ("argv", "status", "message"), [case[1:] for case in DATA_CHECK], ids=[case[0] for case in DATA_CHECK]
)
def test_fspo_data_check(inputs, capsys, argv, status, message):
    assert_refused(run(["data", "check", *argv], inputs, capsys), status, message)


def test_fspo_data_check_passes_a_good_file(inputs, capsys):
    code, out, _ = run(["data", "check", "{good}"], inputs, capsys)
    assert code == 0 and "2 rows, can train" in out


@pytest.fixture(scope="module")
def verl_reader(inputs, tmp_path_factory, qwen_tokenizer):
    """``verl_reader(table)``: the rows of ``table`` verl stops on or renders otherwise than written.

    A row is read by verl's ``RLHFDataset.__getitem__`` (it hands the messages on as they are and reads
    ``extra_info.get``, verl/utils/dataset/rl_dataset.py:386-402) and its messages rendered as the agent loop renders
    a prompt (verl/utils/tokenizer/continuous_token.py:233), with the Qwen tokenizer's own template and with
    ``qwen-base`` (the paper's; recipes set it as custom_chat_template); its overlong-prompt filter renders them the
    same way and drops a row that fails (rl_dataset.py:247-270). Each text content is rendered as a marker, which
    must be in the prompt: a message the template drops (qwen-base drops every role but system, user and assistant,
    Qwen3's own drops an empty or null one) is not. A null message is refused by rule: it renders as nothing.
    """
    import datasets
    from omegaconf import OmegaConf
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from fspo.training.prompt_formats import chat_template

    cache = tmp_path_factory.mktemp("verl_cache")
    config = OmegaConf.create({"filter_overlong_prompts": False, "cache_dir": str(cache)})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
        dataset = RLHFDataset([str(inputs["good"])], tokenizer=None, config=config)
    builders = [
        create_continuous_token_builder(qwen_tokenizer, hf_model_type="qwen2", chat_template_kwargs=kwargs)
        for kwargs in ({}, {"chat_template": chat_template("qwen-base")})
    ]

    def renders_as_written(messages) -> bool:
        if any(message is None for message in messages):
            return False
        marked = [
            {**message, "content": f"@@{n}@@"} if isinstance(message["content"], str) else message
            for n, message in enumerate(messages)
        ]
        for builder in builders:
            try:
                prompt = qwen_tokenizer.decode(builder.build_initial_tokens(marked))
            except Exception:  # noqa: BLE001 - whatever the template raises
                return False
            if any(f"@@{n}@@" not in prompt for n in range(len(messages))):
                return False
        return True

    def refused_rows(source) -> set[int]:
        """``source``: a parquet file, read as verl reads it (rl_dataset.py:174), or a pyarrow table (milliseconds)."""
        if isinstance(source, Path):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
                dataset.dataframe = RLHFDataset([str(source)], tokenizer=None, config=config).dataframe
        else:
            dataset.dataframe = datasets.Dataset(source)
        refused = set()
        for index in range(len(dataset)):
            try:
                messages = dataset[index]["raw_prompt"]
            except Exception:  # noqa: BLE001 - whatever verl raises on the row
                refused.add(index)
                continue
            if not renders_as_written(messages):
                refused.add(index)
        return refused

    return refused_rows


def named_rows(table) -> set[int]:
    """The rows data check names for a column verl's dataset and chat template read (data_source and reward_model
    are the reward manager's)."""
    from fspo.training.data_checks import row_mismatches

    mismatches = row_mismatches(table, True).items()
    return {row for (place, _), rows in mismatches if place.startswith(("prompt", "extra_info")) for row in rows}


@pytest.mark.parametrize(
    "name", ["good", "extra_info_json_text", "evidence_mapping", "evidence_bytes", "no_messages", *MESSAGE_CASES]
)
def test_data_check_names_the_rows_verl_cannot_read_as_written(inputs, verl_reader, name):
    """The rows `fspo data check` (and the trainer's pre-Ray check) name are the rows verl stops on, drops or renders
    otherwise than written; the file's own reader, not verl's, reads them."""
    from fspo.utils.input_files import read_parquet

    table = read_parquet(inputs[name])
    assert named_rows(table) == verl_reader(inputs[name]), name
    assert verl_reader(pq.read_table(inputs[name])) == verl_reader(inputs[name])  # as the hypothesis test reads
    assert name != "good" or not named_rows(table)


ROLES = st.sampled_from(["system", "user", "assistant", "tool", "", "narrator"]) | st.none()
# Every kind of value a parquet column of message contents can hold (one kind per file, nulls among them).
CONTENTS = [
    st.text(max_size=12),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.booleans(),
    st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=8)}), max_size=2),
    st.fixed_dictionaries({"text": st.text(max_size=8)}),
    st.lists(st.lists(st.text(max_size=4), max_size=2), max_size=2),
]
EXTRA_INFOS = [st.just({"index": 0, "evidence": EVIDENCE}), st.just(json.dumps({"index": 0})), st.integers(0, 9)]


@st.composite
def prompt_rows(draw) -> list[dict]:
    """The rows of one parquet file: prompts of 0-3 messages, each role and content of any kind."""
    content = st.one_of(draw(st.sampled_from(CONTENTS)), st.none())
    extra_info = st.one_of(draw(st.sampled_from(EXTRA_INFOS)), st.none())
    message = st.fixed_dictionaries({"role": ROLES, "content": content})
    return [
        rl_row(prompt=prompt, extra_info=draw(extra_info))
        for prompt in draw(st.lists(st.lists(message, max_size=3), min_size=1, max_size=3))
    ]


@given(rows=prompt_rows())
@settings(max_examples=40, deadline=None)  # ~20 ms an example; the first imports fspo evaluate
def test_data_check_evaluate_and_verl_agree_on_every_prompt(inputs, verl_reader, rows):
    """On a parquet file of generated prompts, `fspo data check` says "can train" exactly when `fspo evaluate` reads
    the file and verl reads and renders each row as written; and it names the rows verl refuses."""
    import argparse

    from fspo.evaluation.cli import read_benchmarks
    from fspo.training.data_checks import scan_file
    from fspo.utils.arguments import UsageError
    from fspo.utils.input_files import read_parquet

    path = write_table(inputs["root"] / "generated.parquet", rows)
    refused = verl_reader(pq.read_table(path))
    try:
        read_benchmarks(argparse.Namespace(data=[("generated", path)], limit=None))
        evaluate_reads = True
    except UsageError:
        evaluate_reads = False
    report = scan_file(path)
    assert report.can_train == evaluate_reads == (not refused), (report.problems, refused)
    if not any("column 'prompt'" in problem for problem in report.problems):  # else: the column's type is named
        assert named_rows(read_parquet(path)) == refused


VERIFY = [
    (
        "evidence as a mapping",
        ["{evidence_dict}"],
        2,
        "line 1: field evidence: expected `str | array | null`, got `object`",
    ),
    ("a null response", ["{null_response}"], 2, "line 1: field response: expected `str`, got `null`"),
    ("an empty file", ["{empty_jsonl}"], 2, "no rows"),
    ("threshold above 1", ["{bom_jsonl}", "--threshold", "1.5"], 2, "--threshold: must be in [0, 1]"),
    ("threshold NaN", ["{bom_jsonl}", "--threshold", "nan"], 2, "--threshold: must be in [0, 1]"),
    ("an unknown verifier", ["{bom_jsonl}", "--verifier", "alignscore"], 2, "unknown fspo.verifier.name 'alignscore'"),
    (
        "a verifier whose weights are not here (offline)",
        ["{bom_jsonl}", "--verifier", "minicheck"],
        2,
        "lytang/MiniCheck-Flan-T5-Large is not in the HF cache",
    ),
    ("--chart without --labelled", ["{bom_jsonl}", "--chart", "{root}/c.png"], 2, "give --labelled too"),
    ("--chart as text", ["--labelled", "{labelled_bom}", "--chart", "{root}/c.txt"], 2, "name the image .png"),
    ("NaNs leave one class", ["--labelled", "{labelled_nan}"], 2, "left no supported pair scored"),
]


@pytest.mark.parametrize(("argv", "status", "message"), [case[1:] for case in VERIFY], ids=[case[0] for case in VERIFY])
def test_fspo_verify(inputs, capsys, argv, status, message):
    assert_refused(run(["verify", *argv], inputs, capsys), status, message)


def test_fspo_verify_reads_a_bom_and_unicode_and_judges_at_the_calibrated_threshold(inputs, capsys):
    code, out, _ = run(["verify", "{bom_jsonl}"], inputs, capsys)
    assert code == 0 and "1 rows, 2 steps" in out and "threshold 1.0" in out
    code, out, _ = run(["verify", "--labelled", "{labelled_bom}"], inputs, capsys)
    assert code == 0 and "2 pairs: 1 supported, 1 unsupported" in out


def test_fspo_verify_says_the_eiffel_tower_is_not_in_berlin(tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"evidence": EVIDENCE, "response": "<think>The Eiffel Tower is in Berlin.</think>"}))
    assert fspo_main(["verify", str(rows)]) == 0
    assert "UNSUPPORTED  The Eiffel Tower is in Berlin." in capsys.readouterr().out


EVALUATE_BASE = ["evaluate", "--model", "{model}", "--data", "{good}", "--output-dir", "{root}/eval"]
EVALUATE = [
    ("threshold above 1", ["--verifier", "lexical", "--threshold", "2"], 2, "--threshold: must be in [0, 1], got 2.0"),
    ("threshold without a verifier", ["--threshold", "0.7"], 2, "--threshold: only with --verifier NAME"),
    (
        "verifier options without a verifier",
        ["--verifier-option", "cache_size=8"],
        2,
        "--verifier-option: only with --verifier",
    ),
    ("--limit 0", ["--limit", "0"], 2, "--limit: must be >= 1, got 0"),
    ("--max-new-tokens 0", ["--max-new-tokens", "0"], 2, "--max-new-tokens: must be >= 1, got 0"),
    (
        "huge tensor parallelism on transformers",
        ["--backend", "hf", "--tensor-parallel-size", "8"],
        2,
        "--tensor-parallel-size 8 needs the vllm backend",
    ),
    ("output folder is a file", ["--output-dir", "{a_file}"], 2, "is a file, not a folder"),
    ("output folder under a file", ["--output-dir", "{a_file}/eval"], 2, "so the folder cannot be created"),
    ("a model folder without weights", ["--model", "{model_without_weights}"], 2, "holds no weights"),
    (
        "a model folder with a broken config.json",
        ["--model", "{model_bad_config}"],
        2,
        "config.json, line 1: not valid JSON",
    ),
    ("data: CSV renamed .parquet", ["--data", "{csv_parquet}"], 2, "not a readable parquet file"),
    ("data with no rows", ["--data", "{no_rows}"], 2, "has no rows"),
    (
        "data: a null message content",
        ["--data", "{content_null}"],
        2,
        "row 1: field prompt[0].content: expected `str`, got `null`",
    ),
    ("data: a tool message", ["--data", "{role_tool}"], 2, "row 1: field prompt[1].role: invalid enum value 'tool'"),
    (
        "data: extra_info as JSON text",
        ["--data", "{extra_info_json_text}"],
        2,
        "row 0: field extra_info: expected `object | null`, got `str`",
    ),
    (
        "a tokenizer without a chat template",
        ["--model", "{model_without_template}"],
        2,
        "does not render for model model_without_template: the model's tokenizer has no chat template",
    ),
]


@pytest.mark.parametrize(
    ("argv", "status", "message"), [case[1:] for case in EVALUATE], ids=[case[0] for case in EVALUATE]
)
def test_fspo_evaluate(inputs, capsys, argv, status, message):
    assert_refused(run([*EVALUATE_BASE, *argv], inputs, capsys), status, message)


VERIFIER_TRAIN_BASE = ["verifier", "train", "--data", "{labelled_bom}", "--output-dir", "{root}/verifier"]
VERIFIER_TRAIN = [
    ("--max-length too short for a claim", ["--max-length", "7"], 2, "the nli backend needs >= 8"),
    (
        "--max-length past the positions",
        ["--max-length", "100000"],
        2,
        "has 512 positions (max_position_embeddings) but --max-length 100000",
    ),
    ("a NaN learning rate", ["--learning-rate", "nan"], 2, "--learning-rate: must be a finite number above 0"),
    ("a negative learning rate", ["--learning-rate=-1e-5"], 2, "--learning-rate: must be a finite number above 0"),
    ("threads 0", ["--threads", "0"], 2, "--threads: must be >= 1"),
    ("output folder is a file", ["--output-dir", "{a_file}"], 2, "is a file, not a folder"),
    ("a base model without weights", ["--base-model", "{model_without_weights}"], 2, "holds no weights"),
]


@pytest.mark.parametrize(
    ("argv", "status", "message"), [case[1:] for case in VERIFIER_TRAIN], ids=[case[0] for case in VERIFIER_TRAIN]
)
def test_fspo_verifier_train(inputs, capsys, argv, status, message):
    assert_refused(run([*VERIFIER_TRAIN_BASE, *argv], inputs, capsys), status, message)
    assert not (inputs["root"] / "verifier").exists()


DATA_BUILD = [
    (
        "synthetic: a negative size",
        ["synthetic", "--size", "-1", "--output-dir", "{root}/s"],
        2,
        "--size: must be >= 0, got -1",
    ),
    (
        "synthetic: a negative test size",
        ["synthetic", "--test-size", "-5", "--output-dir", "{root}/s"],
        2,
        "--test-size: must be >= 0, got -5",
    ),
    (
        "synthetic: nothing to build",
        ["synthetic", "--size", "0", "--test-size", "0", "--output-dir", "{root}/s"],
        2,
        "nothing to build",
    ),
    (
        "synthetic: output folder is a file",
        ["synthetic", "--size", "1", "--output-dir", "{a_file}"],
        2,
        "is a file, not a folder",
    ),
    (
        "a negative size",
        ["halueval", "--input", "{halueval_bom}", "--size", "-3", "--output-dir", "{root}/h"],
        2,
        "--size: must be >= 1, got -3",
    ),
    (
        "CSV renamed .parquet",
        ["halueval", "--input", "{csv_parquet}", "--output-dir", "{root}/h"],
        2,
        "not a readable parquet file",
    ),
    (
        "JSON holding a number",
        ["halueval", "--input", "{json_number}", "--output-dir", "{root}/h"],
        2,
        "holds a JSON int, not a list of records",
    ),
    (
        "output folder under a file",
        ["halueval", "--input", "{halueval_bom}", "--output-dir", "{a_file}/h"],
        2,
        "so the folder cannot be created",
    ),
    (
        "a tokenizer that does not load",
        [
            "halueval",
            "--input",
            "{halueval_bom}",
            "--tokenizer",
            "{folder}",
            "--max-prompt-tokens",
            "64",
            "--output-dir",
            "{root}/h",
        ],
        2,
        "cannot load the tokenizer",
    ),
    (
        "--max-prompt-tokens 0",
        [
            "halueval",
            "--input",
            "{halueval_bom}",
            "--tokenizer",
            "{model}",
            "--max-prompt-tokens",
            "0",
            "--output-dir",
            "{root}/h",
        ],
        2,
        "--max-prompt-tokens: must be >= 1",
    ),
]


@pytest.mark.parametrize(
    ("argv", "status", "message"), [case[1:] for case in DATA_BUILD], ids=[case[0] for case in DATA_BUILD]
)
def test_fspo_data_builders(inputs, capsys, argv, status, message):
    assert_refused(run(["data", *argv], inputs, capsys), status, message)
    assert not any((inputs["root"] / name).exists() for name in ("s", "h"))


def test_a_source_file_with_a_bom_builds(inputs, tmp_path, capsys):
    code, out, err = run(
        ["data", "halueval", "--input", "{halueval_bom}", "--output-dir", str(tmp_path)], inputs, capsys
    )
    assert code == 0, err
    assert pq.read_table(tmp_path / "test.parquet").num_rows == 1


@pytest.fixture(scope="module")
def trainer_config():
    """fspo_trainer.yaml composed as `fspo train` composes it (no Ray, no model)."""
    from hydra import compose, initialize_config_module

    def compose_with(*overrides: str):
        with initialize_config_module("fspo.config", version_base=None):
            return compose("fspo_trainer", overrides=list(overrides))

    return compose_with


TRAIN = [
    (
        "grpo with one rollout per prompt",
        ["actor_rollout_ref.rollout.n=1"],
        "algorithm.adv_estimator=grpo compares each rollout with the others of its prompt",
    ),
    (
        "rloo with one rollout per prompt",
        ["algorithm.adv_estimator=rloo", "actor_rollout_ref.rollout.n=1"],
        "set rollout.n >= 2",
    ),
    (
        "gae without a critic model",
        ["algorithm.adv_estimator=gae"],
        "algorithm.adv_estimator=gae trains a value model (the critic), but critic.model.path is",
    ),
    (
        "gae with a critic model that is not there",
        ["algorithm.adv_estimator=gae", "critic.model.path=/nowhere/critic"],
        "critic.model.path=/nowhere/critic does not exist",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), [case[1:] for case in TRAIN], ids=[case[0] for case in TRAIN])
def test_fspo_train_estimator_needs(trainer_config, overrides, message):
    from fspo.config.vocabulary import ConfigError
    from fspo.training.config_checks import check_advantage_estimator

    with pytest.raises(ConfigError) as error:
        check_advantage_estimator(trainer_config(*overrides))
    assert message in str(error.value) and "\n" not in str(error.value)


def test_fspo_train_accepts_the_default_group_and_a_critic_free_single_rollout(trainer_config):
    from fspo.training.config_checks import check_advantage_estimator

    check_advantage_estimator(trainer_config())  # grpo, n=8
    check_advantage_estimator(
        trainer_config("algorithm.adv_estimator=reinforce_plus_plus", "actor_rollout_ref.rollout.n=1")
    )


# --- the pure helpers behind the checks ---------------------------------------------------------------------


stored_values = st.recursive(
    st.none() | st.text(max_size=8) | st.binary(max_size=4) | st.integers() | st.floats(allow_nan=True),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=6,
)


@given(stored_values)
def test_evidence_training_reads_is_never_taken_for_no_evidence(value):
    """`fspo data check` counts a row as holding unusable evidence only when training reads none from it."""
    from fspo.evidence import row_evidence
    from fspo.training.data_checks import _blank

    if row_evidence({"extra_info": {"evidence": value}}, "evidence"):
        assert not _blank(value)


@given(
    st.lists(
        st.sampled_from(
            [
                "hydra.run.dir=/x",
                "hydra.output_subdir=o",
                "hydra/job_logging=default",
                "trainer.n_gpus_per_node=8",
                "+hydra/hydra_logging=default",
            ]
        ),
        unique=True,
    )
)
@settings(deadline=None)  # the first example imports fspo.training.main (verl, Ray): seconds, not a slow function
def test_the_dry_run_keeps_the_users_hydra_settings(argv):
    from fspo.training.main import DRY_RUN_HYDRA_OVERRIDES, without_hydra_outputs

    extended = without_hydra_outputs(argv)
    assert extended[: len(argv)] == argv
    keys = [arg.split("=", 1)[0].lstrip("+~") for arg in extended]
    assert len(keys) == len(set(keys))  # each key set once: the user's value wins
    assert set(keys) >= {override.split("=", 1)[0] for override in DRY_RUN_HYDRA_OVERRIDES}


@pytest.mark.parametrize(
    ("overrides", "backend"),
    [([], "lexical"), (["fspo.verifier.name=embedding"], "embedding")],
)
def test_the_cpu_preset_trains_at_the_backends_calibrated_threshold(trainer_config, overrides, backend):
    """`fspo train` on a machine without a GPU takes the CPU preset: its verifier's threshold is the calibrated one
    (lexical 1.0, as the quickstart and recipes/run_cpu.sh train), and a threshold given on the command line wins."""
    from fspo.config.calibrated_thresholds import calibrated_threshold, register_threshold_resolver

    register_threshold_resolver()
    config = trainer_config("platform=cpu", *overrides)
    assert config.fspo.verifier.name == backend
    assert config.fspo.verifier.threshold == calibrated_threshold(backend)
    assert trainer_config("platform=cpu", *overrides, "fspo.verifier.threshold=0.3").fspo.verifier.threshold == 0.3
    assert calibrated_threshold("lexical") == 1.0
