"""The resident memory of a run's FSDP workers, read when the run logs a step.

A worker whose memory climbs step after step is killed by Ray's memory monitor hours into a run, and a test's
one- or two-step run does not reach that point: it shows as growth from one step to the next. The quickstart's
worker grew 1.2 GB a step under jemalloc with decay off (``fspo.cpu.allocator``) until Ray killed it at step 9.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import psutil

# Ray prefixes what an actor prints with its class and pid; verl's fused actor/rollout/ref worker is WorkerDict.
FSDP_WORKER_LINE = re.compile(r"\(WorkerDict pid=(\d+)(?:, ip=[^)]*)?\)")


class RSSByStep:
    """An ``on_step`` callback for :func:`fspo.quickstart.launch.launch`: the summed RSS (MB) of the run's FSDP
    workers at each training step it logs, by step. The workers are found by their pids in the run's log (Ray
    starts them from its raylet, outside the driver's process tree)."""

    def __init__(self, log_path: str | Path) -> None:
        self.log_path = Path(log_path)
        self.mb: dict[int, int] = {}

    def __call__(self, record: dict) -> None:
        if "training/global_step" not in record["data"]:
            return
        pids = {int(pid) for pid in FSDP_WORKER_LINE.findall(self.log_path.read_text(errors="replace"))}
        total = 0
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                total += psutil.Process(pid).memory_info().rss >> 20
        self.mb[record["step"]] = total
