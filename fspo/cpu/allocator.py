"""How a CPU run's Ray workers allocate memory: jemalloc with its default decay, torch's large blocks on huge pages.

glibc's malloc maps every block over 32 MiB afresh and unmaps it on free. A CPU trainer step allocates
several such blocks per forward and backward (the logits and their log-softmax: tokens x 151,936 x 4 bytes
for a Qwen vocabulary, 311 MB for 512 tokens), so every step faults each of their pages in again and the
kernel zeroes it. In ``benchmarks/cpu_allocator.py`` (512 tokens through a 151,936-wide head, forward and
backward, 15 times) the kernel spent as much CPU time as the arithmetic.

Ray ships jemalloc (``ray/core/libjemalloc.so``, which it can preload into its own processes). The CPU
preset preloads it into the job's workers: a freed page stays mapped for the next allocation and goes back
to the kernel over about 10 s (jemalloc 5.3's default decay, written out in the preset's ``MALLOC_CONF``),
so a step reuses its own pages and a worker's memory stays at one step's peak. ``THP_MEM_ALLOC_ENABLE=1``
puts torch's blocks of 2 MB and more on 2 MB pages, so a block that is faulted in again costs 512 times
fewer faults. Where the library is missing (a Ray build without it) the workers keep glibc.

Decay off (every freed page kept) does not bound a worker: in the real trainer the FSDP worker grew every step,
the quickstart's by ~1.2 GB a step until Ray's memory monitor killed it at 15.4 GB in step 9. Measured here, four
steps of a tiny run (the end-to-end tests' model), the FSDP worker's RSS at each step's end and the step's
seconds, steps 2-4:

| jemalloc | RSS by step (MB) | seconds a step |
|---|---|---|
| decay off | 2,694 → 3,167 → 3,689 → 4,030 | 8.8, 8.5, 7.6 |
| default decay | 888 → 890 → 898 → 897 | 11.1, 12.2, 10.9 |
| default decay, torch on huge pages (the preset) | 896 → 896 → 898 → 893 | 9.1, 10.2, 8.8 |
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
