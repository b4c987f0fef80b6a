"""The three-arm benchmark's tables: mean ± std per arm, the base model from the runs' first validation."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "fspo_vs_grpo", Path(__file__).parents[1] / "benchmarks" / "fspo_vs_grpo.py"
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _run(arm, seed, f1, hallucinated, before_f1=0.1):
    after = {
        "answer_f1": f1,
        "hallucinated_step_rate": hallucinated,
        "lexical_supported_step_rate": 0.9,
        "embedding_supported_step_rate": 0.8,
        "copy_rate": 0.5,
        "steps": 0 if hallucinated is None else 64,
        "answers": 32,
    }
    before = {**after, "answer_f1": before_f1}
    return {"arm": arm, "seed": seed, "seconds": 10.0, "before": before, "after": after}


def test_mean_std_skips_missing_values():
    assert bench.mean_std([0.2, None, 0.4]) == (pytest.approx(0.3), pytest.approx(math.sqrt(0.02)), 2)
    assert bench.mean_std([0.5]) == (0.5, 0.0, 1)
    mean, std, count = bench.mean_std([None])
    assert math.isnan(mean) and math.isnan(std) and count == 0


def test_summary_per_arm_and_the_base_model_once_per_seed():
    results = [
        _run("fspo", 0, 0.4, 0.1, before_f1=0.0),
        _run("grpo", 0, 0.3, 0.4, before_f1=0.0),
        _run("fspo", 1, 0.6, 0.3, before_f1=0.2),
        _run("grpo", 1, 0.3, None, before_f1=0.2),
    ]
    summary = bench.summarise(results)
    assert list(summary) == ["base model", "fspo", "grpo"]
    assert summary["base model"]["answer_f1"][:1] + summary["base model"]["answer_f1"][2:] == (pytest.approx(0.1), 2)
    assert summary["fspo"]["answer_f1"][0] == pytest.approx(0.5)
    assert summary["grpo"]["hallucinated_step_rate"] == (0.4, 0.0, 1)
    table = bench.markdown_table(summary, steps=12, seeds=2, val_rows=32, run_s=600)
    assert "| fspo | 0.500 ± 0.141 | 0.200 ± 0.141 |" in table
    # grpo's seed 1 wrote no reasoning: its step figures are over one run, and say so; its length is 0.
    assert "| grpo | 0.300 ± 0.000 | 0.400 ± 0.000 (n=1) |" in table
    assert summary["grpo"]["steps_per_answer"] == (pytest.approx(1.0), pytest.approx(math.sqrt(2)), 2)
    assert "mean ± std over 2 seed(s); 10.0 min of runs" in table


def test_chart_is_written(tmp_path):
    summary = bench.summarise([_run("fspo", 0, 0.4, 0.1), _run("grpo", 0, 0.3, None)])
    bench.plot(summary, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").stat().st_size > 5000


def test_bad_budget_exits_2(capsys):
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--seeds", "0"])
    assert stopped.value.code == 2 and "--seeds, --steps and --val-rows must be at least 1" in capsys.readouterr().err
