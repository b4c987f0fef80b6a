"""A verl platform for the CPU: gloo collectives, one "device", no memory statistics."""

from __future__ import annotations

import types
from contextlib import contextmanager
from typing import Any, Optional

import torch
from verl.plugin.platform import PlatformBase

from fspo.cpu import cpu_mode_requested


def _zero(*_args, **_kwargs) -> int:
    return 0


def _noop(*_args, **_kwargs) -> None:
    return None


def _mem_get_info(*_args, **_kwargs) -> tuple[int, int]:
    import psutil

    memory = psutil.virtual_memory()
    return memory.available, memory.total


def _build_device_module() -> types.ModuleType:
    """``torch.cpu`` plus the ``torch.cuda``-style functions verl calls on its device module.

    verl logs memory (``memory_allocated``, ``max_memory_reserved``...), empties caches and
    saves RNG states through ``get_torch_device()``; ``torch.cpu`` lacks most of these, so they
    are answered here: memory counters read 0, cache and peak-reset calls do nothing, and the
    RNG state is torch's global (CPU) generator.
    """
    module = types.ModuleType("fspo_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("_"):
            setattr(module, name, getattr(torch.cpu, name))
    module.is_available = lambda: True
    module.current_device = lambda: "cpu"  # verl's FSDP2 code uses it as a torch device
    module.device_count = lambda: 1
    module.set_device = _noop
    module.synchronize = _noop
    module.get_device_name = lambda *_: "cpu"
    module.empty_cache = _noop
    module.ipc_collect = _noop
    module.set_per_process_memory_fraction = _noop
    module.reset_peak_memory_stats = _noop
    module.memory_allocated = _zero
    module.memory_reserved = _zero
    module.max_memory_allocated = _zero
    module.max_memory_reserved = _zero
    module.mem_get_info = _mem_get_info
    module.get_rng_state = lambda *_: torch.get_rng_state()
    module.set_rng_state = lambda state, *_: torch.set_rng_state(state)
    module.manual_seed = torch.manual_seed
    module.manual_seed_all = torch.manual_seed
    return module


CPU_DEVICE_MODULE = _build_device_module()


class PlatformCPU(PlatformBase):
    """verl's view of a machine without an accelerator.

    Ray still schedules verl's workers on a logical ``GPU`` resource (its placement groups ask
    for one per worker), so ``ray_resource_name`` stays ``GPU`` and the CPU preset declares
    fake GPUs to Ray: nothing ever touches a GPU, torch is the CPU build.
    """

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return cpu_mode_requested()

    def current_device(self) -> str:  # type: ignore[override]
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets CUDA_VISIBLE_DEVICES for actors holding its (logical) GPUs; harmless on CPU.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
