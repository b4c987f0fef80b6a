"""The verifier interface and the pipeline every backend shares.

A verifier maps (evidence, claim) pairs to the probability that the evidence supports the claim.
``math.nan`` means *unverifiable*: the FSPO reward manager turns NaN into label 0 (neither rewarded nor
penalised) and counts it, so a flaky verifier shows up in the metrics instead of silently biasing the labels.
A NaN comes two ways, told apart by :class:`ScoredPairs`: a pair that holds nothing to check (a step without
content words) is a verdict; a pair the verifier failed on (an error isolated to it, such as an out-of-memory
row or a model output of NaN or ±inf, :class:`fspo.verifiers.batching.NonFiniteOutput`; a judge that gave no
verdict) is a failure, counted by the run-level guard (:mod:`fspo.training.verifier_loss`). A ±inf score is
never a verdict: :func:`fail_infinite` lists it as failed, whatever backend or server it came from.
"""

from __future__ import annotations

import asyncio
import math
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from fspo.config.vocabulary import STRICT_THRESHOLD_BACKENDS
from fspo.utils.coalesce import Coalescer
from fspo.verifiers.text import top_k_evidence

UNVERIFIABLE = math.nan
# What the coalescer gives a pair that failed on its own (isolate_failures); reported as NaN plus its index.
_PAIR_FAILED = object()

# A backend without a token budget merges at most this many pairs into one call (see Verifier.merge_budget).
MAX_MERGED_PAIRS = 4096

Pair = tuple[str, str]


@dataclass(frozen=True)
class ScoredPairs:
    """One request's scores, and which of its NaN scores are failures rather than verdicts.

    Attributes:
        scores: one per pair, in ``[0, 1]`` or NaN (unverifiable).
        failed: indices of the pairs the verifier failed to score (their score is NaN); a NaN not listed
            is legitimately unverifiable (nothing in the pair to check).
    """

    scores: list[float]
    failed: tuple[int, ...] = ()


def scored_with_failures(results: Sequence, failed_marker: object) -> ScoredPairs:
    """``results`` with each ``failed_marker`` replaced by NaN and its index listed as failed."""
    failed = tuple(i for i, result in enumerate(results) if result is failed_marker)
    return ScoredPairs([UNVERIFIABLE if result is failed_marker else result for result in results], failed)


def fail_infinite(scored: ScoredPairs) -> ScoredPairs:
    """``scored`` with each ±inf score made NaN and listed as failed (+inf would label a step supported, -inf
    unsupported). A NaN keeps its standing: backends list the NaN they failed on, and a model's
    non-finite output already failed its call."""
    infinite = [i for i, score in enumerate(scored.scores) if math.isinf(score)]
    if not infinite:
        return scored
    scores = [UNVERIFIABLE if math.isinf(score) else score for score in scored.scores]
    return ScoredPairs(scores, tuple(sorted({*scored.failed, *infinite})))


def check_pairs(pairs: Sequence[Pair]) -> list[Pair]:
    """Returns ``pairs`` as a list of ``(evidence, claim)`` string tuples, or raises a clear error."""
    if isinstance(pairs, (str, bytes)):
        raise TypeError("score() takes a sequence of (evidence, claim) pairs, not a string")
    checked = []
    for i, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
            raise TypeError(f"pair {i} must be an (evidence: str, claim: str) tuple, got {pair!r:.80}")
        checked.append((pair[0], pair[1]))
    return checked


