"""A dependency-free verifier: the share of the claim's content words and numbers found in the evidence."""

from __future__ import annotations

from fspo.verifiers.base import UNVERIFIABLE, Pair, PairPipeline
from fspo.verifiers.text import content_tokens, is_number


def _stem(token: str) -> str:
    """Folds a plural ``s`` so that ``films`` matches ``film``; numbers are left exact."""
    if is_number(token) or len(token) <= 3 or not token.endswith("s") or token.endswith("ss"):
        return token
    return token[:-1]


def lexical_support(evidence: str, claim: str) -> float:
    """Fraction of the claim's distinct content tokens that occur in the evidence.

    Tokens are normalised by [`~fspo.verifiers.text.content_tokens`] (lower case, accents folded,
    stopwords removed) with a plural ``s`` folded; numbers must match exactly after canonicalisation
    (``1,250`` == ``1250`` but ``125`` != ``1250``).

    A claim with no content words ("Let me think.") states nothing checkable and scores NaN
    (unverifiable, label 0): scoring it 1.0 would reward filler steps, 0.0 would punish them.
    """
    claim_tokens = {_stem(t) for t in content_tokens(claim)}
    if not claim_tokens:
        return UNVERIFIABLE
    evidence_tokens = {_stem(t) for t in content_tokens(evidence)}
    return len(claim_tokens & evidence_tokens) / len(claim_tokens)


class LexicalVerifier(PairPipeline):
    """Offline, model-free verifier for CPU runs and tests; see [`lexical_support`].

    Args:
        evidence_top_k: check against only the k most relevant evidence sentences (off by default).
        cache_size: LRU cache entries (rarely worth it: scoring is cheaper than a lookup miss).
    """

    name = "lexical"

    def _score_unique(self, pairs: list[Pair]) -> list[float]:
        return [lexical_support(evidence, claim) for evidence, claim in pairs]
