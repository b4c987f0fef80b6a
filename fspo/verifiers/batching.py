"""Token-budget micro-batching for model verifiers, with halving on out-of-memory, and what a failed call means.

Every sequence of a training step is tokenized once, sorted by length (longest first, so an OOM shows
up on the first micro-batch) and grouped so that each micro-batch's padded size
``longest length x rows`` stays within ``max_tokens_per_batch`` and, when a backend gives one, its
attention size ``longest length^2 x rows`` within ``max_attention_cells`` (eager attention keeps
``rows x heads x L x L`` tensors: with long rows that term, not the token count, bounds the memory).

A failed call is classified (:func:`classify_error`): an allocation failure (cuBLAS's ``ALLOC_FAILED`` included)
is retried in halves and then fails its rows alone; only a lost CUDA context (:func:`device_broken`) makes a
verifier server exit for Ray to restart it, since a fresh process would meet the same full GPU.

A forward that returns NaN or ±inf for a row (a float16 overflow, broken weights) fails its call too
(:class:`NonFiniteOutput`): every model backend's output passes here, and a non-finite number is no verdict.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence

import torch

from fspo.utils.arguments import SettingFailure

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


class ErrorKind(enum.Enum):
    """What a failed model call says about the process that ran it."""

    OUT_OF_MEMORY = "out of memory"  # this call asked for more than was free: retry smaller, or fail its rows
    DEVICE_BROKEN = "device broken"  # the CUDA context is lost: every later call fails until the process ends
    OTHER = "other"  # a bad input or setting: the same call fails again, a fresh process changes nothing


# Allocation failures, as torch words them: its caching allocator ("CUDA out of memory."), a CUDA call
# (cudaErrorMemoryAllocation: "out of memory"), the CPU allocator, and the CUDA libraries' ``*_ALLOC_FAILED``
# statuses (cuBLAS, cuSOLVER, cuDNN, cuFFT) that torch puts in the message. cuBLAS reports
# ``CUBLAS_STATUS_NOT_INITIALIZED`` from ``cublasCreate`` when the handle's own allocations fail (its docs: "an
# error in the CUDA Runtime API called by the cuBLAS routine"): a colocated process meets it when vLLM and the
# actor left no memory.
_OUT_OF_MEMORY_SIGNS = ("out of memory", "can't allocate memory", "_alloc_failed", "cublas_status_not_initialized")
# The CUDA runtime's sticky errors (cudaGetErrorString's wording; the CUDA Runtime API's error types say of
# each that "the process must be terminated and relaunched"), as they appear inside torch's and Triton's
# messages, plus the libraries' statuses for a kernel that failed to execute. Matched whole: every torch CUDA
# error ends "... to enable device-side assertions", which is not a device-side assert.
_BROKEN_DEVICE_SIGNS = (
    "an illegal memory access was encountered",
    "device-side assert triggered",
    "unspecified launch failure",
    "misaligned address",
    "an illegal instruction was encountered",
    "hardware stack error",
    "invalid program counter",
    "operation not supported on global/shared address space",
    "the launch timed out and was terminated",
    "uncorrectable ecc error encountered",
    "cublas_status_execution_failed",
    "cudnn_status_execution_failed",
)


class NonFiniteOutput(SettingFailure):
    """A model forward gave NaN or ±inf for some rows: the call failed (counted by the run-level guard),
    it did not find the pairs unverifiable. A command that scores outside training stops with its one line."""


def non_finite_rows(output: torch.Tensor) -> list[int]:
    """The indices of the rows of ``output`` (first dimension) that hold a NaN or ±inf anywhere."""
    finite = torch.isfinite(output.reshape(output.shape[0], -1)).all(dim=1)
    return (~finite).nonzero().flatten().tolist()


def classify_error(error: BaseException) -> ErrorKind:
    """Whether ``error`` is an allocation failure, a lost CUDA context, or anything else (by torch's type and
    the CUDA runtime's and libraries' words in its message; an allocation failure wins over anything else)."""
    message = str(error).lower()
    if isinstance(error, torch.cuda.OutOfMemoryError) or any(sign in message for sign in _OUT_OF_MEMORY_SIGNS):
        return ErrorKind.OUT_OF_MEMORY
    if any(sign in message for sign in _BROKEN_DEVICE_SIGNS):
        return ErrorKind.DEVICE_BROKEN
    return ErrorKind.OTHER


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an allocation failure (:func:`classify_error`): the call may succeed smaller."""
    return classify_error(error) is ErrorKind.OUT_OF_MEMORY


def device_broken(error: BaseException) -> bool:
    """Whether ``error`` says the process's CUDA context is lost (an illegal memory access, a device-side
    assert: every later CUDA call fails too), so only a fresh process helps; not an out-of-memory call (a fresh
    process would load into the same full GPU) nor a bad input."""
    return classify_error(error) is ErrorKind.DEVICE_BROKEN


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

    Raises:
        NonFiniteOutput: a row's output holds NaN or ±inf; the caller isolates such rows as it does failing
            ones (:func:`fspo.utils.coalesce.isolate_failures`).
    """
    results: list[torch.Tensor | None] = [None] * len(rows)
    lengths = [len(row["input_ids"]) for row in rows]

    def run(indices: list[int]) -> None:
        try:
            with torch.inference_mode():
                output = forward(pad_features([rows[i] for i in indices], pad_token_id, device))
        except (torch.cuda.OutOfMemoryError, RuntimeError) as error:
            if not is_out_of_memory(error) or len(indices) == 1:
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
        bad = non_finite_rows(output)
        if bad:
            raise NonFiniteOutput(
                f"the verifier model gave NaN or ±inf for {len(bad)} of {len(indices)} rows of a micro-batch (a "
                "float16 overflow or broken weights): use fspo.verifier.dtype=float32, tf32 or bfloat16 (a command's "
                "--verifier-option dtype=...), or check the checkpoint"
            )
        for row, i in enumerate(indices):
            results[i] = output[row]

    for indices in plan_micro_batches(lengths, max_tokens_per_batch, max_attention_cells):
        run(indices)
    return results  # type: ignore[return-value]
