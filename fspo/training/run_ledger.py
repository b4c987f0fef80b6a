"""``FSPO_RUN_LEDGER=FILE``: every trainer run appends one JSON line with its wall and CPU seconds.

The test suite sets it (tests/conftest.py) to count the trainer runs a CI run starts and what each costs; a
user can set it to keep the same account of their own runs. CPU seconds are the run's process tree (the driver,
Ray's daemons and workers), sampled every :data:`SAMPLE_S` seconds: a process that ends between two samples loses
at most that interval of its CPU time, so the figure errs low.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time

import psutil

LEDGER_ENV = "FSPO_RUN_LEDGER"
SAMPLE_S = 1.0


class _TreeCPU:
    """The CPU seconds of this process and every descendant seen, each at its last sample."""

    def __init__(self) -> None:
        self._root = psutil.Process()
        self._seen: dict[tuple[int, float], float] = {}  # (pid, create time) -> user + system seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fspo-run-ledger", daemon=True)

    def _sample(self) -> None:
        try:
            processes = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return
        processes += _workers_of_raylets({p.pid for p in processes if _name(p) == "raylet"}, processes)
        for process in processes:
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                self._seen[(process.pid, process.create_time())] = times.user + times.system

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._sample()

    def __enter__(self) -> _TreeCPU:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def seconds(self) -> float:
        return sum(self._seen.values())


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return ""


def _workers_of_raylets(raylets: set[int], known: list[psutil.Process]) -> list[psutil.Process]:
    """Ray workers of these raylets outside the tree: a worker is started by a command Ray runs
    (``py_executable``), which may hand it to a process of its own (the test suite forks them from a warm one)."""
    if not raylets:
        return []
    known_pids = {p.pid for p in known}
    found = []
    for process in psutil.process_iter():
        if process.pid in known_pids:
            continue
        with contextlib.suppress(psutil.Error, ValueError):
            if int(process.environ().get("RAY_RAYLET_PID", "0")) in raylets:
                found.append(process)
    return found


@contextlib.contextmanager
def ledger_entry(label: str):
    """Record the enclosed trainer run in ``$FSPO_RUN_LEDGER`` (nothing when it is unset)."""
    path = os.environ.get(LEDGER_ENV)
    if not path:
        yield
        return
    started = time.monotonic()
    cpu = _TreeCPU()
    outcome = "error"
    try:
        with cpu:
            yield
        outcome = "ok"
    finally:
        record = {
            "run": label,
            # pytest names the test that started the run in every process it starts.
            "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0],
            "wall_s": round(time.monotonic() - started, 1),
            "cpu_s": round(cpu.seconds, 1),
            "outcome": outcome,
        }
        # One short line, appended with O_APPEND: lines from concurrent runs do not interleave.
        with open(path, "a") as ledger:
            ledger.write(json.dumps(record) + "\n")
