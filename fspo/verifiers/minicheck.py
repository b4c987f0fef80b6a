"""MiniCheck (Tang, Laban & Durrett, EMNLP 2024): sentence-level fact checkers against a grounding document.

How the published checkpoints score a (document, claim) pair (github.com/Liyan06/MiniCheck,
``minicheck/inference.py``; re-implemented from what it does, not copied):

- ``lytang/MiniCheck-RoBERTa-Large`` and ``lytang/MiniCheck-DeBERTa-v3-Large``: 2-way sequence
  classifiers; the input is one text, ``chunk + tokenizer.eos_token + claim`` (``</s>`` for RoBERTa,
  ``[SEP]`` for DeBERTa-v3), tokenized with the tokenizer's special tokens and truncated from the right
  at 512 (RoBERTa) or 2048 (DeBERTa-v3) tokens; support = ``softmax(logits)[1]``. Chunks: the
  document's sentences (NLTK Punkt, line by line) packed up to 400 tokens of the checker's tokenizer.
- ``lytang/MiniCheck-Flan-T5-Large``: a ``T5ForConditionalGeneration`` read at its first decoding step;
  the input is ``"predict: " + chunk + "</s>" + claim`` (truncated from the right at 2048 tokens, the
  tokenizer's ``</s>`` appended), the decoder gets the start token (id 0), and support is the softmax
  over the logits of token ids 3 ("unsupported") and 209 ("supported"), class 1. Chunks: sentences
  packed up to 500 whitespace words.

Chunks are joined and whitespace-normalised as the authors do (:func:`fspo.verifiers.chunking.minicheck_chunks`),
so even a one-chunk document is scored as its normalised text (sentences re-joined with single
spaces); a pair scores as its best chunk (max over chunks). The authors' label is ``prob > 0.5``
(:data:`fspo.config.vocabulary.STRICT_THRESHOLD_BACKENDS`). An empty or whitespace-only document
(where their code raises) scores NaN: unverifiable. :func:`build_minicheck` picks the variant from the
checkpoint's ``model_type``.
"""

from __future__ import annotations

import torch

from fspo.config.vocabulary import DEFAULT_MODELS
from fspo.utils.checked_load import from_pretrained_checked, load_tokenizer
from fspo.verifiers.chunking import minicheck_chunks, whitespace_word_counts
from fspo.verifiers.fact_checker import (
    TemplateClassifierVerifier,
    TemplateVerifier,
    escape_braces,
    load_sequence_classifier,
    position_limit,
)

MINICHECK_FLAN_T5 = DEFAULT_MODELS["minicheck"]
MINICHECK_DEBERTA = "lytang/MiniCheck-DeBERTa-v3-Large"
MINICHECK_ROBERTA = "lytang/MiniCheck-RoBERTa-Large"
# The authors' input windows (max_model_len) per architecture.
CLASSIFIER_WINDOWS = {"roberta": 512, "deberta-v2": 2048}
T5_WINDOW = 2048
T5_PREFIX = "predict: "
# Flan-T5 vocabulary ids whose first-step logits MiniCheck compares: (unsupported, supported).
T5_LABEL_TOKEN_IDS = (3, 209)


class MiniCheckClassifier(TemplateClassifierVerifier):
    """MiniCheck-RoBERTa-Large / MiniCheck-DeBERTa-v3-Large (see the module doc).

    Args:
        model_path: checkpoint directory or hub id (a ``roberta`` or ``deberta-v2`` sequence classifier).
        tokenizer_path: default ``model_path``.
        **kwargs: device, dtype, max_tokens_per_batch, evidence_top_k, cache_size.
    """

    name = "minicheck"
    # The authors' chunk: tokens of the checker's tokenizer, each sentence counted alone.
    evidence_chunk_size = 400

    def __init__(self, model_path: str = MINICHECK_DEBERTA, tokenizer_path: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.model, self.tokenizer = load_sequence_classifier(model_path, tokenizer_path, self.dtype, self.device)
        model_type = self.model.config.model_type
        if model_type not in CLASSIFIER_WINDOWS:
            raise ValueError(
                f"{model_path} is a {model_type!r} model; MiniCheck's classifiers are "
                f"{' or '.join(CLASSIFIER_WINDOWS)} (or a t5 MiniCheck-Flan-T5)"
            )
        self.max_input_tokens = position_limit(self.model.config, CLASSIFIER_WINDOWS[model_type])
        self.template = "{evidence}" + escape_braces(self.tokenizer.eos_token) + "{claim}"

    def chunk(self, evidence: str) -> list[str]:
        return minicheck_chunks(evidence, self.evidence_chunk_size, self._token_counts)

    def _token_counts(self, sentences: list[str]) -> list[int]:
        """Tokens of each sentence alone, no special tokens, capped at the window (as the authors count)."""
        encoded = self.tokenizer(
            sentences, add_special_tokens=False, truncation=True, max_length=self.max_input_tokens
        )["input_ids"]
        return [len(ids) for ids in encoded]


class MiniCheckT5(TemplateVerifier):
    """MiniCheck-Flan-T5-Large: support probability from the first decoding step (see the module doc).

    Args:
        model_path: checkpoint directory or hub id of a ``T5ForConditionalGeneration``.
        tokenizer_path: default ``model_path``.
        **kwargs: device, dtype, max_tokens_per_batch, evidence_top_k, cache_size.
    """

    name = "minicheck"
    # The authors' chunk: whitespace words.
    evidence_chunk_size = 500

    def __init__(self, model_path: str = MINICHECK_FLAN_T5, tokenizer_path: str | None = None, **kwargs):
        super().__init__(**kwargs)
        from transformers import T5ForConditionalGeneration

        self.tokenizer = load_tokenizer(tokenizer_path or model_path, use_fast=True)
        self.model = (
            from_pretrained_checked(T5ForConditionalGeneration, model_path, dtype=self.dtype).to(self.device).eval()
        )
        if self.model.config.vocab_size <= max(T5_LABEL_TOKEN_IDS):
            raise ValueError(
                f"{model_path} has {self.model.config.vocab_size} output tokens; MiniCheck reads ids "
                f"{T5_LABEL_TOKEN_IDS}"
            )
        self.max_input_tokens = T5_WINDOW
        self.template = escape_braces(T5_PREFIX) + "{evidence}" + escape_braces(self.tokenizer.eos_token) + "{claim}"
        self.label_token_ids = torch.tensor(T5_LABEL_TOKEN_IDS, device=self.device)

    def chunk(self, evidence: str) -> list[str]:
        return minicheck_chunks(evidence, self.evidence_chunk_size, whitespace_word_counts)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        start = torch.full(
            (batch["input_ids"].shape[0], 1),
            self.model.config.decoder_start_token_id,
            dtype=torch.long,
            device=batch["input_ids"].device,
        )
        logits = self.model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=start
        ).logits[:, 0, :]
        return torch.softmax(logits[:, self.label_token_ids].float(), dim=-1)[:, 1]


def build_minicheck(model_path: str = MINICHECK_FLAN_T5, tokenizer_path: str | None = None, **kwargs):
    """The MiniCheck scorer of ``model_path``'s architecture: Flan-T5 (the default, the strongest under 1B
    parameters), else the RoBERTa/DeBERTa-v3 classifier."""
    from transformers import PretrainedConfig

    config, _ = PretrainedConfig.get_config_dict(model_path)
    cls = MiniCheckT5 if config.get("model_type") == "t5" else MiniCheckClassifier
    return cls(model_path=model_path, tokenizer_path=tokenizer_path, **kwargs)
