"""F-DPO's factuality-aware preference pairs from sampled responses labelled by a step verifier.

F-DPO attaches a binary hallucination label ``h`` (0 factual, 1 hallucinated) to both responses of a DPO pair
and then

1. flips a misordered pair: when the chosen response is hallucinated and the rejected one factual, the two
   swap, so the chosen response is never less factual than the rejected one;
2. trains with ``lambda * (h_rejected - h_chosen)`` subtracted from DPO's log-ratio margin inside beta
   (:mod:`fspo.methods.fdpo.loss`): pairs whose factuality differs must be separated by more; with equal factuality it
   is plain DPO.

Here a response is factual when the verifier supports every step of its reasoning it could judge (no step
scores below the threshold; unverifiable steps count as neither), and the DPO preference comes from the
outcome scorer: of two responses to one prompt the higher-scoring is chosen. Two responses with equal
scores but different factuality also make a pair, the factual one chosen. F-DPO's synthetic hallucinated
variants (:mod:`fspo.methods.fdpo.variants`) enter as inverted pairs (:func:`variant_pair`).

F-DPO's authors label ``h`` with an LLM judge of the whole response (GPT-4o-mini, "[[0]] fully factual ... [[1]]
any issue"; ``src/aixpert/data_construction/utils/prompt_templates.py`` lines 6-38); the step verifier is this
project's offline replacement.

A response with no judged step (no reasoning, or none the verifier could judge) gets no label: "every step
supported" would hold vacuously, and a label there would teach the policy that dropping its reasoning is
factual (in a smoke run that is what F-DPO learned: 0 steps per answer). Such a response pairs by outcome
score only, is never flipped and carries no margin.
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


def flip(chosen: Sample, rejected: Sample) -> Pair:
    """F-DPO's label flip: a hallucinated chosen over a factual rejected swaps places; any other pair stays
    (a pair with an unlabelled response too: its factuality is unknown)."""
    if _both_labelled(chosen, rejected) and chosen.hallucinated > rejected.hallucinated:
        return Pair(chosen=rejected, rejected=chosen, flipped=True)
    return Pair(chosen=chosen, rejected=rejected, flipped=False)


def preference_pairs(samples: Sequence[Sample], max_pairs: int) -> list[Pair]:
    """Up to ``max_pairs`` flipped pairs of one prompt's samples.

    Candidates are the sample pairs that differ in outcome score (higher chosen) or, at equal scores, in
    factuality when both are labelled (factual chosen), then flipped. Pairs whose factuality differs come first (the margin acts on
    them), then the larger score gap; ties keep the samples' order, so the result is deterministic.
    """
    if max_pairs < 1:
        raise ValueError(f"max_pairs must be >= 1, got {max_pairs}")
    candidates = []
    for (i, a), (j, b) in itertools.combinations(enumerate(samples), 2):
        if a.score != b.score:
            chosen, rejected = (a, b) if a.score > b.score else (b, a)
        elif _both_labelled(a, b) and a.hallucinated != b.hallucinated:
            chosen, rejected = (a, b) if a.hallucinated < b.hallucinated else (b, a)
        else:
            continue
        pair = flip(chosen, rejected)
        candidates.append((-pair.margin_weight, -abs(a.score - b.score), i, j, pair))
    candidates.sort(key=lambda item: item[:4])
    return [item[-1] for item in candidates[:max_pairs]]


def variant_pair(factual: Sample, corrupted_text: str) -> Pair:
    """A synthetic hallucinated variant as F-DPO's authors enter it, inverted (the corrupted text chosen with h = 1,
    the factual response rejected with h = 0), then through :func:`flip`: the factual response chosen, flipped."""
    if factual.hallucinated != 0:
        raise ValueError("a hallucinated variant rewrites a factual response (hallucinated=0)")
    return flip(chosen=Sample(corrupted_text, factual.score, 1), rejected=factual)


def variant_sources(samples: Sequence[Sample], count: int) -> list[Sample]:
    """The factual responses a prompt's variants rewrite: up to ``count``, the best-scoring first (the chosen
    answers of the authors' (h_w = 0, h_l = 1) pairs)."""
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
