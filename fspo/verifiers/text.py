"""Text helpers shared by the verifiers: normalisation, content words, evidence sentences, top-k evidence.

These work on the *evidence* side. Reasoning steps are split by `fspo.steps`, never here.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

# A short English stopword list: function words that carry no checkable fact.
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing down during each either few for from further had
    has have having he her here hers herself him himself his how i if in into is it its itself just let me
    more most my myself neither no nor not now of off on once only or other our ours ourselves out over own
    same she should so some such than that the their theirs them themselves then there these they this
    those through thus to too under until up upon us very was we were what when where which while who whom
    whose why will with would yet you your yours yourself yourselves therefore hence since lets
    wait okay ok well need needs know think thinking""".split()  # noqa: SIM905 - reads better as text
)

_NUMBER = r"[-+]?\d[\d,]*(?:\.\d+)?%?"
_TOKEN_RE = re.compile(rf"{_NUMBER}|[^\W\d_]+(?:['’][^\W\d_]+)*", re.UNICODE)
# An evidence sentence ends at . ! ? (not inside numbers like 3.5) or at a line break.
_SENTENCE_END_RE = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[]?[A-Z0-9])|\s*\n\s*")


def normalize(text: str) -> str:
    """Lower-cases, folds accents (``Zürich`` -> ``zurich``) and unifies quotes."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return text.replace("’", "'").lower()


def _canonical_number(token: str) -> str:
    """``1,250`` -> ``1250``; ``3.50`` -> ``3.5``; keeps a trailing ``%`` as part of the number."""
    percent = token.endswith("%")
    core = token.rstrip("%").replace(",", "").lstrip("+")
    if "." in core:
        core = core.rstrip("0").rstrip(".") or "0"
    return core + ("%" if percent else "")


def content_tokens(text: str) -> list[str]:
    """Normalised content words and numbers of ``text``, in order, stopwords removed.

    Words are lower-cased and accent-folded; numbers are canonicalised (thousands separators and
    trailing decimal zeros dropped) so that ``1,250`` and ``1250`` match while ``125`` does not.
    """
    tokens = []
    for token in _TOKEN_RE.findall(normalize(text)):
        if token[0].isdigit() or token[0] in "+-":
            tokens.append(_canonical_number(token))
        else:
            token = token.removesuffix("'s")
            if token not in STOPWORDS and len(token) > 1:
                tokens.append(token)
    return tokens


def is_number(token: str) -> bool:
    return bool(token) and (token[0].isdigit() or token[0] == "-")


def split_sentences(text: str) -> list[str]:
    """Splits evidence text into sentences (and lines); drops empty pieces."""
    return [s.strip() for s in _SENTENCE_END_RE.split(text) if s and s.strip()]


@lru_cache(maxsize=4096)
def _sentence_tokens(sentence: str) -> frozenset[str]:
    return frozenset(content_tokens(sentence))


def lexical_relevance(claim_tokens: frozenset[str], sentence: str) -> int:
    """How many of the claim's distinct content tokens appear in ``sentence``."""
    return len(claim_tokens & _sentence_tokens(sentence))


def top_k_evidence(evidence: str, claim: str, k: int) -> str:
    """The ``k`` evidence sentences most lexically relevant to ``claim``, kept in their original order.

    Ties keep the earlier sentence. Evidence with at most ``k`` sentences is returned unchanged.
    """
    sentences = split_sentences(evidence)
    if len(sentences) <= k:
        return evidence
    claim_tokens = frozenset(content_tokens(claim))
    ranked = sorted(
        range(len(sentences)),
        key=lambda i: (-lexical_relevance(claim_tokens, sentences[i]), i),
    )
    keep = sorted(ranked[:k])
    return " ".join(sentences[i] for i in keep)
