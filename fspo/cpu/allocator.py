"""How a CPU run's Ray workers allocate memory: jemalloc, keeping the pages it frees.

glibc's malloc maps every block over 32 MiB afresh and unmaps it on free. A CPU trainer step allocates
several such blocks per forward and backward (the logits and their log-softmax: tokens x 151,936 x 4 bytes
for a Qwen vocabulary, 311 MB for 512 tokens), so every step faults each of their pages in again and the
kernel zeroes it. In ``benchmarks/cpu_allocator.py`` (512 tokens through a 151,936-wide head, forward and
backward, 15 times) the kernel spent as much CPU time as the arithmetic.

Ray ships jemalloc (``ray/core/libjemalloc.so``, which it can preload into its own processes). The CPU
preset preloads it into the job's workers with decay off (its ``MALLOC_CONF``): freed pages stay mapped and
the next step reuses them. A worker's resident memory then stays at its peak, which it reaches every step
anyway. The allocator does not change what is computed. Where the library is missing (a Ray build without
it) the workers keep glibc.
"""

from __future__ import annotations

import os

PRELOAD_RESOLVER = "fspo_cpu_preload"


def jemalloc_path() -> str | None:
    """The jemalloc library that Ray ships, or None if this Ray has none."""
    import ray

    path = os.path.join(os.path.dirname(os.path.abspath(ray.__file__)), "core", "libjemalloc.so")
    return path if os.path.isfile(path) else None


def worker_preload(environ: dict[str, str] | None = None) -> str:
    """``LD_PRELOAD`` for the CPU run's workers: jemalloc ahead of what this process preloads already."""
    inherited = (os.environ if environ is None else environ).get("LD_PRELOAD", "")
    jemalloc = jemalloc_path()
    if jemalloc is None or jemalloc in inherited.replace(":", " ").split():
        return inherited
    return f"{jemalloc} {inherited}".strip()


def register_preload_resolver() -> None:
    """``${fspo_cpu_preload:}`` in a config resolves to :func:`worker_preload` (the CPU preset uses it)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(PRELOAD_RESOLVER):
        OmegaConf.register_new_resolver(PRELOAD_RESOLVER, worker_preload)


def preset_worker_env() -> dict[str, str]:
    """The variables the CPU preset (``fspo/config/platform/cpu.yaml``) gives a run's Ray workers, resolved."""
    from omegaconf import OmegaConf

    register_preload_resolver()
    preset = OmegaConf.load(os.path.join(os.path.dirname(os.path.dirname(__file__)), "config", "platform", "cpu.yaml"))
    return OmegaConf.to_container(preset.ray_kwargs.ray_init.runtime_env.env_vars, resolve=True)
