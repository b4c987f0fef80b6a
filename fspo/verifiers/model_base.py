"""Shared plumbing of the model backends (hhem, nli, embedding): device, dtype, batched scoring."""

from __future__ import annotations

import logging
import math
import sys
from abc import abstractmethod
from collections.abc import Sequence

import torch

from fspo.verifiers.base import Pair, PairPipeline
from fspo.verifiers.batching import (
    Features,
    pad_features,
    plan_micro_batches,
    run_batched,
)

DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}

logger = logging.getLogger(__name__)


def _ray_assigned_no_gpu() -> bool:
    """True inside a Ray process that Ray gave no GPU (e.g. verl's reward workers)."""
    ray = sys.modules.get("ray")  # not imported -> not a Ray process
    if ray is None or not ray.is_initialized():
        return False
    try:
        return not ray.get_gpu_ids()
    except Exception:  # noqa: BLE001 - an odd Ray state: fall back to torch's view
        return False


def resolve_device(device: str) -> torch.device:
    """``auto`` -> ``cuda`` when a GPU is visible and ours, else ``cpu``.

    Ray 2.60 leaves ``CUDA_VISIBLE_DEVICES`` set in actors that requested no GPU, so in a Ray process
    without a GPU of its own ``auto`` means ``cpu``: a reward worker must not silently take GPU memory
    from vLLM (use ``placement: ray`` to give the verifier its own GPU). An explicit ``cuda`` is obeyed.
    """
    if device == "auto":
        usable = torch.cuda.is_available() and not _ray_assigned_no_gpu()
        return torch.device("cuda" if usable else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device | None = None) -> torch.dtype:
    """``dtype`` as a torch dtype; on a CPU without bf16 instructions, float32 whatever was asked.

    Half precision there runs through torch's slow reference kernels (:mod:`fspo.cpu.compute`), several
    times slower than float32: a verifier configured for a GPU (``bfloat16``) computes in float32 on such
    a CPU instead, with a warning.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if device is not None and device.type == "cpu" and DTYPES[dtype] != torch.float32:
        from fspo.cpu.compute import FLOAT32, compute_dtype_choice

        choice = compute_dtype_choice()
        if choice.dtype == FLOAT32:
            logger.warning("fspo.verifier: dtype %s on this CPU (%s): computing in float32", dtype, choice.reason)
            return torch.float32
    return DTYPES[dtype]


def best_row_scores(owners: Sequence[int], values: Sequence[float], pairs: int) -> list[float]:
    """Each pair's score: the best of its rows' (a pair may span several rows, e.g. evidence chunks).

    A NaN row (an fp16 overflow, a broken forward) makes its pair unverifiable (NaN), never
    unsupported: ``max(-inf, nan)`` is ``-inf`` in Python, which would turn it into a -1 label.
    A pair without rows is unverifiable too.
    """
    scores = [float("-inf")] * pairs
    for owner, value in zip(owners, values):
        if math.isnan(value) or math.isnan(scores[owner]):
            scores[owner] = math.nan
        else:
            scores[owner] = max(scores[owner], value)
    return [math.nan if score == float("-inf") else score for score in scores]


class ModelVerifier(PairPipeline):
    """A verifier whose pairs become tokenized rows scored by one model forward per micro-batch.

    Subclasses set ``self.model``, ``self.tokenizer`` and implement:
      - ``encode(pairs) -> (rows, owners)``: tokenized rows and, for each row, the index of its pair
        (a pair may give several rows, e.g. evidence chunks; its score is the best row's);
      - ``forward(batch) -> Tensor[rows]``: support probability of each padded row.

    Args:
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: model dtype name (``float32``, ``bfloat16``, ``float16``).
        max_tokens_per_batch: padded-token budget of one micro-batch.
        evidence_top_k, cache_size: see [`~fspo.verifiers.base.PairPipeline`].
    """

    def __init__(
        self,
        *,
        device: str = "auto",
        dtype: str = "float32",
        max_tokens_per_batch: int = 16384,
        evidence_top_k: int | None = None,
        cache_size: int = 0,
    ):
        super().__init__(evidence_top_k=evidence_top_k, cache_size=cache_size)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.max_tokens_per_batch = max_tokens_per_batch

    @property
    def pad_token_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return 0 if pad is None else pad

    @abstractmethod
    def encode(self, pairs: Sequence[Pair]) -> tuple[list[Features], list[int]]: ...

    @abstractmethod
    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor: ...

    def _score_unique(self, pairs: list[Pair]) -> list[float]:
        rows, owners = self.encode(pairs)
        outputs = run_batched(
            rows,
            self.forward,
            pad_token_id=self.pad_token_id,
            device=self.device,
            max_tokens_per_batch=self.max_tokens_per_batch,
        )
        return best_row_scores(owners, [float(value) for value in outputs], len(pairs))

    def micro_batches(self, pairs: Sequence[Pair]) -> list[dict[str, torch.Tensor]]:
        """The padded micro-batches [`score`] would run for ``pairs`` (deduplicated): for benchmarks."""
        rows, _ = self.encode(list(dict.fromkeys(self.prepare(pairs))))
        plan = plan_micro_batches(
            [len(r["input_ids"]) for r in rows], self.max_tokens_per_batch
        )
        return [
            pad_features([rows[i] for i in idx], self.pad_token_id, self.device)
            for idx in plan
        ]
