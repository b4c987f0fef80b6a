"""benchmarks/preregistered_report.py: the plan it reports against is the committed pre-registration's; no figure
before every planned run is in; then each figure is the paired t interval of the per-seed differences, the
verdicts follow the plan's rules, and docs/results.md's section is what the committed runs give."""

from __future__ import annotations

import importlib.util
import json
import random
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.evaluation.intervals import t_interval

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("preregistered_report", ROOT / "benchmarks" / "preregistered_report.py")
report = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = report  # its dataclass looks its module up there
_spec.loader.exec_module(report)
PLAN = report.PLAN


def test_the_plan_is_the_committed_preregistrations():
    text = (ROOT / "benchmarks" / "preregistration_shortcut.md").read_text()
    count = int(re.search(r"\*\*N = (\d+) seeds \((\d+)-(\d+)\)\*\*", text).group(1))
    first, last = map(int, re.search(r"\*\*N = \d+ seeds \((\d+)-(\d+)\)\*\*", text).groups())
    assert PLAN.seeds == tuple(range(first, last + 1)) and len(PLAN.seeds) == count
    command = re.search(r"python benchmarks/fspo_vs_grpo.py (.*?)\n\n", text, re.S).group(1).replace("\\\n", " ")
    arguments = command.split()
    assert arguments[arguments.index("--world") + 1] == PLAN.world
    assert arguments[arguments.index("--val-rows") + 1] == str(PLAN.val_rows)
    assert arguments[arguments.index("--seeds") + 1] == str(len(PLAN.seeds))
    assert arguments[arguments.index("--arms") + 1 : arguments.index("--arms") + 3] == [PLAN.arm, PLAN.baseline]
    # Nothing else: the steps and the model at the script's defaults, and exactly the plan's overrides.
    assert [arg for arg in arguments if not arg.startswith("--")] == [
        PLAN.world, PLAN.arm, PLAN.baseline, str(len(PLAN.seeds)), str(PLAN.val_rows), "outputs/shortcut",
        *PLAN.overrides,
    ]  # fmt: skip
    assert sorted(arg for arg in arguments if arg.startswith("--")) == [
        "--arms", "--output-dir", "--seeds", "--val-rows", "--world",
    ]  # fmt: skip
    assert f"**Budget per run.** The quickstart's: {PLAN.budget}," in text
    assert "**Primary metric.** Flawed-positive share" in text and PLAN.primary == "flawed_positive_share"
    assert "- Supported-chain accuracy" in text and PLAN.secondary == "supported_chain_accuracy"
    margin = float(re.search(r"interval of FSPO - GRPO lies above (-\d+\.\d+)", text).group(1))
    assert PLAN.non_inferior == "exact_match" and PLAN.margin == margin


def _pass(records: list[list[float]]) -> dict:
    """A validation pass as a run's result.json holds it."""
    per_question = {f"q{index}": record for index, record in enumerate(records)}
    steps = sum(record[4] for record in records)
    return {"per_question": per_question, "answer_f1": 0.5, "steps": steps, "answers": len(records)}


def _run(arm: str, seed: int, records: list[list[float]]) -> dict:
    config = report.bench.run_config(arm, seed, report.bench._parser().parse_args(report.plan_arguments()))
    before = _pass([[0, 1, 0.0, 0, 1, 0, 0]] * len(records))
    return {"arm": arm, "seed": seed, "config": config, "code_version": "abc", "seconds": 600.0 + seed,
            "before": before, "after": _pass(records)}  # fmt: skip


def _records(rng: random.Random, questions: int, flaw_rate: float) -> list[list[float]]:
    """Per-question records (contradicted, claims, f1, unseen, steps, exact_match, gold_chain_stated)."""
    out = []
    for _ in range(questions):
        right = rng.random() < 0.5
        contradicted = int(rng.random() < flaw_rate)
        out.append([contradicted, 2, float(right), 0, 3, int(right), int(rng.random() < 0.5)])
    return out


def _runs(seed: int, effect: float, seeds=PLAN.seeds) -> dict:
    rng = random.Random(seed)
    runs = {}
    for s in seeds:
        runs[PLAN.baseline, s] = _run(PLAN.baseline, s, _records(rng, 8, 0.4))
        runs[PLAN.arm, s] = _run(PLAN.arm, s, _records(rng, 8, max(0.0, 0.4 + effect)))
    return runs


def test_no_figure_before_every_planned_run_is_in():
    runs = _runs(0, -0.3)
    del runs[PLAN.arm, PLAN.seeds[-1]]
    for text in (report.section(runs), report.readme_section(runs)):
        assert f"{len(runs)} of {2 * len(PLAN.seeds)}" in text
        assert "no interim look" in text and "|" not in text and "interval" not in text


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10**6), effect=st.sampled_from([-0.4, -0.1, 0.0, 0.2]))
def test_each_figure_is_the_paired_t_interval_and_the_verdicts_follow_the_plan(seed, effect):
    runs = _runs(seed, effect)
    text = report.section(runs)
    for key in (PLAN.primary, PLAN.secondary, PLAN.non_inferior):
        values = []
        for s in PLAN.seeds:
            mine = report.bench.answer_metrics(runs[PLAN.arm, s]["after"])[key]
            theirs = report.bench.answer_metrics(runs[PLAN.baseline, s]["after"])[key]
            values.append(mine - theirs)
        mean, low, high, n = t_interval(values)
        row = next(line for line in text.splitlines() if line.startswith(f"| {report.TITLES[key]} | "))
        assert f" | {mean:+.3f} | [{low:+.3f}, {high:+.3f}] | {n} | " in row
        header = next(line for line in text.splitlines() if line.startswith("| figure |"))
        assert row.endswith(" |") and row.count("|") == header.count("|")  # every cell under a column
        if key == PLAN.primary:
            assert ("the interval includes 0" in text.split("- Primary")[1].split("\n")[0]) == (low <= 0 <= high)
        if key == PLAN.non_inferior:
            assert ("non-inferiority" in text) and (
                ("shown (" in text and "not shown" not in text) == (low > PLAN.margin)
            )
    # README's Results: the plan's rows and the verdicts as the section has them, and no descriptive figure.
    readme = report.readme_section(runs).splitlines()
    paired = text[text.index(report.TABLE_HEAD[0]) :].splitlines()
    planned = [line for line in paired if line.startswith("|") and "| descriptive |" not in line]
    assert [line for line in readme if line.startswith("|")] == planned
    assert [line for line in readme if line.startswith("- ")] == [
        line for line in text.splitlines() if line.startswith("- ")
    ]


