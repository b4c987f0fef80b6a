"""benchmarks/method_terms.py: the KnowRL, FAPO and F-DPO figures of docs/methods.md, recomputed from committed files."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).parents[1]
_spec = importlib.util.spec_from_file_location("method_terms", ROOT / "benchmarks" / "method_terms.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

RERUN = "run .venv/bin/python benchmarks/method_terms.py"


def _committed() -> dict:
    return json.loads(bench.RESULTS.read_text())


def test_committed_figures_are_those_of_the_committed_rollouts():
    committed = _committed()
    responses = committed["rollouts"]["responses"]
    assert [len(answers) for answers in responses] == [bench.SAMPLES] * bench.PROMPTS
    recomputed = bench.figures(responses, json.loads(bench.FSPO_VS_GRPO.read_text()))
    assert recomputed == committed["figures"], f"benchmarks/results/method_terms.json is stale: {RERUN}"


def test_methods_page_states_the_committed_figures():
    page = " ".join((ROOT / "docs" / "methods.md").read_text().split())
    pair_mix = json.loads(bench.FDPO_PAIR_MIX.read_text())
    missing = [phrase for phrase in bench.doc_phrases(_committed()["figures"], pair_mix) if phrase not in page]
    assert not missing, f"docs/methods.md does not state {missing} (benchmarks/results/*.json's figures)"


def _rollout(base: float, term: float) -> dict:
    return {"correct": base == 1.0, "base": base, "term": term, "judged": 1, "judged_clauses": 1, "unsupported": 0}


def test_a_group_is_set_by_the_term_only_when_its_rollouts_are_equally_graded_and_their_terms_differ():
    groups = [
        [_rollout(0.0, 0.0), _rollout(0.0, 3e-3)],  # equally graded, terms differ: the term is the advantage
        [_rollout(0.0, 1e-3), _rollout(0.0, 1e-3)],  # equally graded, equal terms: no advantage at all
        [_rollout(1.0, 0.0), _rollout(0.0, 3e-3)],  # graded apart: the outcome sets the order
    ]
    figures = bench.knowrl_figures(groups)
    assert (figures["equally_graded_groups"], figures["groups_set_by_term"]) == (2, 1)
    assert (figures["right"], figures["term_max"]) == (1, 3e-3)


@given(st.floats(min_value=1e-12, max_value=1e6, allow_nan=False))
def test_short_e_drops_the_exponents_leading_zero_and_keeps_two_digits(value):
    text = bench._short_e(value)
    mantissa, exponent = text.split("e")
    assert not exponent.lstrip("-").startswith("0") or exponent == "0"
    assert float(text) == float(f"{value:.1e}") and len(mantissa.replace(".", "")) == 2


def test_pair_mix_totals_sum_the_seeds():
    seed = {
        "flip-real-pairs:pairs": 10,
        "flip-real-pairs:flipped": 1,
        "outcome_pairs": 8,
        "flip-real-pairs:outcome_pairs_cut": 2,
        "authors:outcome_pairs_cut": 0,
    }
    totals = bench.pair_mix_totals({"seeds": {"0": seed, "1": seed}})
    assert totals == {key: 2 * value for key, value in seed.items()}
