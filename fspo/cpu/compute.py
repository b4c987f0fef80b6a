"""How a CPU run computes: the floating-point dtype and the number of threads.

**Dtype.** torch runs a bf16 matrix product fast on the CPU only where the processor has bf16
dot-product instructions: AMX (Intel Sapphire Rapids and later) or AVX512-BF16 (Intel Cooper Lake,
AMD Zen 4 and later) on x86, the BF16 extension on Arm. Elsewhere (AVX2, plain AVX512) it converts
through a reference kernel: on a 2-core AMD EPYC with AVX2, one forward+backward of SmolLM2-135M
(2 x 128 tokens) takes 28 times longer under bf16 autocast than in fp32, the quickstart's biggest matmul
6 times longer (``benchmarks/cpu_dtype.py``), and verl's FSDP default (``mixed_precision.param_dtype:
bf16``) made ``recipes/run_cpu.sh``'s actor update 11 times slower. So the CPU preset asks :func:`compute_dtype` (through
the ``${fspo_cpu_dtype:}`` resolver) and computes in bf16 only where those instructions exist.

**Threads.** Ray starts an actor that asked for no CPUs with ``OMP_NUM_THREADS=1``; verl's workers ask
for none, so torch would compute on one core. On a CPU run the trainer's phases take turns (rollout,
log-probs, update), so each process may use every core it is allowed: :func:`cpu_threads` (1.7 times
faster forward+backward on 2 cores; on a machine shared with other jobs, set ``FSPO_CPU_THREADS=1``:
OpenMP threads that wait for a busy core are slower than one).
"""

from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass

from fspo.config.environment import environment_value

# torch's dtype names; verl's ``PrecisionType`` reads them too (``float32`` = ``fp32``).
FLOAT32 = "float32"
BFLOAT16 = "bfloat16"
DTYPE_RESOLVER = "fspo_cpu_dtype"
EXACT_LOGPROBS_RESOLVER = "fspo_exact_rollout_logprobs"
THREADS_ENV = "FSPO_CPU_THREADS"
DTYPE_ENV = "FSPO_CPU_DTYPE"


@dataclass(frozen=True)
class CPUFeatures:
    """What the processor offers for bf16 arithmetic, as torch sees it."""

    capability: str  # torch.backends.cpu.get_cpu_capability(): AVX2, AVX512, SVE256, DEFAULT, ...
    machine: str  # platform.machine(): x86_64, aarch64, ...
    avx512_bf16: bool
    amx: bool  # AMX tiles; every AMX processor has AMX-BF16
    arm_bf16: bool  # oneDNN's bf16 path on Arm (the BF16 extension)

    @classmethod
    def detect(cls) -> CPUFeatures:
        import torch

        machine = platform.machine().lower()
        arm = machine in ("aarch64", "arm64")
        return cls(
            capability=torch.backends.cpu.get_cpu_capability(),
            machine=machine,
            avx512_bf16=bool(torch.cpu._is_avx512_bf16_supported()),
            amx=bool(torch.cpu._is_amx_tile_supported()),
            # On x86 oneDNN also reports bf16 "support" for plain AVX512 (by conversion), so it
            # is only read on Arm, where it means the instructions are there.
            arm_bf16=arm and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
        )


@dataclass(frozen=True)
class DtypeChoice:
    dtype: str  # FLOAT32 or BFLOAT16
    reason: str


def choose_compute_dtype(features: CPUFeatures) -> DtypeChoice:
    """bf16 where the processor has bf16 dot-product instructions, fp32 everywhere else."""
    if features.amx:
        return DtypeChoice(BFLOAT16, f"{features.capability} with AMX: bf16 matmuls run on the tile unit")
    if features.avx512_bf16:
        return DtypeChoice(BFLOAT16, f"{features.capability} with AVX512-BF16: native bf16 dot products")
    if features.arm_bf16:
        return DtypeChoice(BFLOAT16, f"{features.capability} ({features.machine}) with the Arm BF16 extension")
    return DtypeChoice(
        FLOAT32, f"{features.capability}: no bf16 instructions, bf16 matmuls would take torch's slow reference path"
    )


@functools.lru_cache(maxsize=1)
def compute_dtype_choice() -> DtypeChoice:
    """This machine's choice; ``FSPO_CPU_DTYPE=float32|bfloat16`` overrides it."""
    forced = environment_value(DTYPE_ENV)
    if forced:
        return DtypeChoice(forced, f"set by {DTYPE_ENV}")
    return choose_compute_dtype(CPUFeatures.detect())


def compute_dtype() -> str:
    """``float32`` or ``bfloat16``: what a model computes in on this CPU (see the module docstring)."""
    return compute_dtype_choice().dtype


def torch_compute_dtype():
    """:func:`compute_dtype` as a ``torch.dtype``."""
    import torch

    return getattr(torch, compute_dtype())


def cpu_threads() -> int:
    """Threads a CPU process computes with: ``FSPO_CPU_THREADS``, else every core this process may use."""
    forced = environment_value(THREADS_ENV)
    if forced is not None:
        return forced
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def use_all_threads() -> int:
    """Let torch in this process compute on :func:`cpu_threads` threads (Ray gave it one)."""
    import torch

    threads = cpu_threads()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads


def rollout_logprobs_exact(dtype: str) -> bool:
    """Whether the ``hf`` rollout's log-probs are the actor's to float32 rounding at compute ``dtype``.

    SmolLM2-135M, 96 sampled tokens at T 0.7 against one forward of prompt + response: float32 max |d log p|
    3.2e-5 (mean 2.4e-6), bfloat16 0.17 (mean 0.025): only in float32 can they stand for the old-policy pass.
    """
    return str(dtype) in (FLOAT32, "fp32")


def register_dtype_resolver() -> None:
    """``${fspo_cpu_dtype:}`` in a config resolves to :func:`compute_dtype` (the CPU preset uses it), and
    ``${fspo_exact_rollout_logprobs:KEY}`` to :func:`rollout_logprobs_exact` of the dtype at config key ``KEY`` (a key,
    not a nested ``${KEY}``: Hydra's override grammar refuses those)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(DTYPE_RESOLVER):
        OmegaConf.register_new_resolver(DTYPE_RESOLVER, compute_dtype)
    if not OmegaConf.has_resolver(EXACT_LOGPROBS_RESOLVER):
        OmegaConf.register_new_resolver(
            EXACT_LOGPROBS_RESOLVER, lambda key, _root_: rollout_logprobs_exact(OmegaConf.select(_root_, str(key)))
        )


def startup_line(actor_dtype: str | None) -> str:
    """The line a CPU run prints at start: the actor's compute dtype, why, and the threads.

    ``actor_dtype`` is ``actor.fsdp_config.mixed_precision.param_dtype`` as configured (None =
    verl's default, bf16).
    """
    from verl.utils.torch_dtypes import PrecisionType

    choice = compute_dtype_choice()
    configured = str(PrecisionType.to_dtype(actor_dtype or BFLOAT16)).removeprefix("torch.")
    line = f"fspo: CPU compute dtype {configured} ({choice.reason}); {cpu_threads()} threads per process"
    if configured != choice.dtype:
        line += f". Overridden: this CPU's choice is {choice.dtype}"
    return line
