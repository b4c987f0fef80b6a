"""Per-run step figures: the world judge, the lexical and embedding verifiers, and the copy rate."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.data.synthetic import labelled_facts, make_rows
from fspo.quickstart.step_report import flawed_positives, is_copy, judge_counts, step_report, validation_samples

EVIDENCE = (
    "Nora Vik works for Bolt Mills. Sam Oke works for Tide Labs. Bolt Mills is headquartered in Limaton. "
    "Tide Labs is headquartered in Dorvale."
)
GOLD = ["Nora Vik works for Bolt Mills.", "Bolt Mills is headquartered in Limaton."]
COPYING = "Nora Vik works for Bolt Mills. Bolt Mills is headquartered in Limaton. </think> <answer> Limaton </answer>"
INVENTING = (
    "Nora Vik works for Tide Labs. Let me think. Tide Labs is based in Dorvale. </think> <answer> Dorvale </answer>"
)


def test_judge_counts_steps_by_verdict_and_copies():
    counts = judge_counts(
        [
            {"response": COPYING, "evidence": EVIDENCE, "gold_facts": GOLD},
            {"response": INVENTING, "evidence": EVIDENCE, "gold_facts": GOLD},
        ]
    )
    assert counts == {"supported": 3, "contradicted": 1, "not_a_claim": 1, "copies": 2, "steps": 5}


@pytest.mark.parametrize(
    "step, copy",
    [
        ("Nora Vik works for Bolt Mills.", True),
        ("Tide Labs is headquartered in Dorvale", True),
        ("Tide Labs is based in Dorvale.", False),
        ("  .", False),
    ],
)
def test_is_copy(step, copy):
    assert is_copy(step, EVIDENCE) is copy


def test_step_report_sets_the_judge_beside_both_verifiers():
    report = step_report(
        [
            {"response": COPYING, "evidence": EVIDENCE, "gold_facts": GOLD},
            {"response": INVENTING, "evidence": EVIDENCE, "gold_facts": GOLD},
        ]
    )
    assert report["answers"] == 2 and report["steps"] == 5 and report["judged_claims"] == 4
    assert report["hallucinated_step_rate"] == pytest.approx(1 / 4)
    assert report["copy_rate"] == pytest.approx(2 / 5)
    # "Nora Vik works for Tide Labs." is made of evidence words from two sentences: the quickstart's lexical
    # verifier (each clause in its own sentence) calls it unsupported, as the judge does; "based" is not in the
    # evidence; "Let me think." has no content word (unverifiable, left out).
    assert report["lexical_supported_step_rate"] == pytest.approx(2 / 4)
    assert 0.0 <= report["embedding_supported_step_rate"] <= 1.0


def test_step_report_of_no_answers_has_no_rates():
    report = step_report([], verifiers=("lexical",))
    assert report["hallucinated_step_rate"] is None and report["copy_rate"] is None
    assert report["flawed_positive_rate"] is None and report["right_answers"] == 0
    assert report["lexical_supported_step_rate"] is None


def test_validation_samples_pairs_the_dump_with_its_rows(tmp_path):
    rows = make_rows(3, seed=1, split="test")
    dump = tmp_path / "0.jsonl"
    records = [
        {"input": f"user\nContext:\n{row['extra_info']['evidence']}\n\nQuestion: ?", "output": f"answer {i}"}
        for i, row in enumerate(reversed(rows))
    ]
    records.append({"input": "a prompt of other data", "output": "x"})
    dump.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    samples = validation_samples(dump, rows)
    assert [s["response"] for s in samples] == ["answer 0", "answer 1", "answer 2"]
    assert [s["evidence"] for s in samples] == [r["extra_info"]["evidence"] for r in reversed(rows)]
    assert samples[0]["gold_facts"] == list(rows[-1]["extra_info"]["gold_facts"])
    assert [s["ground_truth"] for s in samples] == [r["reward_model"]["ground_truth"] for r in reversed(rows)]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=10_000),
            st.sampled_from(["chain", "invented hop", "dropped hop"]),
            st.sampled_from(["exact", "decorated", "longer", "other", "missing"]),
        ),
        max_size=8,
    )
)
def test_flawed_positives_counts_right_answers_holding_a_contradicted_step(answers):
    """Each answer: a synthetic world's gold chain, whole, with one hop swapped for its false counterpart (a step
    the judge contradicts), or with one hop left out; ending in the gold answer as written, decorated (case,
    article, period: still an exact match after SQuAD normalisation), inside a longer answer, another answer,
    or no answer block."""
    samples, right, flawed, unchained = [], 0, 0, 0
    for seed, reasoning, answer_kind in answers:
        example, claims = labelled_facts(random.Random(seed))
        gold = example.ground_truth
        steps = [claim for claim, label in claims if label == 1]
        hop = seed % len(steps)
        if reasoning == "invented hop":
            steps[hop] = [claim for claim, label in claims if label == 0][hop]
        elif reasoning == "dropped hop":
            del steps[hop]
        answer = {
            "exact": gold,
            "decorated": f"The {gold.upper()}.",
            "longer": f"{gold} and Lima",
            "other": "Lima",
            "missing": None,
        }[answer_kind]
        closing = "" if answer is None else f" </think> <answer> {answer} </answer>"
        samples.append(
            {
                "response": " ".join(steps) + closing,
                "evidence": example.evidence,
                "gold_facts": example.gold_facts,
                "ground_truth": gold,
            }
        )
        is_right = answer_kind in ("exact", "decorated")
        right += is_right
        flawed += is_right and reasoning == "invented hop"
        unchained += is_right and reasoning != "chain"
    # An answer of data without a ground truth is left out, right or not.
    samples.append({"response": COPYING, "evidence": EVIDENCE, "gold_facts": GOLD})
    assert flawed_positives(samples) == {
        "right_answers": right,
        "flawed_positives": flawed,
        "flawed_positive_rate": flawed / right if right else None,
        "unchained_positives": unchained,
        "unchained_positive_rate": unchained / right if right else None,
    }


def test_step_report_gives_the_flawed_positive_rate():
    right = {"evidence": EVIDENCE, "gold_facts": GOLD, "ground_truth": "Limaton"}
    report = step_report(
        [
            {"response": COPYING, **right},
            {"response": INVENTING.replace("Dorvale </answer>", "Limaton </answer>"), **right},
            {"response": INVENTING, **right},
        ],
        verifiers=(),
    )
    assert (report["right_answers"], report["flawed_positives"], report["unchained_positives"]) == (2, 1, 1)
    assert report["flawed_positive_rate"] == pytest.approx(1 / 2)
