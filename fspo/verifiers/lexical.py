"""A dependency-free verifier: the share of the claim's content words and numbers found in the evidence.

Two units of evidence (``evidence_unit``):

- ``whole``: the claim's words are looked up in the whole evidence, wherever they occur. A claim whose
  words come from two unrelated sentences ("Nora was born in Lima" from "Nora was born in Kelton. Sam was
  born in Lima.") scores 1.
- ``sentence``: each clause of the claim (:mod:`fspo.verifiers.clauses`) is looked up in the one evidence
  sentence that holds most of its words, as MiniCheck and FactCG score a claim as its best-supporting
  chunk (the maximum over chunks, not the concatenation). A multi-fact step ("A works for B, which is
  based in C") is supported clause by clause, each by its own sentence, or by a chain of sentences
  linked by a shared name. The score averages this with ``whole`` (see :func:`sentence_support`).

With ``abstain_non_claims`` a step that states no claim (:func:`is_claim`) scores NaN, label 0: a fragment
("Lima.", "Nora Vale works for") and a conclusion that only names the answer ("So the answer is Lima."), whose
right or wrong the outcome reward already scores. A bridging step with a predicate and two content words of its
own ("The company is headquartered in Lima.") is a claim and is checked as written: the verifier resolves no
reference, so "company" counts as a word the evidence lacks.
"""

from __future__ import annotations

import functools
import math

from fspo.config.vocabulary import EVIDENCE_UNITS
from fspo.verifiers.base import UNVERIFIABLE, Pair, PairPipeline
from fspo.verifiers.clauses import link_cuts, split_clauses, words
from fspo.verifiers.text import content_tokens, is_number, split_sentences

# Words that name the task, not the world: "the answer is Lima" states the answer, no fact the evidence holds.
TASK_WORDS = frozenset("answer answers question questions step steps context evidence information".split())
# Auxiliaries and copulas: a finite predicate even where the main word is a noun ("Lima is a city in Kesh").
_AUXILIARIES = frozenset(
    "is are was were be been being am has have had does did do can could will would shall should may might must".split()
)
# A sentence cannot end on these: a step that does was cut mid-clause ("Nora Vale works for").
_DANGLING = frozenset(
    "a an the of for in on at to by from with into and or but as than that which who whose whom is are was were "
    "be been has have had its their his her".split()
)


def _has_finite_verb(words_of_step: list[tuple[str, str]]) -> bool:
    """An auxiliary or copula, or a lower-case word past the first inflected as a verb (-s, -ed: "works",
    "founded"). A rule of thumb, not a tagger: a plural noun ("headquarters") passes too."""
    return any(
        word in _AUXILIARIES
        or (
            index > 0
            and original[:1].islower()
            and len(word) > 3
            and word.endswith(("s", "ed"))
            and not word.endswith("ss")
        )
        for index, (word, original) in enumerate(words_of_step)
    )


def _content_units(raw_words: list[str]) -> set[str]:
    """The step's content words, a run of capitalised words counting once (a name: "Mune Labs" is one thing)."""
    units: set[str] = set()
    name: list[str] = []
    for raw in [*raw_words, ""]:
        if raw[:1].isupper():
            name.append(raw)
            if not raw[-1:].isalnum():  # punctuation ends a name ("Lima, Kesh" are two)
                units.add(" ".join(content_tokens(" ".join(name))))
                name = []
            continue
        if name:
            units.add(" ".join(content_tokens(" ".join(name))))
            name = []
        units.update(content_tokens(raw))
    return units - TASK_WORDS - {""}


def is_claim(step: str) -> bool:
    """Whether a reasoning step states a claim the evidence could hold: a finite predicate
    (:func:`_has_finite_verb`), at least two content units that are not :data:`TASK_WORDS` (a name counts once,
    :func:`_content_units`), and an end that is not a function word (a step cut mid-clause). English rules of
    thumb, nothing about one data set."""
    raw_words = [raw.strip("\"'()[]{}“”‘’") for raw in step.split()]
    raw_words = [raw for raw in raw_words if raw.strip(".,;:!?")]
    if not raw_words or raw_words[-1].strip(".,;:!?").lower() in _DANGLING:
        return False
    if len(_content_units(raw_words)) < 2:
        return False
    bare = [raw.strip(".,;:!?") for raw in raw_words]
    return _has_finite_verb([(word.lower(), word) for word in bare])


def _stem(token: str) -> str:
    """Folds a plural ``s`` so that ``films`` matches ``film``; numbers are left exact."""
    if is_number(token) or len(token) <= 3 or not token.endswith("s") or token.endswith("ss"):
        return token
    return token[:-1]


def _tokens(text: str) -> frozenset[str]:
    return frozenset(_stem(t) for t in content_tokens(text))


@functools.lru_cache(maxsize=1024)
def _evidence_index(evidence: str) -> tuple[frozenset[str], tuple[frozenset[str], ...]]:
    """The evidence's tokens, whole and per sentence. Every step of every rollout of a prompt is checked
    against the same evidence (8 rollouts x ~70 steps at the paper's scale): tokenised once, not per claim."""
    return _tokens(evidence), tuple(_tokens(sentence) for sentence in split_sentences(evidence))


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
    return len(claim_tokens & _evidence_index(evidence)[0]) / len(claim_tokens)


