"""`fspo data check` and the trainer's startup data check (the same code) on good and bad files."""

from __future__ import annotations

import os
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fspo.data.check import main
from fspo.data.registry import main as data_main
from fspo.training.data_checks import scan_file
from fspo_testing.warm_python import warm_python

PROMPT = "A conversation between User and Assistant.\n\nUser: Where did he study?\nAssistant: Let me solve this step by step. <think>"


KNOWLEDGE = "Nick Bebout played for the University of Wyoming."


@pytest.fixture(scope="module")
def files(tmp_path_factory, released_schema):
    def released(n: int, **fields) -> list[dict]:
        return [
            {
                **released_schema.released_row(i, "Where did he study?", "University of Wyoming", KNOWLEDGE, PROMPT),
                **fields,
            }
            for i in range(n)
        ]

    write_released = released_schema.write_released
    from fspo.data.io import write_parquet
    from fspo.data.synthetic import make_rows

    root = tmp_path_factory.mktemp("data_check")
    rows = released(4)
    rows[2] = {**rows[2], "knowledge": ""}
    paths = {
        "released": write_released(released(3), root / "released.parquet"),
        "released_gap": write_released(rows, root / "released_gap.parquet"),
        "fspo": write_parquet(make_rows(3, seed=0), root / "fspo.parquet") or root / "fspo.parquet",
        "unknown": write_released(released(2, data_source="squad"), root / "unknown.parquet"),
        "verl": write_released(released(2, data_source="openai/gsm8k", knowledge=""), root / "verl.parquet"),
    }
    pq.write_table(
        pa.Table.from_pylist(
            [{"prompt": "User: hi", "data_source": "gsm8k", "reward_model": {"ground_truth": None, "style": "rule"}}]
        ),
        root / "string_prompt.parquet",
    )
    paths["string_prompt"] = root / "string_prompt.parquet"
    return paths


def test_a_released_file_reports_sources_evidence_and_ground_truth(files, capsys):
    assert main([str(files["released"]), "--evidence-key", "knowledge"]) == 0
    out = capsys.readouterr().out
    assert f"{files['released']}: 3 rows, can train" in out
    assert "data_source 'HotpotQA': 3 rows, scorer fspo's hotpotqa" in out
    assert (
        "evidence ('knowledge'): 3/3 rows (3 in the column); chars min {n} / median {n} / max {n}".format(
            n=len(KNOWLEDGE)
        )
        in out
    )
    assert "ground truth: str 3" in out


def test_fspo_and_verl_files_can_train(files, capsys):
    assert data_main(["check", str(files["fspo"]), str(files["verl"])]) == 0
    out = capsys.readouterr().out
    assert "evidence ('evidence'): 3/3 rows (3 in extra_info)" in out
    assert "data_source 'openai/gsm8k': 2 rows, scorer verl's" in out


def test_bad_files_exit_1_naming_why(files, tmp_path, capsys):
    assert (
        main(
            [
                str(files["unknown"]),
                str(files["released"]),
                str(files["string_prompt"]),
                str(tmp_path / "absent.parquet"),
            ]
        )
        == 1
    )
    captured = capsys.readouterr()
    out = captured.out
    assert "data_source 'squad': 2 rows, scorer NONE" in out
    assert "problem: data_source 'squad' (2 rows, first: 0, 1) has no scorer; known: " in out
    # The released file under the default key: its evidence is elsewhere, FSPO would be plain GRPO.
    assert "problem: no row has evidence under 'evidence', but 'knowledge' holds text in 3 rows" in out
    assert "fspo.evidence_key=knowledge" in out
    assert "column 'prompt' is string, not a list of {role, content} chat messages" in out
    assert "1 rows have no reward_model.ground_truth (first: 0)" in out
    assert "absent.parquet: 0 rows, CANNOT TRAIN\n  " in out and "does not exist" in out
    assert "4 of 4 file(s) cannot train" in captured.err


def test_require_evidence_names_the_rows_without(files, capsys):
    assert main([str(files["released_gap"]), "--evidence-key", "knowledge"]) == 0
    assert main([str(files["released_gap"]), "--evidence-key", "knowledge", "--require-evidence"]) == 1
    assert (
        "but 1 of 4 rows have no evidence under 'knowledge' (extra_info or column; rows 2)" in capsys.readouterr().out
    )


