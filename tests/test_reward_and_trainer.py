"""The FSPO reward manager's and trainer's pure parts: evidence, verdicts, token labels, metrics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.labels import encode_labels
from fspo.reward import evidence_text, step_labels_for_response, verdicts_from_scores
from fspo.steps import reasoning_steps
from fspo.trainer import labels_tensor, step_metrics


def test_evidence_text_accepts_strings_lists_and_rejects_missing():
    assert evidence_text({"evidence": "  A is B. "}) == "A is B."
    assert evidence_text({"evidence": ["A is B.", "", "C is D."]}) == "A is B.\n\nC is D."
    assert evidence_text({"evidence": np.array(["A is B."], dtype=object)}) == "A is B."
    for missing in ({}, {"evidence": float("nan")}, {"evidence": None}, {"evidence": ""}, None, "text"):
        assert evidence_text(missing) == ""


def test_verdicts_from_scores():
    assert verdicts_from_scores([0.9, 0.5, 0.49, math.nan], threshold=0.5) == [1, 1, -1, 0]


def test_step_labels_cover_exactly_the_steps(qwen_tokenizer):
    response = " Ana works at Vigo. Vigo is in Pia.\n</think> <answer> Pia </answer>"
    ids = qwen_tokenizer(response, add_special_tokens=False)["input_ids"]
    text = qwen_tokenizer.decode(ids, skip_special_tokens=True)
    steps = reasoning_steps(text)
    assert [s.text for s in steps] == ["Ana works at Vigo.", "Vigo is in Pia."]
    labels = step_labels_for_response(ids, qwen_tokenizer, text, steps, [1, -1])
    tokens = qwen_tokenizer.convert_ids_to_tokens(ids)
    first = [t for t, l in zip(tokens, labels) if l == 1]
    second = [t for t, l in zip(tokens, labels) if l == -1]
    assert "".join(first).replace("Ġ", " ").replace("Ċ", "\n").strip() == "Ana works at Vigo."
    assert "".join(second).replace("Ġ", " ").replace("Ċ", "\n").strip() == "Vigo is in Pia."
    # The answer is never labelled by default...
    offsets_after = [i for i, t in enumerate(tokens) if "answer" in t]
    assert all(labels[i] == 0 for i in offsets_after)
    # ...and gets +1 with the released code's switch, from </think> on.
    released = step_labels_for_response(ids, qwen_tokenizer, text, steps, [1, -1], label_outside_reasoning=1)
    assert all(released[i] == 1 for i in offsets_after)
    assert released[: len(labels)] != labels


def test_labels_tensor_pads_and_rejects_bad_rows():
    labels, rejects = labels_tensor([encode_labels([1, -1, 0]), "", "0x2", "garbage"], [3, 2, 3, 2])
    assert labels.tolist() == [[1, -1, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert rejects == 2  # the wrong-length row and the malformed one


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.sampled_from([-1, 0, 1]), min_size=1, max_size=30), min_size=1, max_size=6))
def test_labels_tensor_round_trips(rows):
    labels, rejects = labels_tensor([encode_labels(r) for r in rows], [len(r) for r in rows])
    assert rejects == 0
    for i, row in enumerate(rows):
        assert labels[i, : len(row)].tolist() == row
        assert torch.all(labels[i, len(row) :] == 0)


def test_step_metrics():
    infos = [
        {"fspo_has_evidence": 1, "fspo_steps": 4, "fspo_supported": 3, "fspo_unsupported": 1, "fspo_labelled": 1,
         "fspo_verifier_seconds": 0.2},
        {"fspo_has_evidence": 1, "fspo_steps": 0, "fspo_labelled": 0},
        {"fspo_has_evidence": 0},
    ]
    metrics = step_metrics(infos)
    assert metrics["fspo/evidence_rollout_frac"] == pytest.approx(2 / 3)
    assert metrics["fspo/steps_per_response"] == 2.0
    assert metrics["fspo/supported_step_rate"] == 0.75
    assert metrics["fspo/unverifiable_rollout_rate"] == 0.5
    assert metrics["fspo/verifier_seconds"] == pytest.approx(0.1)
    assert step_metrics([])["fspo/supported_step_rate"] == 0.0
