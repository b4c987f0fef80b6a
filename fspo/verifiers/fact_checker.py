"""Shared plumbing of the document-level fact checkers (MiniCheck, FactCG): one text per (chunk, claim).

These checkers were trained on one input string that holds the evidence and the claim in a fixed
layout (a template), not on a tokenizer's sentence pair, and read the support probability as class 1
of their output. A backend gives its template, its window and its authors' chunking
(:mod:`fspo.verifiers.chunking`); :class:`TemplateVerifier` does the rest as the authors' inference
code does:

- every evidence is cut into its authors' chunks of whole sentences, and a pair scores as its best
  chunk (max over chunks); an evidence with no chunk (empty or whitespace only, where the authors'
  code raises) gives the pair no row, so it scores NaN: unverifiable, label 0, counted;
- each row is the template filled with one chunk and the claim, tokenized with the tokenizer's special
  tokens and truncated **from the right** at the window, as the authors' ``tokenizer(...,
  truncation=True, max_length=...)`` does: a row that overflows loses the end of the claim, not the
  evidence. A chunk is at most one sentence past the authors' size, so only a very long sentence (or
  claim) reaches the window;
- the shared token windows of :mod:`fspo.verifiers.model_base` (``max_row_tokens``, ``long_evidence``)
  do not apply: the rows are bounded by the chunks and the window.
"""

from __future__ import annotations

from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Sequence

import torch

from fspo.utils.checked_load import from_pretrained_checked, load_tokenizer
from fspo.verifiers.base import Pair
from fspo.verifiers.batching import Features
from fspo.verifiers.model_base import ModelVerifier

# Evidences whose chunks a verifier keeps: a prompt's evidence comes back with each of its rollouts and
# steps, and FactCG's chunking (Punkt, then NLTK word tokens per sentence) takes ~0.25 s per 1,000 words.
CHUNK_CACHE_SIZE = 1024


def escape_braces(text: str) -> str:
    """``text`` as literal text inside a ``str.format`` template."""
    return text.replace("{", "{{").replace("}", "}}")


def position_limit(config, window: int) -> int:
    """``window`` capped by an absolute position table (RoBERTa's ids start after the padding index)."""
    if config.model_type == "roberta":
        return min(window, config.max_position_embeddings - (config.pad_token_id or 0) - 1)
    return window


class TemplateVerifier(ModelVerifier):
    """A model verifier whose row is one text rendered from (chunk, claim) by ``self.template``.

    Subclasses set ``self.model``, ``self.tokenizer``, ``self.template`` (a ``str.format`` string with
    ``{evidence}`` and ``{claim}``) and ``self.max_input_tokens`` (the window, special tokens included),
    and implement ``forward`` and ``chunk`` (the authors' chunks of one evidence).

    Args:
        device, dtype, max_tokens_per_batch, evidence_top_k, cache_size: see
            [`~fspo.verifiers.model_base.ModelVerifier`].
    """

    def __init__(
        self,
        *,
        device: str = "auto",
        dtype: str | None = None,
        max_tokens_per_batch: int = 16384,
        evidence_top_k: int | None = None,
        cache_size: int = 0,
    ):
        super().__init__(
            device=device,
            dtype=dtype,
            max_tokens_per_batch=max_tokens_per_batch,
            max_row_tokens=None,
            evidence_top_k=evidence_top_k,
            cache_size=cache_size,
        )
        self._chunk_cache: OrderedDict[str, list[str]] = OrderedDict()

    @abstractmethod
    def chunk(self, evidence: str) -> list[str]:
        """The authors' chunks of ``evidence``; none for an evidence without a sentence."""

    def render(self, evidence: str, claim: str) -> str:
        return self.template.format(evidence=evidence, claim=claim)

    def evidence_windows(self, pairs: Sequence[Pair]) -> tuple[list[Pair], list[int]]:
        """One (chunk, claim) pair per chunk of each pair's evidence, and the index of its pair."""
        chunks = {evidence: self._cached_chunks(evidence) for evidence in dict.fromkeys(e for e, _ in pairs)}
        chunked, owners = [], []
        for index, (evidence, claim) in enumerate(pairs):
            for chunk in chunks[evidence]:
                chunked.append((chunk, claim))
                owners.append(index)
        return chunked, owners

    def _cached_chunks(self, evidence: str) -> list[str]:
        if evidence in self._chunk_cache:
            self._chunk_cache.move_to_end(evidence)
            return self._chunk_cache[evidence]
        chunks = self._chunk_cache[evidence] = self.chunk(evidence)
        if len(self._chunk_cache) > CHUNK_CACHE_SIZE:
            self._chunk_cache.popitem(last=False)
        return chunks

    def encode(self, pairs: Sequence[Pair]) -> tuple[list[Features], list[int]]:
        texts = [self.render(evidence, claim) for evidence, claim in pairs]
        ids = self.tokenizer(texts, truncation=True, max_length=self.max_input_tokens)["input_ids"] if texts else []
        return [{"input_ids": row} for row in ids], list(range(len(pairs)))


class TemplateClassifierVerifier(TemplateVerifier):
    """Support probability = ``softmax(logits)[support_index]`` of a sequence classifier on the rendered text."""

    support_index: int = 1

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
        return torch.softmax(logits.float(), dim=-1)[:, self.support_index]


def load_sequence_classifier(model_path: str, tokenizer_path: str | None, dtype: torch.dtype, device: torch.device):
    """(model, fast tokenizer) of a 2-way ``AutoModelForSequenceClassification`` checkpoint."""
    from transformers import AutoModelForSequenceClassification

    tokenizer = load_tokenizer(tokenizer_path or model_path, use_fast=True)
    model = from_pretrained_checked(AutoModelForSequenceClassification, model_path, dtype=dtype)
    if model.config.num_labels != 2:
        raise ValueError(f"{model_path} has {model.config.num_labels} labels; a fact checker has 2 (1 = supported)")
    return model.to(device).eval(), tokenizer
