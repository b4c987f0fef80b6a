"""FactCG (Lei et al., NAACL 2025): a DeBERTa-v3-Large fact checker trained on graph-based multi-hop claims.

How the published checkpoint ``yaxili96/FactCG-DeBERTa-v3-Large`` scores a (document, claim) pair
(github.com/derenlei/FactCG, reimplemented from its description): a 2-way sequence classifier whose
input is one text, the document and the claim in an instruction (``FACTCG_TEMPLATE``), tokenized with
the tokenizer's special tokens, at most 2048 tokens (the document is what gets cut); support =
``softmax(logits)[1]``. Documents are cut into chunks of whole sentences of about 550 word tokens and
a pair scores as its best chunk; the authors' fixed threshold is 0.5.
"""

from __future__ import annotations

from fspo.config.vocabulary import DEFAULT_MODELS
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
        **kwargs: device, dtype, max_tokens_per_batch, max_row_tokens (default: the authors' chunk, see
            ``TemplateVerifier.default_row_tokens``), long_evidence, evidence_top_k, cache_size.
    """

    name = "factcg"
    evidence_chunk_size = 550
    evidence_chunk_unit = "words"

    def __init__(self, model_path: str = FACTCG_MODEL, tokenizer_path: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.model, self.tokenizer = load_sequence_classifier(model_path, tokenizer_path, self.dtype, self.device)
        self.max_input_tokens = FACTCG_WINDOW
        self.template = FACTCG_TEMPLATE
