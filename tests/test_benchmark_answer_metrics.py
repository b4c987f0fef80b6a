"""Per-answer figures of benchmarks/fspo_vs_grpo.py: defined for every run, from its per-question records."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_spec = importlib.util.spec_from_file_location(
    "fspo_vs_grpo", Path(__file__).parents[1] / "benchmarks" / "fspo_vs_grpo.py"
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
COMMITTED = Path(__file__).parents[1] / "benchmarks" / "results" / "fspo_vs_grpo.json"


@st.composite
def records(draw):
    """A per-question record: [contradicted, claims, F1, unseen, steps, exact match, gold chain stated]."""
    claims = draw(st.integers(0, 5))
    contradicted = draw(st.integers(0, claims))
    steps = claims + draw(st.integers(0, 3))
    exact = draw(st.booleans())
    return [contradicted, claims, 1.0 if exact else draw(st.sampled_from([0.0, 0.5])), 0, steps, int(exact)] + [
        draw(st.integers(0, 1))
    ]


runs = st.dictionaries(st.integers(0, 99).map(str), records(), min_size=1, max_size=24)


@settings(max_examples=60, deadline=None)
@given(runs)
def test_per_answer_figures_are_defined_for_every_run_and_flawed_and_chained_are_apart(per_question):
    """Every run that answered has a flawed-positive share, an exact match and steps per answer, even with no
    judged claim; a flawed positive and a supported chain are disjoint parts of the right answers."""
    figures = bench.answer_metrics({"per_question": per_question})
    for key in ("flawed_positive_share", "supported_chain_accuracy", "exact_match", "steps_per_answer"):
        assert figures[key] is not None
    parts = figures["flawed_positive_share"] + figures["supported_chain_accuracy"]
    assert 0 <= parts <= figures["exact_match"] + 1e-12 <= 1 + 1e-12
    claims = sum(record[1] for record in per_question.values())
    assert (figures["hallucinated_step_rate"] is None) == (claims == 0)
    steps = sum(record[4] for record in per_question.values())
    assert figures["non_claim_share"] == (None if steps == 0 else pytest.approx((steps - claims) / steps))


@settings(max_examples=60, deadline=None)
@given(runs)
def test_a_record_written_before_exact_match_was_kept_reads_f1_one_as_right(per_question):
    """The committed runs' records hold [contradicted, claims, F1, unseen]: exact match is F1 1 (one-word answers),
    steps come from the pass's count, the supported chain is unknown (None), the other figures are unchanged."""
    full = bench.answer_metrics({"per_question": per_question})
    steps = sum(record[4] for record in per_question.values())
    old = bench.answer_metrics({"per_question": {q: r[:4] for q, r in per_question.items()}, "steps": steps})
    assert old["supported_chain_accuracy"] is None
    assert {k: v for k, v in old.items() if k != "supported_chain_accuracy"} == {
        k: v for k, v in full.items() if k != "supported_chain_accuracy"
    }


def test_per_answer_figures_of_a_hand_counted_run():
    per_question = {
        "0": [1, 2, 1.0, 0, 3, 1, 0],  # right, a contradicted step: a flawed positive
        "1": [0, 2, 1.0, 0, 2, 1, 1],  # right, the gold chain stated, none contradicted: a supported chain
        "2": [0, 0, 1.0, 0, 0, 1, 0],  # right with no step: neither
        "3": [2, 2, 0.0, 0, 3, 0, 0],  # wrong
    }
    assert bench.answer_metrics({"per_question": per_question}) == {
        "flawed_positive_share": 0.25,
        "supported_chain_accuracy": 0.25,
        "exact_match": 0.75,
        "steps_per_answer": 2.0,
        "non_claim_share": 2 / 8,
        "hallucinated_step_rate": 3 / 6,
    }
    assert set(bench.answer_metrics({})) == {key for key, _ in bench.ANSWER_FIGURES}


def test_the_committed_runs_give_the_per_answer_flawed_positive_difference():
    """FSPO − GRPO in flawed positives per question, counted here from the committed per-question records (a right
    answer holding a contradicted step, over every question), is the comparison's, and `--table` prints it."""
    from fspo.evaluation.intervals import t_interval

    results = json.loads(COMMITTED.read_text())["runs"]

    def share(run: dict) -> float:
        records = run["after"]["per_question"].values()
        return sum(bench.is_exact_match(r) and r[0] > 0 for r in records) / len(records)

    by_seed = {(run["arm"], run["seed"]): share(run) for run in results if run["arm"] in ("fspo", "grpo")}
    seeds = sorted({seed for arm, seed in by_seed if arm == "fspo"} & {seed for arm, seed in by_seed if arm == "grpo"})
    mean, low, high, n = t_interval([by_seed[("fspo", s)] - by_seed[("grpo", s)] for s in seeds])
    row = next(
        r
        for r in bench.answer_comparisons(results)
        if (r["arm"], r["baseline"], r["figure"]) == ("fspo", "grpo", "flawed_positive_share")
    )
    assert (row["mean"], row["low"], row["high"], row["seeds"]) == pytest.approx((mean, low, high, n))
    assert f"| fspo − grpo | flawed positives per question | {mean:+.3f} | [{low:+.3f}, {high:+.3f}] | {n} |" in (
        bench.answer_table(results)
    )
