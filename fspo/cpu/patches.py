"""The places where verl 0.9.1 assumes an accelerator, bridged for the CPU platform.

Each patch is idempotent and applied only in CPU mode (see :mod:`fspo.cpu.plugin`).
"""

from __future__ import annotations

import functools
import os

import torch.distributed

from fspo.cpu.compute import use_all_threads


def normalise_backend(backend: str | None) -> str | None:
    """Collapse verl's ``"cpu:gloo,<device>:<backend>"`` when the device is the CPU too.

    verl builds ``f"cpu:gloo,{device}:{backend}"``; with ``device == "cpu"`` that names the CPU
    twice and torch rejects it ("Duplicate device type cpu"). Every entry then is gloo on the CPU.

    >>> normalise_backend("cpu:gloo,cpu:gloo")
    'gloo'
    >>> normalise_backend("cpu:gloo,cuda:nccl")
    'cpu:gloo,cuda:nccl'
    """
    if not backend or "," not in backend:
        return backend
    entries = {entry.strip() for entry in backend.split(",")}
    if entries == {"cpu:gloo"}:
        return "gloo"
    return backend


def _patch_init_process_group() -> None:
    original = torch.distributed.init_process_group
    if getattr(original, "_fspo_cpu_patched", False):
        return

    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        if args:
            args = (normalise_backend(args[0]), *args[1:])
        elif "backend" in kwargs:
            kwargs["backend"] = normalise_backend(kwargs["backend"])
        return original(*args, **kwargs)

    init_process_group._fspo_cpu_patched = True
    torch.distributed.init_process_group = init_process_group


def _patch_cpu_offload_policy() -> None:
    """Make FSDP2's ``CPUOffloadPolicy`` never pin memory.

    verl wraps every forward-only model (the reference policy of a KL loss) in
    ``CPUOffloadPolicy(pin_memory=True)``; pinning needs an accelerator, so with a CPU-only torch
    the reference model fails to build ("Cannot access accelerator device when none is
    available"). On the CPU there is nothing to pin for: parameters already live where they are
    computed on. The policy is replaced where verl looks it up (torch's FSDP package, which
    ``verl.utils.fsdp_utils`` imports it from, and the modules that re-export it once loaded).
    """
    import sys

    import torch.distributed.fsdp as fsdp

    original = fsdp.CPUOffloadPolicy
    if getattr(original, "_fspo_cpu_patched", False):
        return

    class UnpinnedCPUOffloadPolicy(original):
        _fspo_cpu_patched = True

        def __init__(self, pin_memory: bool = False):
            super().__init__(pin_memory=False)

    fsdp.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy
    for name in ("verl.utils.fsdp_utils", "verl.workers.engine.fsdp.transformer_impl"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "CPUOffloadPolicy", None) is original:
            module.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy


def apply() -> None:
    """Apply every CPU patch in this process."""
    _patch_init_process_group()
    _patch_cpu_offload_policy()
    # Ray runs verl's workers with OMP_NUM_THREADS=1 (they ask it for no CPUs); the trainer's
    # phases take turns on the machine, so each may compute on every core.
    use_all_threads()
    # verl registers its FSDP engine for cuda/npu only, but the engine itself is
    # device-agnostic (it asks the platform for its device): look it up under "cuda".
    os.environ.setdefault("VERL_ENGINE_DEVICE", "cuda")
    # The platform is decided once here; children (Ray workers) inherit the decision.
    os.environ.setdefault("VERL_PLATFORM", "cpu")
