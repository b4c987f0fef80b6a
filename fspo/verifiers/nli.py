"""Any Hugging Face sequence-classification NLI model (DeBERTa MNLI/FEVER/ANLI, MiniCheck, ...).

Support is the probability of the model's entailment label (found in ``config.id2label``). Evidence
longer than the model's window is cut into overlapping chunks (the tokenizer's own overflow with a
stride); the pair scores as its best chunk.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from fspo.utils.checked_load import check_window, from_pretrained_checked, load_tokenizer
from fspo.verifiers.base import Pair
from fspo.verifiers.batching import Features
from fspo.verifiers.model_base import ModelVerifier

ENTAILMENT_NAMES = (
    "entailment",
    "entail",
    "entailed",
    "supported",
    "support",
    "consistent",
    "yes",
)


def entailment_index(id2label: dict, override: str | int | None = None) -> int:
    """Index of the entailment class in ``id2label``; ``override`` may give the label name or index."""
    labels = {int(i): str(name) for i, name in id2label.items()}
    if override is not None:
        if isinstance(override, int) or str(override).isdigit():
            if int(override) in labels:
                return int(override)
        else:
            for i, name in labels.items():
                if name.lower() == str(override).lower():
                    return i
        raise ValueError(f"entailment_label={override!r} is not one of the model's labels {labels}")
    for wanted in ENTAILMENT_NAMES:
        for i, name in labels.items():
            if name.lower() == wanted:
                return i
    raise ValueError(
        f"cannot find an entailment label in the model's config.id2label {labels}; "
        "set fspo.verifier.entailment_label to the label name or index that means 'supported'"
    )


def _window(tokenizer, config) -> int:
    """The longest input the model takes: the tokenizer's limit capped by the position table."""
    limit = tokenizer.model_max_length if tokenizer.model_max_length < 1_000_000 else 512
    positions = _positions(config)
    return min(limit, positions) if positions else limit


def _positions(config) -> int | None:
    """The longest input the model's position table takes (None: no absolute table)."""
    positions = getattr(config, "max_position_embeddings", None)
    if not positions:
        return None
    # RoBERTa-family position ids start after the padding index.
    return positions - ((config.pad_token_id or 0) + 1 if "roberta" in config.model_type else 0)


class NLIVerifier(ModelVerifier):
    """Entailment probability of ``(premise=evidence, hypothesis=claim)`` from an NLI classifier.

    Args:
        model_path: hub id or directory of an ``AutoModelForSequenceClassification`` checkpoint.
        tokenizer_path: default ``model_path``.
        entailment_label: label name or index meaning "supported", if ``config.id2label`` has none of
            ``entailment``/``supported``/... .
        max_length: window in tokens; default: the model's (e.g. 512).
        stride: tokens shared by consecutive evidence chunks; default a quarter of the window.
        **kwargs: device, dtype, max_tokens_per_batch, evidence_top_k, cache_size.
    """

    name = "nli"

    def __init__(
        self,
        model_path: str,
        tokenizer_path: str | None = None,
        entailment_label: str | int | None = None,
        max_length: int | None = None,
        stride: int | None = None,
        trust_remote_code: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        from transformers import AutoModelForSequenceClassification

        self.tokenizer = load_tokenizer(tokenizer_path or model_path, trust_remote_code=trust_remote_code)
        self.model = (
            from_pretrained_checked(
                AutoModelForSequenceClassification, model_path, dtype=self.dtype, trust_remote_code=trust_remote_code
            )
            .to(self.device)
            .eval()
        )
        self.label_index = entailment_index(self.model.config.id2label, entailment_label)
        self.max_length = max_length or _window(self.tokenizer, self.model.config)
        if _positions(self.model.config):
            check_window(model_path, "max_length", self.max_length, _positions(self.model.config))
        self.stride = self.max_length // 4 if stride is None else stride
        # The claim must leave room for a chunk of evidence: it is cut to half the window at most.
        self.max_claim_tokens = self.max_length // 2 - self.tokenizer.num_special_tokens_to_add(pair=True)
        if not 0 <= self.stride < self.max_length // 2:
            raise ValueError(
                f"stride must be in [0, max_length/2), got {self.stride} with max_length {self.max_length}"
            )

    def _clip_claims(self, claims: list[str]) -> list[str]:
        encoded = self.tokenizer(claims, add_special_tokens=False, return_offsets_mapping=True)
        clipped = []
        for claim, offsets in zip(claims, encoded["offset_mapping"]):
            if len(offsets) > self.max_claim_tokens:
                claim = claim[: offsets[self.max_claim_tokens - 1][1]]
            clipped.append(claim)
        return clipped

    def encode(self, pairs: Sequence[Pair]) -> tuple[list[Features], list[int]]:
        evidence = [e for e, _ in pairs]
        claims = self._clip_claims([c for _, c in pairs])
        encoded = self.tokenizer(
            evidence,
            claims,
            truncation="only_first",
            max_length=self.max_length,
            stride=self.stride,
            return_overflowing_tokens=True,
        )
        keys = [k for k in ("input_ids", "token_type_ids") if k in encoded]
        rows = [{k: encoded[k][i] for k in keys} for i in range(len(encoded["input_ids"]))]
        return rows, list(encoded["overflow_to_sample_mapping"])

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = self.model(**batch).logits
        return torch.softmax(logits.float(), dim=-1)[:, self.label_index]