def _within_a_sentence(tokens: frozenset[str], sentences: tuple[frozenset[str], ...]) -> bool:
    return not tokens or any(tokens <= sentence for sentence in sentences)


def linked_support(clause: str, sentences: tuple[frozenset[str], ...]) -> bool:
    """Whether ``clause`` is a chain of pieces, each within one evidence sentence, consecutive pieces sharing
    the name where one ends and the next begins (:func:`fspo.verifiers.clauses.link_cuts`)."""
    clause_words = words(clause)
    cuts = link_cuts(clause_words)
    reachable = {0}  # word indices a supported chain of pieces can start the next piece at
    for start in sorted({0, *(cut_start for cut_start, _ in cuts)}):
        if start not in reachable:
            continue
        if _within_a_sentence(_tokens(" ".join(clause_words[start:])), sentences):
            return True
        for cut_start, cut_end in cuts:
            if cut_start > start and _within_a_sentence(_tokens(" ".join(clause_words[start:cut_end])), sentences):
                reachable.add(cut_start)
    return False


def clause_support(evidence: str, claim: str) -> float:
    """Fraction of the claim's distinct content tokens that its clauses' own evidence sentences hold.

    Each clause of ``claim`` (:func:`fspo.verifiers.clauses.split_clauses`) is supported in full when it is
    a chain of pieces linked by shared names, each piece within one evidence sentence
    (:func:`linked_support`; one piece = the whole clause in one sentence). Otherwise it is matched to the
    evidence sentence that holds most of its tokens (the earliest on a tie), and its tokens outside that
    sentence are unsupported. A token counts as supported when no clause it belongs to leaves it
    unsupported. So the score is 1 exactly when every clause is supported in full, and never exceeds
    :func:`lexical_support` (a token outside the evidence is never supported). NaN for a claim without
    content words, as in :func:`lexical_support`.
    """
    claim_tokens = _tokens(claim)
    if not claim_tokens:
        return UNVERIFIABLE
    evidence_tokens, sentences = _evidence_index(evidence)
    unsupported = set(claim_tokens - evidence_tokens)
    for clause in split_clauses(claim):
        tokens = _tokens(clause) & claim_tokens
        if not tokens or linked_support(clause, sentences):
            continue
        best = max(sentences, key=lambda sentence: len(tokens & sentence), default=frozenset())
        unsupported |= tokens - best
    return 1.0 - len(unsupported) / len(claim_tokens)


def sentence_support(evidence: str, claim: str) -> float:
    """The mean of :func:`lexical_support` (the share of the claim's tokens the evidence holds anywhere) and
    :func:`clause_support` (the share its clauses' own sentences hold).

    1 exactly when every clause is supported in full by its own sentence(s); below
    :func:`lexical_support` whenever a clause's words come from unrelated sentences. The whole-evidence
    half keeps a graded order among partly supported claims, where a claim's words are spread over a long
    evidence (HaluEval-QA held out: AUROC 0.641 for the mean against 0.629 for :func:`clause_support`
    alone and 0.635 for :func:`lexical_support`; ``benchmarks/verifier_quality.py``).
    """
    whole = lexical_support(evidence, claim)
    return whole if math.isnan(whole) else (whole + clause_support(evidence, claim)) / 2


SUPPORT = {"whole": lexical_support, "sentence": sentence_support}


class LexicalVerifier(PairPipeline):
    """Offline, model-free verifier for CPU runs and tests; see [`lexical_support`] and [`sentence_support`].

    Args:
        evidence_unit: ``whole`` (the claim's words anywhere in the evidence) or ``sentence`` (each clause
            of the claim within its best evidence sentence); see the module doc.
        evidence_top_k: check against only the k most relevant evidence sentences (off by default).
        cache_size: LRU cache entries (rarely worth it: scoring is cheaper than a lookup miss).
        abstain_non_claims: score NaN (label 0) a step that states no claim (:func:`is_claim`; the module doc).
    """

    name = "lexical"

    def __init__(
        self,
        evidence_unit: str = "whole",
        evidence_top_k: int | None = None,
        cache_size: int = 0,
        abstain_non_claims: bool = False,
    ):
        super().__init__(evidence_top_k=evidence_top_k, cache_size=cache_size)
        if evidence_unit not in SUPPORT:
            raise ValueError(f"evidence_unit must be one of {', '.join(EVIDENCE_UNITS)}, got {evidence_unit!r}")
        self.evidence_unit = evidence_unit
        self.abstain_non_claims = abstain_non_claims
        self._support = SUPPORT[evidence_unit]

    def _score_unique(self, pairs: list[Pair]) -> list[float]:
        return [
            UNVERIFIABLE if self.abstain_non_claims and not is_claim(claim) else self._support(evidence, claim)
            for evidence, claim in pairs
        ]
