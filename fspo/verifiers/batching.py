"""Token-budget micro-batching for model verifiers, with halving on CUDA out-of-memory.

Every sequence of a training step is tokenized once, sorted by length (longest first, so an OOM shows
up on the first micro-batch) and grouped so that each micro-batch's padded size
``longest length x rows`` stays within ``max_tokens_per_batch`` and, when a backend gives one, its
attention size ``longest length^2 x rows`` within ``max_attention_cells`` (eager attention keeps
``rows x heads x L x L`` tensors: with long rows that term, not the token count, bounds the memory).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import torch

logger = logging.getLogger(__name__)

Features = Mapping[str, Sequence[int]]  # one tokenized sequence: input_ids (+ token_type_ids)


def plan_micro_batches(
    lengths: Sequence[int], max_tokens: int, max_attention_cells: int | None = None
) -> list[list[int]]:
    """Groups sequence indices into micro-batches of at most ``max_tokens`` padded tokens and, if given,
    at most ``max_attention_cells`` padded ``rows x width^2``.

    Indices are taken longest first; a sequence longer than a budget gets a micro-batch of its own.
    Every index appears exactly once.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens_per_batch must be >= 1, got {max_tokens}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        # Longest first: the first index of a batch fixes its padded width.
        width = lengths[current[0]] if current else lengths[i]
        rows = len(current) + 1
        over_cells = max_attention_cells is not None and width * width * rows > max_attention_cells
        if current and (width * rows > max_tokens or over_cells):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def pad_features(rows: Sequence[Features], pad_token_id: int, device: torch.device | str) -> dict[str, torch.Tensor]:
    """Right-pads tokenized rows into tensors; ``attention_mask`` comes from the lengths, not from the ids
    (HHEM's prompt starts with a literal ``<pad>`` token that must stay attended)."""
    width = max(len(row["input_ids"]) for row in rows)
    batch: dict[str, torch.Tensor] = {}
    for key in rows[0]:
        fill = pad_token_id if key == "input_ids" else 0
        batch[key] = torch.tensor(
            [list(row[key]) + [fill] * (width - len(row[key])) for row in rows],
            dtype=torch.long,
        )
    batch["attention_mask"] = torch.tensor(
        [[1] * len(row["input_ids"]) + [0] * (width - len(row["input_ids"])) for row in rows],
        dtype=torch.long,
    )
    return {key: value.to(device) for key, value in batch.items()}


def _is_out_of_memory(error: BaseException) -> bool:
    """CUDA's out-of-memory error, or the CPU allocator's (a RuntimeError: "can't allocate memory")."""
    message = str(error).lower()
    return (
        isinstance(error, torch.cuda.OutOfMemoryError)
        or "out of memory" in message
        or "can't allocate memory" in message
    )


def device_broken(error: BaseException) -> bool:
    """Whether ``error`` says the process's accelerator context is broken (an illegal memory access, a
    device-side assert: every later CUDA call fails too), as opposed to a bad input or an out-of-memory batch."""
    if _is_out_of_memory(error):
        return False
    accelerator_error = getattr(torch, "AcceleratorError", ())  # torch >= 2.8 raises it for CUDA errors
    if accelerator_error and isinstance(error, accelerator_error):
        return True
    message = str(error)
    return any(sign in message for sign in ("CUDA error", "device-side assert", "CUBLAS_STATUS_", "cuDNN error"))


def run_batched(
    rows: Sequence[Features],
    forward: Callable[[dict[str, torch.Tensor]], torch.Tensor],
    *,
    pad_token_id: int,
    device: torch.device | str,
    max_tokens_per_batch: int,
    max_attention_cells: int | None = None,
) -> list[torch.Tensor]:
    """Runs ``forward`` over all ``rows`` in token-budget micro-batches (:func:`plan_micro_batches`); returns
    one CPU result per row.

    On out-of-memory a micro-batch is split in half and retried (down to one row, which re-raises).
    """
    results: list[torch.Tensor | None] = [None] * len(rows)
    lengths = [len(row["input_ids"]) for row in rows]

    def run(indices: list[int]) -> None:
        try:
            with torch.inference_mode():
                output = forward(pad_features([rows[i] for i in indices], pad_token_id, device))
        except (torch.cuda.OutOfMemoryError, RuntimeError) as error:
            if not _is_out_of_memory(error) or len(indices) == 1:
                raise
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            half = len(indices) // 2
            logger.warning(
                "verifier out of memory on %d rows; retrying as %d + %d",
                len(indices),
                half,
                len(indices) - half,
            )
            run(indices[:half])
            run(indices[half:])
            return
        output = output.detach().float().cpu()
        for row, i in enumerate(indices):
            results[i] = output[row]

    for indices in plan_micro_batches(lengths, max_tokens_per_batch, max_attention_cells):
        run(indices)
    return results  # type: ignore[return-value]
