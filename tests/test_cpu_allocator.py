"""The CPU preset's allocator (fspo.cpu.allocator): its workers preload Ray's jemalloc, which reuses freed pages and
returns them to the kernel after a while."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from fspo.cpu.allocator import jemalloc_path, preset_worker_env, worker_preload
from fspo_testing.allocator import ALLOCATOR_VARIABLES

JEMALLOC = jemalloc_path()

# Allocates and frees a 64 MiB torch block 20 times (over glibc's 32 MiB mapping limit), then reports the page
# faults that cost, jemalloc's decay option and whether jemalloc is mapped.
PROBE = r"""
import ctypes, json, resource, torch
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = torch.empty(64 << 20, dtype=torch.uint8)
    block.fill_(1)  # writes every page
    del block
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
decay = None
if "libjemalloc" in open("/proc/self/maps").read():
    value, size = ctypes.c_ssize_t(), ctypes.c_size_t(ctypes.sizeof(ctypes.c_ssize_t))
    ctypes.CDLL(None).mallctl(b"opt.dirty_decay_ms", ctypes.byref(value), ctypes.byref(size), None, 0)
    decay = value.value
print(json.dumps({"faults": faults, "decay": decay}))
"""


def probe(env_vars: dict[str, str]) -> dict:
    """PROBE's report in a process with ``env_vars`` and glibc's defaults (the suite's own settings left out)."""
    left_out = ("LD_PRELOAD", "MALLOC_CONF", *ALLOCATOR_VARIABLES)
    env = {k: v for k, v in os.environ.items() if k not in left_out}
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env={**env, **env_vars}, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and not result.stderr, result.stderr
    return json.loads(result.stdout)


def test_ray_ships_the_jemalloc_the_preset_preloads():
    assert JEMALLOC is not None and JEMALLOC.endswith("ray/core/libjemalloc.so")


def test_the_presets_workers_fault_a_freed_block_back_in_with_few_pages_and_return_it_in_time():
    env = preset_worker_env()
    assert env["LD_PRELOAD"].split()[0] == JEMALLOC
    glibc, preset = probe({}), probe(env)
    assert glibc["decay"] is None  # no jemalloc without the preset
    # Freed pages go back to the kernel within a minute: with decay off (-1) a trainer's worker grew every step
    # (tests/test_e2e_fspo.py measures it).
    assert 0 < preset["decay"] <= 60_000
    # glibc maps the block afresh each time: 20 x 16,384 pages of 4 KiB. The preset's torch asks for 2 MB pages.
    assert glibc["faults"] > 20 * 16_384 * 0.9, glibc
    assert preset["faults"] < 20 * 16_384 / 10, preset


paths = st.lists(st.from_regex(r"/[a-z0-9_./-]{1,30}\.so", fullmatch=True), max_size=4)


@given(paths, st.sampled_from([" ", ":"]), st.booleans())
def test_jemalloc_is_preloaded_once_ahead_of_what_the_driver_preloads(inherited, separator, has_jemalloc):
    preloaded = [*inherited, JEMALLOC] if has_jemalloc else inherited
    value = worker_preload({"LD_PRELOAD": separator.join(preloaded)} if preloaded else {})
    names = value.replace(":", " ").split()
    assert names.count(JEMALLOC) == 1
    assert [name for name in names if name != JEMALLOC] == [name for name in preloaded if name != JEMALLOC]
    if not has_jemalloc:
        assert names[0] == JEMALLOC
