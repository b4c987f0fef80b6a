"""F-DPO's factuality-aware preference pairs from sampled responses labelled by a step verifier.

F-DPO attaches a binary hallucination label ``h`` (0 factual, 1 hallucinated) to both responses of a DPO pair
and trains with ``lambda * (h_rejected - h_chosen)`` subtracted from DPO's log-ratio margin inside beta
(:mod:`fspo.methods.fdpo.loss`): pairs whose factuality differs must be separated by more; with equal factuality it
is plain DPO.

Here a response is factual when the verifier supports every step of its reasoning it could judge (no step
scores below the threshold; unverifiable steps count as neither), and the DPO preference comes from the
outcome scorer: of two responses to one prompt the higher-scoring is chosen. Two responses with equal
scores but different factuality also make a pair, the factual one chosen.

Which pairs are kept (``mix``):

- ``authors`` (default), the mix of F-DPO's code (VectorInstitute/Factual-Preference-Alignment,
  ``src/aixpert/data_construction/``): sampled pairs in the buckets (h_chosen, h_rejected) = (0, 0), (1, 1) and
  (0, 1) are kept as they are; a misordered pair (1, 0) is dropped (``utils/data_utils.py`` lines 101-117,
  ``stage_6_merging/data_merge_train.py`` lines 44-54). The flip acts only on the synthetic inversions
  (:func:`variant_pair`), rewrites of the chosen response of a (0, 1) pair
  (``stage_5_syntheticdata/data_synthetic_train.py`` lines 67-68). The cap per prompt cuts the pairs with the
  smallest score gap first, so a right-over-wrong pair is never cut for a pair at equal score.
- ``flip-real-pairs``, the paper's rule: a misordered sampled pair swaps (:func:`flip`), and pairs with a
  factuality margin are kept first. It is what this command did before the ``authors`` mix; the committed
  F-DPO runs of ``benchmarks/fspo_vs_grpo.py`` used it.

F-DPO's authors label ``h`` with an LLM judge of the whole response (GPT-4o-mini, "[[0]] fully factual ... [[1]]
any issue"; ``src/aixpert/data_construction/utils/prompt_templates.py`` lines 6-38); the step verifier is this
project's offline replacement.

A response with no judged step (no reasoning, or none the verifier could judge) gets no label: "every step
supported" would hold vacuously, and a label there would teach the policy that dropping its reasoning is
factual (in a smoke run that is what F-DPO learned: 0 steps per answer). Such a response pairs by outcome
score only, is never flipped or dropped, and carries no margin.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """One sampled response: its text, outcome score and hallucination label (1 = a step unsupported,
    0 = every judged step supported, None = no step judged)."""

    text: str
    score: float
    hallucinated: int | None


@dataclass(frozen=True)
class Pair:
    """A preference pair after F-DPO's flip; ``margin_weight`` = h_rejected - h_chosen (0 or 1)."""

    chosen: Sample
    rejected: Sample
    flipped: bool

    @property
    def margin_weight(self) -> int:
        """1 when a factual response is chosen over a hallucinated one; 0 otherwise (or a response unlabelled)."""
        if not _both_labelled(self.chosen, self.rejected):
            return 0
        return self.rejected.hallucinated - self.chosen.hallucinated


def hallucination_label(verdicts: Sequence[int]) -> int | None:
    """F-DPO's binary label of a response from its step verdicts (+1, 0 unverifiable, -1): 1 if any step is -1,
    0 if every judged step is +1, None if no step was judged."""
    if not any(verdicts):
        return None
    return int(any(verdict < 0 for verdict in verdicts))


def _both_labelled(a: Sample, b: Sample) -> bool:
    return a.hallucinated is not None and b.hallucinated is not None


def misordered(chosen: Sample, rejected: Sample) -> bool:
    """The bucket (h_chosen, h_rejected) = (1, 0): a hallucinated response preferred over a factual one."""
    return _both_labelled(chosen, rejected) and chosen.hallucinated > rejected.hallucinated


def flip(chosen: Sample, rejected: Sample) -> Pair:
    """F-DPO's label flip: a misordered pair swaps places; any other pair stays (a pair with an unlabelled response
    too: its factuality is unknown)."""
    if misordered(chosen, rejected):
        return Pair(chosen=rejected, rejected=chosen, flipped=True)
    return Pair(chosen=chosen, rejected=rejected, flipped=False)


