"""benchmarks/claim_abstention.py: the verifier's labels against the world judge's verdicts."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "claim_abstention", Path(__file__).parents[1] / "benchmarks" / "claim_abstention.py"
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_agreement_counts_three_ways_and_apart_the_claims_abstained_and_the_non_claims_labelled():
    verdicts = ["supported", "supported", "contradicted", "contradicted", "not_a_claim", "not_a_claim"]
    labels = [1, 0, -1, 1, 0, -1]
    assert bench.agreement(verdicts, labels) == {
        "steps": 6,
        "judge_non_claims": 2,
        "agreement": 3 / 6,
        "balanced_accuracy": (1 / 1 + 1 / 2) / 2,  # over the claims it labels: supported 1 of 1, contradicted 1 of 2
        "claims_abstained": 1 / 4,
        "non_claims_labelled": 1 / 2,
    }
    assert bench.verifier_labels([1.0, 0.99, math.nan], 1.0) == [1, -1, 0]
