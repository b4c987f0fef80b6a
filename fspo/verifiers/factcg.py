"""FactCG (Lei et al., NAACL 2025): a DeBERTa-v3-Large fact checker trained on graph-based multi-hop claims.

How the published checkpoint ``yaxili96/FactCG-DeBERTa-v3-Large`` scores a (document, claim) pair
(github.com/derenlei/FactCG, ``factcg/inference.py``; re-implemented from what it does, not copied): a
2-way sequence classifier whose input is one text, a chunk of the document and the claim in an
instruction (``FACTCG_TEMPLATE``), tokenized with the tokenizer's special tokens and truncated from the
right at 2048 tokens; support = ``softmax(logits)[1]``. Chunks: the document's sentences (NLTK Punkt)
packed up to 550 NLTK word tokens (punctuation included) and joined with ``"\n"``
(:func:`fspo.verifiers.chunking.factcg_chunks`); a pair scores as its best chunk. The authors' fixed
threshold is ``prob > 0.5`` (:data:`fspo.config.vocabulary.STRICT_THRESHOLD_BACKENDS`). An empty or
whitespace-only document (where their code raises) scores NaN: unverifiable.

Departure: when a document's first sentence alone is longer than 550 word tokens, the authors' code
also scores an empty chunk (the template with no evidence); here that chunk is dropped
(:mod:`fspo.verifiers.chunking`).
"""

from __future__ import annotations

from fspo.config.vocabulary import DEFAULT_MODELS
from fspo.verifiers.chunking import FACTCG_CHUNK_WORDS, factcg_chunks
from fspo.verifiers.fact_checker import TemplateClassifierVerifier, load_sequence_classifier

FACTCG_MODEL = DEFAULT_MODELS["factcg"]
FACTCG_WINDOW = 2048
FACTCG_TEMPLATE = (
    '{evidence}\n\nChoose your answer: based on the paragraph above can we conclude that "{claim}"?\n\n'
    "OPTIONS:\n- Yes\n- No\nI think the answer is "
)


class FactCGVerifier(TemplateClassifierVerifier):
    """FactCG-DeBERTa-v3-Large (see the module doc).

    Args:
        model_path: checkpoint directory or hub id of a 2-way ``DebertaV2ForSequenceClassification``.
        tokenizer_path: default ``model_path``.
        **kwargs: device, dtype, max_tokens_per_batch, evidence_top_k, cache_size.
    """

    name = "factcg"
    # The authors' chunk: NLTK word tokens (nltk.word_tokenize: punctuation counts).
    evidence_chunk_size = FACTCG_CHUNK_WORDS

    def __init__(self, model_path: str = FACTCG_MODEL, tokenizer_path: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.model, self.tokenizer = load_sequence_classifier(model_path, tokenizer_path, self.dtype, self.device)
        self.max_input_tokens = FACTCG_WINDOW
        self.template = FACTCG_TEMPLATE

    def chunk(self, evidence: str) -> list[str]:
        return factcg_chunks(evidence, self.evidence_chunk_size)