# The kept sampled pairs (``mix``): the authors' code's, or the paper's flip of every misordered pair.
AUTHORS_MIX, FLIP_REAL_PAIRS_MIX = "authors", "flip-real-pairs"
PAIR_MIXES = (AUTHORS_MIX, FLIP_REAL_PAIRS_MIX)


def candidate_pairs(samples: Sequence[Sample]) -> list[tuple[int, int, Sample, Sample]]:
    """Each pair of a prompt's samples with a preference, as ``(i, j, preferred, other)`` in the samples' order: the
    higher outcome score preferred or, at equal scores, the factual response when both are labelled."""
    candidates = []
    for (i, a), (j, b) in itertools.combinations(enumerate(samples), 2):
        if a.score != b.score:
            preferred, other = (a, b) if a.score > b.score else (b, a)
        elif _both_labelled(a, b) and a.hallucinated != b.hallucinated:
            preferred, other = (a, b) if a.hallucinated < b.hallucinated else (b, a)
        else:
            continue
        candidates.append((i, j, preferred, other))
    return candidates


def preference_pairs(samples: Sequence[Sample], max_pairs: int, mix: str = AUTHORS_MIX) -> list[Pair]:
    """Up to ``max_pairs`` pairs of one prompt's samples (:func:`candidate_pairs`) under ``mix``.

    ``authors``: misordered pairs dropped, the others unchanged; the larger score gap first, then the pairs with a
    factuality margin. ``flip-real-pairs``: every pair through :func:`flip`; the pairs with a margin first, then
    the larger score gap. Ties keep the samples' order, so the result is deterministic.
    """
    if max_pairs < 1:
        raise ValueError(f"max_pairs must be >= 1, got {max_pairs}")
    if mix not in PAIR_MIXES:
        raise ValueError(f"mix must be one of {', '.join(PAIR_MIXES)}, got {mix!r}")
    ranked = []
    for i, j, preferred, other in candidate_pairs(samples):
        gap = abs(preferred.score - other.score)
        if mix == FLIP_REAL_PAIRS_MIX:
            pair = flip(preferred, other)
            ranked.append(((-pair.margin_weight, -gap, i, j), pair))
        elif not misordered(preferred, other):
            pair = Pair(chosen=preferred, rejected=other, flipped=False)
            ranked.append(((-gap, -pair.margin_weight, i, j), pair))
    ranked.sort(key=lambda item: item[0])
    return [pair for _, pair in ranked[:max_pairs]]


def variant_pair(factual: Sample, corrupted_text: str) -> Pair:
    """A synthetic hallucinated variant as F-DPO's authors enter it, inverted (the corrupted text chosen with h = 1,
    the factual response rejected with h = 0), then through :func:`flip`: the factual response chosen, flipped."""
    if factual.hallucinated != 0:
        raise ValueError("a hallucinated variant rewrites a factual response (hallucinated=0)")
    return flip(chosen=Sample(corrupted_text, factual.score, 1), rejected=factual)


def variant_sources(samples: Sequence[Sample], count: int, mix: str = AUTHORS_MIX) -> list[Sample]:
    """The factual responses a prompt's variants rewrite: up to ``count``, the best-scoring first.

    ``authors``: the chosen responses of the prompt's (0, 1) pairs, as the authors corrupt the chosen answer of
    (h_w = 0, h_l = 1) pairs only; ``flip-real-pairs``: any factual response.
    """
    if mix == AUTHORS_MIX:
        chosen = {id(a) for _, _, a, b in candidate_pairs(samples) if (a.hallucinated, b.hallucinated) == (0, 1)}
        factual = [sample for sample in samples if id(sample) in chosen]
    else:
        factual = [sample for sample in samples if sample.hallucinated == 0]
    return sorted(factual, key=lambda sample: -sample.score)[:count]


def pair_row(prompt: str, pair: Pair, source: str = "sampled") -> dict:
    """A row of the pairs file: TRL's ``prompt``/``chosen``/``rejected`` plus F-DPO's labels and where the pair
    comes from (``sampled``, or ``synthetic_inversion`` as the authors name their variants)."""
    return {
        "prompt": prompt,
        "chosen": pair.chosen.text,
        "rejected": pair.rejected.text,
        "chosen_hallucinated": pair.chosen.hallucinated,
        "rejected_hallucinated": pair.rejected.hallucinated,
        "fdpo_margin_weight": pair.margin_weight,
        "flipped": pair.flipped,
        "chosen_score": pair.chosen.score,
        "rejected_score": pair.rejected.score,
        "source": source,
    }
