"""Freed memory is reused, not handed back to the kernel: the suite's processes allocate and free the same large
blocks every step, and glibc's default turns each one into fresh page faults.

On CPU the tiny models' cost is the projection onto a 151k-token vocabulary: each forward pass allocates logits of
hundreds of MB and frees them. glibc serves any block over 32 MB with its own ``mmap`` and ``munmap``s it on
``free``, so the next step's block page-faults in again, 4 KiB at a time, each page zeroed by the kernel.
Measured here (15 steps of the tiny reasoner's warm-up, one thread): 44 s wall, 19 s of it in the kernel, 6.3 M page
faults; with glibc kept off ``mmap`` and torch's large blocks on huge pages, 27 s and 0.13 M faults. One one-step twin:
96 → 80 CPU-s. The cost is resident memory that is not returned: the warm-up's peak went 2.1 → 3.5 GB.

:func:`reuse_freed_memory` sets the variables for every process the suite starts (read once at a process's start:
by glibc, and by torch at its first large allocation) and applies the same to the calling process.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import MutableMapping

# glibc's names (malloc.h) for mallopt: the count of blocks served by mmap, and the free space at the heap's top
# that is returned to the kernel.
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
KEEP_BYTES = 2**31 - 1  # mallopt's largest (an int): free space at the top under 2 GiB stays for the next step

ALLOCATOR_VARIABLES = {
    "MALLOC_MMAP_MAX_": "0",  # every block from the heap, which free() keeps for the next malloc
    "MALLOC_TRIM_THRESHOLD_": str(KEEP_BYTES),
    "THP_MEM_ALLOC_ENABLE": "1",  # torch: blocks of 2 MB and more on 2 MB pages (madvise), 512x fewer faults
}


def reuse_freed_memory(env: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set :data:`ALLOCATOR_VARIABLES` in ``env`` (a value already set is kept) and, where ``env`` is this process's,
    the same glibc settings here with ``mallopt``. Returns the variables as set."""
    for name, value in ALLOCATOR_VARIABLES.items():
        env.setdefault(name, value)
    if env is os.environ:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        if hasattr(libc, "mallopt"):  # glibc; another C library keeps its own policy
            libc.mallopt(M_MMAP_MAX, int(env["MALLOC_MMAP_MAX_"]))
            libc.mallopt(M_TRIM_THRESHOLD, int(env["MALLOC_TRIM_THRESHOLD_"]))
    return {name: env[name] for name in ALLOCATOR_VARIABLES}