def test_token_counts_with_a_tokenizer(files, qwen_tokenizer):
    from fspo_testing.tiny_model import qwen_tokenizer_dir

    report = scan_file(
        files["released"], "knowledge", tokenizer=qwen_tokenizer, prompt_format="passthrough", max_prompt_length=10
    )
    expected = len(qwen_tokenizer(PROMPT, add_special_tokens=False)["input_ids"])
    assert report.prompt_tokens == [expected] * 3
    assert report.evidence_tokens == [len(qwen_tokenizer(KNOWLEDGE, add_special_tokens=False)["input_ids"])] * 3
    assert report.prompts_over_limit == 3 and "every prompt is longer than 10 tokens" in report.problems[0]
    # Without a format, the tokenizer's own template renders the messages (wrapping the text in ChatML).
    own = scan_file(files["released"], "knowledge", tokenizer=qwen_tokenizer).prompt_tokens
    wrapped = qwen_tokenizer.apply_chat_template(
        [{"role": "user", "content": PROMPT}], add_generation_prompt=True, tokenize=False
    )
    assert own == [len(qwen_tokenizer(wrapped, add_special_tokens=False)["input_ids"])] * 3 and own[0] > expected
    assert (
        main(
            [
                str(files["released"]),
                "--evidence-key",
                "knowledge",
                "--tokenizer",
                str(qwen_tokenizer_dir()),
                "--prompt-format",
                "passthrough",
            ]
        )
        == 0
    )


def run_main(*overrides, env=None):
    return subprocess.run(
        [warm_python(), "-m", "fspo.training.main", *overrides], capture_output=True, text=True, env=env
    )


def test_the_trainer_stops_before_ray_on_what_data_check_reports(files, tmp_path):
    from fspo_testing.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "model")
    base = [f"actor_rollout_ref.model.path={model}", f"data.val_files={files['fspo']}"]
    unknown = run_main(*base, f"data.train_files={files['unknown']}")
    assert unknown.returncode == 2, unknown.stderr[-2000:]
    assert (
        f"data.train_files: {files['unknown']} data_source 'squad' (2 rows, first: 0, 1) has no scorer"
        in unknown.stderr
    )
    assert "Traceback" not in unknown.stderr and "ray.init" not in unknown.stderr
    # fspo.require_evidence=true: the file and its first evidence-less rows, exit 2, before Ray.
    gap = run_main(
        *base, f"data.train_files={files['released_gap']}", "fspo.evidence_key=knowledge", "fspo.require_evidence=true"
    )
    assert gap.returncode == 2, gap.stderr[-2000:]
    assert f"data.train_files: {files['released_gap']} fspo.require_evidence=true but 1 of 4 rows" in gap.stderr
    assert "rows 2)" in gap.stderr and "Traceback" not in gap.stderr
    # The dry run checks the files that exist.
    dry = run_main(
        "actor_rollout_ref.model.path=x/y",
        f"data.train_files=[later.parquet,{files['released']}]",
        env={**os.environ, "FSPO_DRY_RUN": "1"},
    )
    assert dry.returncode == 2 and "fspo.evidence_key=knowledge" in dry.stderr, dry.stderr[-2000:]


def test_a_custom_reward_function_scores_any_source(files):
    from omegaconf import OmegaConf

    from fspo.training.config_checks import check_data_files, uses_fspo_scorer

    custom = OmegaConf.create(
        {
            "reward": {"custom_reward_function": {"path": "/my/reward.py", "name": "score"}},
            "fspo": {"evidence_key": "knowledge"},
        }
    )
    default = OmegaConf.create(
        {"reward": {"custom_reward_function": {"path": "pkg://fspo.training.outcome", "name": "compute_score"}}}
    )
    assert uses_fspo_scorer(default) and not uses_fspo_scorer(custom)
    check_data_files("data.train_files", [str(files["unknown"])], custom)  # no error: the custom function decides


def test_the_trainer_and_data_check_name_messages_no_template_renders(tmp_path, capsys, qwen_tokenizer):
    """A message whose content is not text, or whose role no template renders, is named with its rows before Ray
    starts, as `fspo data check` names it (tests/test_bad_inputs.py holds the rows equal to verl's)."""
    from fspo.config.vocabulary import ConfigError
    from fspo.data.synthetic import make_rows
    from fspo.training.config_checks import check_data_files

    good, null_content, tool = make_rows(3, seed=0)
    null_content["prompt"] = [{**message, "content": None} for message in null_content["prompt"]]
    tool["prompt"] = [*tool["prompt"], {"role": "tool", "content": "It is in Paris."}]
    path = tmp_path / "messages.parquet"
    pq.write_table(pa.Table.from_pylist([good, null_content, tool]), path)
    with pytest.raises(ConfigError) as refused:
        check_data_files("data.train_files", [str(path)])
    for expected in (
        f"data.train_files: {path} 1 rows have a prompt message whose content is null, not text (first: 1)",
        "1 rows have a prompt message whose role is 'tool', not system, user or assistant (first: 2)",
    ):
        assert expected in str(refused.value)
    assert main([str(path)]) == 1
    assert "problem: 1 rows have a prompt message whose content is null" in capsys.readouterr().out
    # With a tokenizer, only the good row is rendered to count its tokens (a template fails on the null content).
    assert len(scan_file(path, tokenizer=qwen_tokenizer, max_prompt_length=4096).prompt_tokens) == 1