class Verifier(ABC):
    """Scores how well evidence supports claims.

    Subclasses implement [`~Verifier.score`]. Scores are floats in ``[0, 1]`` or ``math.nan``
    (unverifiable).
    """

    name: str = "verifier"
    threshold: float = 0.5  # score >= threshold counts as supported (set from fspo.verifier.threshold)

    @property
    def strict_threshold(self) -> bool:
        """True where the backend's authors label supported only strictly above the threshold (MiniCheck's
        and FactCG's ``prob > 0.5``): a score equal to the threshold is then unsupported."""
        return self.name in STRICT_THRESHOLD_BACKENDS

    @abstractmethod
    def score(self, pairs: Sequence[Pair]) -> list[float]:
        """Support probability of each ``(evidence, claim)`` pair, in input order.

        Args:
            pairs: ``(evidence, claim)`` tuples. Pass all pairs of a training step at once: model
                backends deduplicate and batch across them.

        Returns:
            One float per pair in ``[0, 1]``, or ``math.nan`` where the pair could not be verified.

        Raises:
            A model backend raises :class:`fspo.verifiers.batching.NonFiniteOutput` where its model gave NaN or
            ±inf, as it raises on any other failed call.
        """

    def score_responses(self, responses: Sequence[tuple[str, Sequence[str]]]) -> list[list[float]]:
        """Each response's step scores, ``responses`` being ``(evidence, the response's step texts)``.

        All steps go to one [`~Verifier.score`] call, so model backends batch them. A verifier that judges a
        response's steps together (``llm_judge`` as FAPO's GenRM) overrides this: a flat list of pairs cannot tell
        two responses to one question apart.
        """
        pairs = [(evidence, step) for evidence, steps in responses for step in steps]
        scores = iter(self.score(pairs) if pairs else [])
        return [[next(scores) for _ in steps] for _, steps in responses]

    coalesce_ms: float = 10.0
    # True when the process that runs the model holds a GPU that Ray assigned it (the colocated and
    # ray placements); reported per rollout so a run can see where its steps were verified.
    ray_gpu_assigned: bool = False

    def merge_budget(self) -> float:
        """The most summed :meth:`pair_cost` that concurrent requests merge into one call.

        A merged call answers all its requests when it ends, so its size is what one request may wait
        behind; a model backend bounds it by its token budget (:class:`fspo.verifiers.model_base.ModelVerifier`).
        """
        return MAX_MERGED_PAIRS

    def pair_cost(self, pair: Pair) -> float:
        """One pair's share of :meth:`merge_budget` (here: one pair)."""
        return 1

    async def ascore(self, pairs: Sequence[Pair]) -> list[float]:
        """[`~Verifier.score`] for async callers: :meth:`ascore_with_failures`' scores."""
        return (await self.ascore_with_failures(pairs)).scores

    async def ascore_with_failures(self, pairs: Sequence[Pair]) -> ScoredPairs:
        """The scores of ``pairs`` for async callers such as verl's reward loop (one rollout per call), and the
        pairs that failed.

        Concurrent calls are merged by a [`fspo.utils.coalesce.Coalescer`], up to :meth:`merge_budget`, so the
        model sees many rollouts' pairs in one batched [`~Verifier.score`] call, run in a worker thread. A
        merged batch that raises is split until the failing pairs are isolated: they score NaN and are listed
        as failed, the others are scored; a request whose every pair fails gets the error. A request
        cancelled before its call runs (a client's deadline) is dropped, never computed.
        """
        loop = asyncio.get_running_loop()
        coalescer = getattr(self, "_coalescer", None)
        if coalescer is None or getattr(self, "_coalescer_loop", None) is not loop:
            coalescer = self._coalescer = Coalescer(
                lambda _key, batch: self.score(batch),
                window_s=self.coalesce_ms / 1000,
                failed_result=_PAIR_FAILED,
                max_cost=self.merge_budget(),
                cost=self.pair_cost,
            )
            self._coalescer_loop = loop
        results, _ = await coalescer.submit(check_pairs(pairs))
        return scored_with_failures(results, _PAIR_FAILED)

    def close(self) -> None:  # noqa: B027 - optional hook: most verifiers hold nothing to release
        """Releases resources (threads, models). The default holds none."""


class PairPipeline(Verifier):
    """A verifier that deduplicates pairs, optionally trims evidence to the top-k sentences and caches.

    Subclasses implement ``_score_unique(pairs)``, which receives each distinct pair once (after
    top-k trimming, minus cache hits) and returns one score per pair.

    Args:
        evidence_top_k: if set, each claim is checked against only the ``k`` evidence sentences that
            share the most content words with it (fewer tokens; off by default as in the paper).
        cache_size: number of ``(evidence, claim) -> score`` entries kept in an LRU cache; ``0`` disables
            it. NaN scores are never cached, so an unverifiable pair is retried next time.
    """

    def __init__(self, evidence_top_k: int | None = None, cache_size: int = 0):
        # Types and ranges are checked by fspo.config.verifier.VerifierConfig, which build_verifier goes through.
        self.evidence_top_k = evidence_top_k
        self.cache_size = cache_size
        self._cache: OrderedDict[Pair, float] = OrderedDict()

    @abstractmethod
    def _score_unique(self, pairs: list[Pair]) -> list[float]:
        """Scores distinct pairs (no duplicates, no cache hits)."""

    def prepare(self, pairs: Sequence[Pair]) -> list[Pair]:
        """The pairs as the model will see them: evidence trimmed to the top-k sentences when enabled."""
        pairs = check_pairs(pairs)
        if self.evidence_top_k is None:
            return pairs
        return [(top_k_evidence(evidence, claim, self.evidence_top_k), claim) for evidence, claim in pairs]

    def score(self, pairs: Sequence[Pair]) -> list[float]:
        prepared = self.prepare(pairs)
        known, todo = self._lookup(prepared)
        if todo:
            self._remember(todo, self._score_unique(todo), known)
        return [known[pair] for pair in prepared]

    def _lookup(self, prepared: list[Pair]) -> tuple[dict[Pair, float], list[Pair]]:
        """Cache hits of ``prepared``, and the distinct pairs still to score."""
        known: dict[Pair, float] = {}
        for pair in prepared:
            if pair in self._cache:
                self._cache.move_to_end(pair)
                known[pair] = self._cache[pair]
        return known, list(dict.fromkeys(p for p in prepared if p not in known))

    def _remember(self, todo: list[Pair], scores: Sequence[float], known: dict[Pair, float]) -> None:
        """Record the scores of ``todo`` in ``known`` and (NaN excepted) in the cache."""
        if len(scores) != len(todo):
            raise RuntimeError(f"{type(self).__name__} returned {len(scores)} scores for {len(todo)} pairs")
        for pair, value in zip(todo, scores):
            value = float(value)
            known[pair] = value
            if self.cache_size and not math.isnan(value):
                self._cache[pair] = value
                if len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
