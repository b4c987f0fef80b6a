"""How well a verifier separates supported from unsupported claims: pure metrics on (score, label) lists.

Labels are 1 (the evidence supports the claim) or 0 (it does not); scores are the verifier's support
probabilities. A threshold ``t`` predicts "supported" for ``score >= t``, as the reward manager does.

```python
from fspo.verifier_tools.quality import auroc, best_threshold

auroc([0.9, 0.4, 0.6, 0.1], [1, 1, 0, 0])           # 0.75
best_threshold([0.9, 0.4, 0.6, 0.1], [1, 1, 0, 0])  # (0.4, 0.75)
```
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _check(scores: Sequence[float], labels: Sequence[int]) -> tuple[int, int]:
    """Validates the inputs; returns (positives, negatives)."""
    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} scores but {len(labels)} labels")
    if any(label not in (0, 1) for label in labels):
        raise ValueError("labels must be 0 (unsupported) or 1 (supported)")
    if any(math.isnan(s) for s in scores):
        raise ValueError("scores must not be NaN; drop unverifiable pairs first (see summarise)")
    positives = sum(labels)
    negatives = len(labels) - positives
    if not positives or not negatives:
        raise ValueError(
            f"need both supported and unsupported pairs, got {positives} supported and {negatives} unsupported"
        )
    return positives, negatives


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of ``values`` in ascending order; tied values share the mean of their ranks."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def auroc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve: the chance that a random supported pair outscores a random unsupported one.

    Computed as the Mann-Whitney rank statistic, so a tie between a supported and an unsupported pair
    counts one half. 0.5 is chance; below 0.5 the verifier prefers the unsupported claims.
    """
    positives, negatives = _check(scores, labels)
    ranks = average_ranks(scores)
    positive_rank_sum = sum(r for r, label in zip(ranks, labels) if label == 1)
    return (positive_rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def balanced_accuracy(scores: Sequence[float], labels: Sequence[int], threshold: float) -> float:
    """Mean of the true-positive and true-negative rates when ``score >= threshold`` means supported."""
    positives, negatives = _check(scores, labels)
    true_positives = sum(1 for s, label in zip(scores, labels) if label == 1 and s >= threshold)
    true_negatives = sum(1 for s, label in zip(scores, labels) if label == 0 and s < threshold)
    return (true_positives / positives + true_negatives / negatives) / 2


def best_threshold(scores: Sequence[float], labels: Sequence[int]) -> tuple[float, float]:
    """The threshold that maximises balanced accuracy, and that accuracy.

    Candidates are the observed scores (a threshold between two of them predicts the same as the
    higher one); among equally good ones the lowest wins. One sweep over the sorted scores: O(n log n).
    """
    positives, negatives = _check(scores, labels)
    pairs = sorted(zip(scores, labels))
    best = (pairs[0][0], 0.5)  # the lowest score: everything supported, TPR 1, TNR 0
    positives_below = negatives_below = 0
    i = 0
    while i < len(pairs):
        threshold = pairs[i][0]
        accuracy = ((positives - positives_below) / positives + negatives_below / negatives) / 2
        if accuracy > best[1]:
            best = (threshold, accuracy)
        while i < len(pairs) and pairs[i][0] == threshold:
            positives_below += pairs[i][1]
            negatives_below += 1 - pairs[i][1]
            i += 1
    return best


def reliability_bins(scores: Sequence[float], labels: Sequence[int], bins: int = 10) -> list[dict]:
    """Equal-width score bins over [0, 1]: how often the pairs of each bin are really supported.

    A calibrated verifier's ``supported_rate`` tracks its ``mean_score``. Empty bins are left out.

    Returns:
        One dict per non-empty bin: ``low``, ``high``, ``count``, ``mean_score``, ``supported_rate``.
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    members: list[list[tuple[float, int]]] = [[] for _ in range(bins)]
    for score, label in zip(scores, labels):
        if math.isnan(score):
            continue
        members[min(bins - 1, max(0, int(score * bins)))].append((score, label))
    return [
        {
            "low": index / bins,
            "high": (index + 1) / bins,
            "count": len(group),
            "mean_score": sum(s for s, _ in group) / len(group),
            "supported_rate": sum(label for _, label in group) / len(group),
        }
        for index, group in enumerate(members)
        if group
    ]


def summarise(scores: Sequence[float], labels: Sequence[int], threshold: float, bins: int = 10) -> dict:
    """All quality figures of one verifier on one labelled set.

    Unverifiable (NaN) scores are counted and left out of the metrics: the reward manager gives such
    steps label 0, neither supported nor unsupported.

    Returns:
        ``pairs``, ``supported``, ``unsupported``, ``unverifiable`` (per-class counts), ``auroc``,
        ``threshold``, ``balanced_accuracy`` (at ``threshold``), ``best_threshold``,
        ``best_balanced_accuracy``, ``reliability`` (see [`reliability_bins`]).
    """
    kept = [(s, label) for s, label in zip(scores, labels) if not math.isnan(s)]
    kept_scores = [s for s, _ in kept]
    kept_labels = [label for _, label in kept]
    calibrated, calibrated_accuracy = best_threshold(kept_scores, kept_labels)
    return {
        "pairs": len(scores),
        "supported": sum(labels),
        "unsupported": len(labels) - sum(labels),
        "unverifiable": len(scores) - len(kept),
        "auroc": auroc(kept_scores, kept_labels),
        "threshold": threshold,
        "balanced_accuracy": balanced_accuracy(kept_scores, kept_labels, threshold),
        "best_threshold": calibrated,
        "best_balanced_accuracy": calibrated_accuracy,
        "reliability": reliability_bins(kept_scores, kept_labels, bins),
    }
