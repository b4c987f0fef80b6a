"""A dependency-free verifier: the share of the claim's content words and numbers found in the evidence.

Two units of evidence (``evidence_unit``):

- ``whole``: the claim's words are looked up in the whole evidence, wherever they occur. A claim whose
  words come from two unrelated sentences ("Nora was born in Lima" from "Nora was born in Kelton. Sam was
  born in Lima.") scores 1.
- ``sentence``: each clause of the claim (:mod:`fspo.verifiers.clauses`) is looked up in the one evidence
  sentence that holds most of its words, as MiniCheck and FactCG score a claim as its best-supporting
  chunk (the maximum over chunks, not the concatenation). A multi-fact step ("A works for B, which is
  based in C") is supported clause by clause, each by its own sentence.
"""

from __future__ import annotations

from fspo.config.vocabulary import EVIDENCE_UNITS
from fspo.verifiers.base import UNVERIFIABLE, Pair, PairPipeline
from fspo.verifiers.clauses import split_clauses
from fspo.verifiers.text import content_tokens, is_number, split_sentences


def _stem(token: str) -> str:
    """Folds a plural ``s`` so that ``films`` matches ``film``; numbers are left exact."""
    if is_number(token) or len(token) <= 3 or not token.endswith("s") or token.endswith("ss"):
        return token
    return token[:-1]


def _tokens(text: str) -> frozenset[str]:
    return frozenset(_stem(t) for t in content_tokens(text))


def lexical_support(evidence: str, claim: str) -> float:
    """Fraction of the claim's distinct content tokens that occur in the evidence.

    Tokens are normalised by [`~fspo.verifiers.text.content_tokens`] (lower case, accents folded,
    stopwords removed) with a plural ``s`` folded; numbers must match exactly after canonicalisation
    (``1,250`` == ``1250`` but ``125`` != ``1250``).

    A claim with no content words ("Let me think.") states nothing checkable and scores NaN
    (unverifiable, label 0): scoring it 1.0 would reward filler steps, 0.0 would punish them.
    """
    claim_tokens = _tokens(claim)
    if not claim_tokens:
        return UNVERIFIABLE
    return len(claim_tokens & _tokens(evidence)) / len(claim_tokens)


def sentence_support(evidence: str, claim: str) -> float:
    """Fraction of the claim's distinct content tokens that its clauses' best evidence sentences hold.

    Each clause of ``claim`` (:func:`fspo.verifiers.clauses.split_clauses`) is matched to the evidence
    sentence that holds most of its tokens (the earliest on a tie); a token counts as supported when every
    clause it belongs to finds it in that clause's sentence. So the score is 1 exactly when every clause
    lies within one sentence, and never exceeds :func:`lexical_support` (every supported token is in the
    evidence). NaN for a claim without content words, as in :func:`lexical_support`.
    """
    claim_tokens = _tokens(claim)
    if not claim_tokens:
        return UNVERIFIABLE
    clauses = [tokens & claim_tokens for tokens in map(_tokens, split_clauses(claim))]
    # Tokens the clause cut loses (none expected) are checked as one more clause, so none goes unchecked.
    clauses = [tokens for tokens in (*clauses, claim_tokens.difference(*clauses)) if tokens]
    sentences = [_tokens(sentence) for sentence in split_sentences(evidence)]
    unsupported: set[str] = set()
    for clause in clauses:
        best = max(sentences, key=lambda sentence: len(clause & sentence), default=frozenset())
        unsupported |= clause - best
    return 1.0 - len(unsupported) / len(claim_tokens)


SUPPORT = {"whole": lexical_support, "sentence": sentence_support}


class LexicalVerifier(PairPipeline):
    """Offline, model-free verifier for CPU runs and tests; see [`lexical_support`] and [`sentence_support`].

    Args:
        evidence_unit: ``whole`` (the claim's words anywhere in the evidence) or ``sentence`` (each clause
            of the claim within its best evidence sentence); see the module doc.
        evidence_top_k: check against only the k most relevant evidence sentences (off by default).
        cache_size: LRU cache entries (rarely worth it: scoring is cheaper than a lookup miss).
    """

    name = "lexical"

    def __init__(self, evidence_unit: str = "whole", evidence_top_k: int | None = None, cache_size: int = 0):
        super().__init__(evidence_top_k=evidence_top_k, cache_size=cache_size)
        if evidence_unit not in SUPPORT:
            raise ValueError(f"evidence_unit must be one of {', '.join(EVIDENCE_UNITS)}, got {evidence_unit!r}")
        self.evidence_unit = evidence_unit
        self._support = SUPPORT[evidence_unit]

    def _score_unique(self, pairs: list[Pair]) -> list[float]:
        return [self._support(evidence, claim) for evidence, claim in pairs]
