"""FSPO's advantage adjustment: each labelled token's advantage takes its label's sign.

After the advantage estimator runs, a token labelled +1 (its step is supported by the evidence) gets a
non-negative advantage and a token labelled -1 a non-positive one, by flipping the sign where label and
advantage disagree: `A = where(label * A < 0, -A, A)`. Label 0, zero advantages and positions outside the
response mask are left alone.
"""

from __future__ import annotations

import torch


def apply_step_labels(advantages: torch.Tensor, labels: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Flip the sign of advantages that disagree with their token's label.

    Args:
        advantages: `(batch, response_len)` advantages from any estimator.
        labels: `(batch, response_len)` token labels in {-1, 0, 1}.
        response_mask: `(batch, response_len)`, nonzero on response tokens.

    Returns:
        A new tensor with the dtype and device of `advantages`; the inputs are not changed.
    """
    _check_shapes(advantages, labels, response_mask)
    labels = labels.to(device=advantages.device)
    disagree = (labels.sign() * advantages.sign() < 0) & response_mask.to(device=advantages.device).bool()
    return torch.where(disagree, -advantages, advantages)


def flip_stats(
    advantages_before: torch.Tensor,
    advantages_after: torch.Tensor,
    labels: torch.Tensor,
    response_mask: torch.Tensor,
) -> dict[str, float]:
    """Metrics on the flip, as fractions of response tokens (log them under a `fspo/` prefix).

    Returns:
        `labelled_frac`, `supported_frac` (+1), `unsupported_frac` (-1), `flipped_frac`,
        `flipped_to_negative_frac`, `flipped_to_positive_frac`, and `labelled_responses_frac` (responses with
        at least one labelled token). All 0.0 when there are no response tokens.
    """
    _check_shapes(advantages_before, labels, response_mask)
    _check_shapes(advantages_after, labels, response_mask)
    mask = response_mask.bool()
    labels = labels.to(device=mask.device)
    before = advantages_before.to(device=mask.device)
    after = advantages_after.to(device=mask.device)
    response_tokens = int(mask.sum())
    flipped = mask & (torch.sign(before) * torch.sign(after) < 0)
    counts = {
        "labelled_frac": mask & (labels != 0),
        "supported_frac": mask & (labels > 0),
        "unsupported_frac": mask & (labels < 0),
        "flipped_frac": flipped,
        "flipped_to_negative_frac": flipped & (after < 0),
        "flipped_to_positive_frac": flipped & (after > 0),
    }
    stats = {name: (int(hits.sum()) / response_tokens if response_tokens else 0.0) for name, hits in counts.items()}
    responses = int(mask.any(dim=-1).sum())
    labelled_responses = int((mask & (labels != 0)).any(dim=-1).sum())
    stats["labelled_responses_frac"] = labelled_responses / responses if responses else 0.0
    return stats


def _check_shapes(advantages: torch.Tensor, labels: torch.Tensor, response_mask: torch.Tensor) -> None:
    if advantages.dim() != 2:
        raise ValueError(f"advantages must be (batch, response_len), got shape {tuple(advantages.shape)}")
    if labels.shape != advantages.shape or response_mask.shape != advantages.shape:
        raise ValueError(
            f"advantages {tuple(advantages.shape)}, labels {tuple(labels.shape)} and response_mask "
            f"{tuple(response_mask.shape)} must have the same shape"
        )