@pytest.mark.parametrize(
    "change", ["drop the plan's override", "a smoke run's steps", "another arm's override", "another seed's file"]
)
def test_a_stored_run_the_plan_does_not_cover_is_refused(tmp_path, change):
    run = _run(PLAN.arm, 0, [[0, 1, 1.0, 0, 1, 1, 1]])
    if change == "drop the plan's override":
        run["config"].remove(PLAN.overrides[0])
    elif change == "a smoke run's steps":
        run["config"] = [item.replace("total_training_steps=12", "total_training_steps=1") for item in run["config"]]
    elif change == "another arm's override":
        run["config"].insert(-5, "fspo.flip=false")
    else:
        run["seed"] = 1
    path = report.run_path(PLAN.arm, 0, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(run))
    with pytest.raises(ValueError, match="not the plan's|holds arm"):
        report.stored_runs(tmp_path)


def test_a_run_is_stored_once_and_every_compared_figure_is_required(tmp_path):
    sweep = tmp_path / "sweep"
    run = _run(PLAN.arm, 0, [[0, 1, 1.0, 0, 1, 1, 1]])
    (sweep / PLAN.arm / "seed0").mkdir(parents=True)
    (sweep / PLAN.arm / "seed0" / "result.json").write_text(json.dumps(run))
    assert report.store(sweep, tmp_path / "stored") == [report.run_path(PLAN.arm, 0, tmp_path / "stored")]
    assert report.store(sweep, tmp_path / "stored")  # the same file again: nothing changes
    (sweep / PLAN.arm / "seed0" / "result.json").write_text(json.dumps({**run, "seconds": 1.0}))
    with pytest.raises(ValueError, match="stored already"):
        report.store(sweep, tmp_path / "stored")
    runs = _runs(0, 0.0)
    runs[PLAN.arm, 3]["after"] = {}  # no per-question records: no flawed-positive share
    with pytest.raises(ValueError, match="seeds \\[3\\]"):
        report.section(runs)


def test_the_docs_section_and_readmes_results_are_what_the_committed_runs_give():
    assert report.main(["--check"]) == 0


def test_the_levels_the_reruns_and_the_runs_that_stopped_writing_are_reported():
    runs = _runs(1, 0.0)
    runs[PLAN.baseline, 2] = _run(PLAN.baseline, 2, [[0, 0, 1.0, 0, 0, 1, 0]] * 8)  # right answers, no step
    runs[PLAN.arm, 5]["code_version"] = "def"
    same = {**runs[PLAN.arm, 5], "code_version": "ghi"}
    changed = json.loads(json.dumps(runs[PLAN.baseline, 7]))
    changed["code_version"] = "ghi"
    changed["after"]["per_question"]["q0"] = [9, 9, 0.0, 0, 9, 0, 0]
    text = report.section(runs, reruns=[same, changed])
    assert "Seed 5: the arms ran at different commits." in text
    assert "Rerun: FSPO seed 5 (def, again at ghi): the same record on 8 of 8 questions (the same run)." in text
    assert "Rerun: GRPO seed 7 (abc, again at ghi): the same record on 7 of 8 questions." in text
    assert "Stopped writing reasoning (under one step in 4 answers): GRPO seed 2 (0 steps in 8 answers)." in text
    rest = [value for seed, value in report.differences(runs, PLAN.primary).items() if seed != 2]
    mean, low, high, n = t_interval(rest)
    assert (
        f"without seed 2, FSPO − GRPO in flawed-positive share is {mean:+.3f}, 95% interval [{low:+.3f}, {high:+.3f}] ({n} seeds)."
        in text
    )
    grpo_exact = [report.bench.answer_metrics(runs[PLAN.baseline, s]["after"])["exact_match"] for s in PLAN.seeds]
    mean, std, _ = report.bench.mean_std(grpo_exact)
    row = next(line for line in text.splitlines() if line.startswith(f"| {PLAN.baseline} | 16 |"))
    assert f"{mean:.3f} ± {std:.3f}" in row
    assert text.count("| base model | 16 |") == 1


def test_a_rerun_must_be_planned_and_have_its_first_run_stored(tmp_path):
    runs = _runs(0, 0.0)
    first = report.run_path(PLAN.arm, 3, tmp_path)
    first.parent.mkdir(parents=True)
    first.write_text(json.dumps(runs[PLAN.arm, 3]))
    assert [r["seed"] for r in report.stored_reruns(runs, tmp_path)] == [3]
    assert report.stored_reruns({}, tmp_path / "none") == []
    with pytest.raises(ValueError, match="its first run is not stored"):
        report.stored_reruns({key: run for key, run in runs.items() if key != (PLAN.arm, 3)}, tmp_path)
    first.write_text(json.dumps({**runs[PLAN.arm, 3], "config": runs[PLAN.arm, 3]["config"][:-1]}))
    with pytest.raises(ValueError, match="not the plan's"):
        report.stored_reruns(runs, tmp_path)
