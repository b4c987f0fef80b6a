"""benchmarks/flawed_positives.py: a quickstart run's validation answers judged before and after training."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from fspo.data.io import write_parquet
from fspo.quickstart.cli import quickstart_rows

_spec = importlib.util.spec_from_file_location(
    "flawed_positives", Path(__file__).parents[1] / "benchmarks" / "flawed_positives.py"
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _record(row: dict, response: str) -> str:
    return json.dumps({"input": f"user\nContext:\n{row['extra_info']['evidence']}\n\nQuestion: ?", "output": response})


def test_run_judges_the_first_and_last_validation_of_each_arm(tmp_path, capsys):
    rows = quickstart_rows(2, seed=0, split="test", world="shortcut")
    val = write_parquet(rows, tmp_path / "test.parquet")
    gold = [" ".join(row["extra_info"]["gold_facts"]) for row in rows]
    answers = [row["reward_model"]["ground_truth"] for row in rows]
    # Before: one right answer through a made-up step, one wrong. After: both right from the gold chain.
    before = [f"Nobody was born in {answers[0]}. </think> <answer> {answers[0]} </answer>", "<answer> Lima </answer>"]
    after = [f"{g} </think> <answer> {a} </answer>" for g, a in zip(gold, answers)]
    folder = tmp_path / "run" / "grpo" / "validation"
    folder.mkdir(parents=True)
    for step, responses in (("0", before), ("6", before), ("12", after)):
        (folder / f"{step}.jsonl").write_text("\n".join(_record(r, s) for r, s in zip(rows, responses)) + "\n")
    out = tmp_path / "figures.json"
    assert bench.main(["--json", str(out), "run", "--run-dir", str(tmp_path / "run"), "--val", str(val)]) == 0
    figures = json.loads(out.read_text())
    assert list(figures) == ["grpo step 0", "grpo step 12"]
    assert figures["grpo step 0"]["right_answers"] == 1 and figures["grpo step 0"]["flawed_positive_rate"] == 1.0
    assert figures["grpo step 0"]["answer_f1"] == pytest.approx(0.5)
    assert figures["grpo step 12"]["flawed_positive_rate"] == 0.0 and figures["grpo step 12"]["answer_f1"] == 1.0
    assert figures["grpo step 12"]["hallucinated_step_rate"] == 0.0
    # Over all answers: 1 flawed of 2 (the right answers' share above is 1 of 1).
    assert figures["grpo step 0"]["flawed_positive_share"] == 0.5
    assert "| grpo step 0 | 2 | 1 | 1 | 1.000 | 1.000 | 1.000 | 0.500 |" in capsys.readouterr().out


def test_run_refuses_a_missing_val_file(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["run", "--run-dir", str(tmp_path), "--val", str(tmp_path / "none.parquet")])
    assert "none.parquet: no such file" in capsys.readouterr().err


def test_rollouts_are_judged_per_step_and_together(tmp_path):
    rows = quickstart_rows(2, seed=1, split="train", world="shortcut")
    train = write_parquet(rows, tmp_path / "train.parquet")
    answer = rows[1]["reward_model"]["ground_truth"]
    flawed = f"Nobody was born in {answer}. </think> <answer> {answer} </answer>"
    folder = tmp_path / "rollouts"
    folder.mkdir()
    (folder / "1.jsonl").write_text(
        _record(rows[1], flawed) + "\n" + _record(rows[0], "<answer> Lima </answer>") + "\n"
    )
    (folder / "2.jsonl").write_text(_record(rows[1], flawed.replace("Nobody was born in", "So it is")) + "\n")
    figures = bench.rollout_figures(bench.argparse.Namespace(dir=folder, train=train))
    assert list(figures) == ["step 1", "step 2", "all steps"]
    assert [figures[name]["flawed_positive_rate"] for name in figures] == [1.0, 0.0, 0.5]
    assert figures["all steps"]["answers"] == 3 and figures["all steps"]["right_answers"] == 2
