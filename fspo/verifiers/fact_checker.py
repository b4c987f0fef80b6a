"""Shared plumbing of the document-level fact checkers (MiniCheck, FactCG): one text per (evidence, claim).

These checkers were trained on one input string that holds the evidence and the claim in a fixed
layout (a template), not on a tokenizer's sentence pair, and read the support probability as class 1
of their output. A backend gives its template and window; :class:`TemplateVerifier` renders and
clips, :class:`TemplateClassifierVerifier` scores a sequence classifier.

Long evidence: each checker's authors split a document into chunks of whole sentences
(``evidence_chunk_size`` units of ``evidence_chunk_unit``) and score a pair as its best chunk. Here the
shared windows of :mod:`fspo.verifiers.model_base` do that: unless ``max_row_tokens`` is given, a row
holds one chunk of the authors' size (words converted at ``TOKENS_PER_WORD``) plus room for the prompt
and the step (:meth:`TemplateVerifier.default_row_tokens`). ``encode`` still clips an evidence that
would not fit the model's window beside the claim to its first tokens (never the claim), so that a
position table (RoBERTa's 512) is never overrun when windows are off (``max_row_tokens=0``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fspo.verifiers.base import Pair
from fspo.verifiers.batching import Features
from fspo.verifiers.model_base import ModelVerifier


def clip_to_tokens(tokenizer, text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` that is at most ``max_tokens`` of ``tokenizer``'s tokens (no specials)."""
    if max_tokens <= 0:
        return ""
    offsets = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    if len(offsets) <= max_tokens:
        return text
    return text[: offsets[max_tokens - 1][1]]


def escape_braces(text: str) -> str:
    """``text`` as literal text inside a ``str.format`` template."""
    return text.replace("{", "{{").replace("}", "}}")


def position_limit(config, window: int) -> int:
    """``window`` capped by an absolute position table (RoBERTa's ids start after the padding index)."""
    if config.model_type == "roberta":
        return min(window, config.max_position_embeddings - (config.pad_token_id or 0) - 1)
    return window


class TemplateVerifier(ModelVerifier):
    """A model verifier whose row is one text rendered from (evidence, claim) by ``self.template``.

    Subclasses set ``self.model``, ``self.tokenizer``, ``self.template`` (a ``str.format`` string with
    ``{evidence}`` and ``{claim}``) and ``self.max_input_tokens`` (the window, special tokens included),
    implement ``forward``, and set as class attributes the authors' evidence chunks:
    ``evidence_chunk_size`` units of ``evidence_chunk_unit`` (``tokens`` of the checker's tokenizer, or
    ``words``), which size the shared windows (:meth:`default_row_tokens`).
    """

    evidence_chunk_size: int
    evidence_chunk_unit: str
    # Model tokens per whitespace word of English text for these checkers' vocabularies (RoBERTa's BPE,
    # DeBERTa-v3's and T5's SentencePiece: 1.2-1.4), to turn a chunk of words into a window of tokens.
    TOKENS_PER_WORD = 1.3
    # Row tokens beyond the evidence chunk: the template and a reasoning step (~25 tokens, up to ~100).
    ROW_ALLOWANCE = 112

    def __init__(self, *, max_row_tokens: int | None = None, **kwargs):
        super().__init__(
            max_row_tokens=self.default_row_tokens() if max_row_tokens is None else max_row_tokens, **kwargs
        )

    @classmethod
    def default_row_tokens(cls) -> int:
        """Tokens per row when ``max_row_tokens`` is not given: the authors' chunk beside a step."""
        chunk = cls.evidence_chunk_size
        if cls.evidence_chunk_unit == "words":
            chunk = round(chunk * cls.TOKENS_PER_WORD)
        return chunk + cls.ROW_ALLOWANCE

    def render(self, evidence: str, claim: str) -> str:
        return self.template.format(evidence=evidence, claim=claim)

    def encode(self, pairs: Sequence[Pair]) -> tuple[list[Features], list[int]]:
        texts, overheads = [], {}
        for evidence, claim in pairs:
            if claim not in overheads:
                overheads[claim] = len(self.tokenizer(self.render("", claim))["input_ids"])
            # At least a quarter of the window stays evidence: an overlong claim is cut by the truncation below.
            budget = max(self.max_input_tokens - overheads[claim], self.max_input_tokens // 4)
            texts.append(self.render(clip_to_tokens(self.tokenizer, evidence, budget), claim))
        # Re-tokenizing at the clip point may shift a token: truncation keeps the window a hard limit.
        ids = self.tokenizer(texts, truncation=True, max_length=self.max_input_tokens)["input_ids"]
        return [{"input_ids": row} for row in ids], list(range(len(pairs)))


class TemplateClassifierVerifier(TemplateVerifier):
    """Support probability = ``softmax(logits)[support_index]`` of a sequence classifier on the rendered text."""

    support_index: int = 1

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return torch.softmax(logits.float(), dim=-1)[:, self.support_index]


def load_sequence_classifier(model_path: str, tokenizer_path: str | None, dtype: torch.dtype, device: torch.device):
    """(model, fast tokenizer) of a 2-way ``AutoModelForSequenceClassification`` checkpoint."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path or model_path, use_fast=True)
    model = AutoModelForSequenceClassification.from_pretrained(model_path, dtype=dtype)
    if model.config.num_labels != 2:
        raise ValueError(f"{model_path} has {model.config.num_labels} labels; a fact checker has 2 (1 = supported)")
    return model.to(device).eval(), tokenizer
