"""The FSPO flip: labelled response tokens take their label's sign; everything else is untouched."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.advantage import apply_step_labels, flip_stats


@st.composite
def batches(draw):
    batch = draw(st.integers(1, 4))
    length = draw(st.integers(1, 12))
    size = batch * length
    values = draw(
        st.lists(
            st.sampled_from([-2.5, -1.0, -0.1, 0.0, 0.3, 1.0, 4.0]),
            min_size=size,
            max_size=size,
        )
    )
    labels = draw(st.lists(st.sampled_from([-1, 0, 1]), min_size=size, max_size=size))
    mask = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.bfloat16]))
    shape = (batch, length)
    return (
        torch.tensor(values, dtype=dtype).reshape(shape),
        torch.tensor(labels, dtype=torch.long).reshape(shape),
        torch.tensor(mask, dtype=torch.float32).reshape(shape),
    )


@settings(max_examples=100, deadline=None)
@given(batches())
def test_flip_rule(batch):
    advantages, labels, mask = batch
    original = advantages.clone()
    flipped = apply_step_labels(advantages, labels, mask)
    assert torch.equal(advantages, original)  # input not mutated
    assert flipped.dtype == advantages.dtype and flipped.shape == advantages.shape
    assert torch.equal(flipped.abs(), advantages.abs())
    active = mask.bool() & (labels != 0) & (advantages != 0)
    assert torch.all(torch.sign(flipped[active]) == labels[active].to(flipped.dtype))
    assert torch.equal(flipped[~active], advantages[~active])
    assert torch.equal(apply_step_labels(flipped, labels, mask), flipped)  # idempotent


def test_flip_example():
    advantages = torch.tensor([[1.0, -1.0, 2.0, -2.0, 3.0, -3.0]])
    labels = torch.tensor([[1, 1, -1, -1, 0, -1]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    assert apply_step_labels(advantages, labels, mask).tolist() == [[1.0, 1.0, -2.0, -2.0, 3.0, -3.0]]


def test_flip_stats():
    before = torch.tensor([[1.0, -1.0, 2.0, -2.0, 3.0, -3.0], [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]])
    labels = torch.tensor([[1, 1, -1, -1, 0, -1], [0, 0, 0, 0, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
    after = apply_step_labels(before, labels, mask)
    stats = flip_stats(before, after, labels, mask)
    assert stats == pytest.approx(
        {
            "labelled_frac": 4 / 9,
            "supported_frac": 2 / 9,
            "unsupported_frac": 2 / 9,
            "flipped_frac": 2 / 9,
            "flipped_to_negative_frac": 1 / 9,
            "flipped_to_positive_frac": 1 / 9,
            "labelled_responses_frac": 1 / 2,
        }
    )
    assert all(isinstance(value, float) for value in stats.values())
    empty = torch.zeros(1, 3)
    assert set(flip_stats(empty, empty, empty.long(), empty).values()) == {0.0}


def test_shape_errors_name_the_shapes():
    with pytest.raises(ValueError, match="same shape"):
        apply_step_labels(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"\(batch, response_len\)"):
        apply_step_labels(torch.zeros(3), torch.zeros(3), torch.ones(3))
