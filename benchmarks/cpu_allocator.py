"""glibc against the CPU preset's jemalloc on a trainer step's largest blocks: the measurement behind
``fspo.cpu.allocator``.

Each allocator runs, in a fresh process, the same loop: hidden states (512 tokens x 64) through a
151,936-wide output head (a Qwen vocabulary), log-softmax, backward, 15 times, on one thread. Prints each
one's wall seconds, user and kernel CPU seconds and page faults. glibc runs with its defaults (as a user's
process does; the test suite's own glibc settings are left out); jemalloc with the preset's worker variables.

    python benchmarks/cpu_allocator.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from fspo.cpu.allocator import preset_worker_env

STEP_LOOP = r"""
import json, resource, time, torch
torch.manual_seed(0)
torch.set_num_threads(1)
head = torch.randn(64, 151936, requires_grad=True)
started = time.perf_counter()
for _ in range(15):
    log_probs = torch.log_softmax(torch.randn(512, 64) @ head, -1)
    log_probs[:, :10].sum().backward()
    head.grad = None
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": time.perf_counter() - started, "user_s": usage.ru_utime, "kernel_s": usage.ru_stime,
                  "faults": usage.ru_minflt}))
"""
# The suite's glibc settings (fspo_testing/allocator.py) and any allocator variables this shell has.
LEFT_OUT = ("LD_PRELOAD", "MALLOC_CONF", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "THP_MEM_ALLOC_ENABLE")


def measure(extra: dict[str, str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LEFT_OUT}
    result = subprocess.run(
        [sys.executable, "-c", STEP_LOOP], env={**env, **extra}, capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


def main() -> None:
    print("| allocator | wall s | user CPU s | kernel CPU s | page faults |")
    print("|---|---|---|---|---|")
    for name, extra in (("glibc (defaults)", {}), ("jemalloc (CPU preset)", preset_worker_env())):
        row = measure(extra)
        print(f"| {name} | {row['wall_s']:.1f} | {row['user_s']:.1f} | {row['kernel_s']:.1f} | {row['faults']:,} |")


if __name__ == "__main__":
    main()
