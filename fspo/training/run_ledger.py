"""``FSPO_RUN_LEDGER=FILE``: every trainer run appends one JSON line with its wall and CPU seconds.

The test suite sets it (tests/conftest.py) to count the trainer runs a CI run starts and what each costs; a
user can set it to keep the same account of their own runs. CPU seconds are those the run's processes spent while it
ran: the driver's process tree (with the Ray it starts: daemons and workers) and, for a run that joins a cluster on
this machine (``RAY_ADDRESS``), that cluster's workers, other jobs' included. They are sampled every
:data:`SAMPLE_S` seconds: a process that ends between two samples loses at most that interval of its CPU time.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time

import psutil

from fspo.config.environment import environment_value

LEDGER_ENV = "FSPO_RUN_LEDGER"
SAMPLE_S = 1.0


class _TreeCPU:
    """The CPU seconds the run's processes spent since it started, each process at its last sample."""

    def __init__(self) -> None:
        self._root = psutil.Process()
        self._started = time.time()
        # A cluster the run joins is there before it starts: its raylets are looked up once.
        self._joined_raylets = _raylets_of(os.environ.get("RAY_ADDRESS", "").removeprefix("ray://"))
        self._seen: dict[tuple[int, float], float] = {}  # (pid, create time) -> user + system seconds
        self._raylet_of: dict[tuple, int] = {}  # (pid, create time, name) -> the RAY_RAYLET_PID it was started with
        self._before: dict[tuple[int, float], float] = {}  # the same, at first sight, of a process older than the run
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fspo-run-ledger", daemon=True)

    def _sample(self) -> None:
        try:
            processes = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            return
        raylets = {p.pid for p in processes if _name(p) == "raylet"} | self._joined_raylets
        processes += _workers_of_raylets(raylets, processes, self._raylet_of)
        for process in processes:
            with contextlib.suppress(psutil.Error):
                times, key = process.cpu_times(), (process.pid, process.create_time())
                self._seen[key] = times.user + times.system
                if key[1] < self._started:
                    self._before.setdefault(key, self._seen[key])

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._sample()

    def __enter__(self) -> _TreeCPU:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def seconds(self) -> float:
        return sum(cpu - self._before.get(key, 0.0) for key, cpu in self._seen.items())


def _raylets_of(address: str) -> set[int]:
    """The raylets on this machine of the cluster whose GCS is at ``address`` (``ip:port``; none for ``auto``)."""
    if ":" not in address:
        return set()
    found = set()
    for process in psutil.process_iter(["name", "cmdline"]):
        if process.info["name"] == "raylet" and f"--gcs-address={address}" in (process.info["cmdline"] or ()):
            found.add(process.pid)
    return found


def _name(process: psutil.Process) -> str:
    try:
        return process.name()
    except psutil.Error:
        return ""


def _workers_of_raylets(
    raylets: set[int], known: list[psutil.Process], raylet_of: dict[tuple, int] | None = None
) -> list[psutil.Process]:
    """Ray workers of these raylets outside the tree: a worker is started by a command Ray runs
    (``py_executable``), which may hand it to a process of its own (the test suite forks them from a warm one).

    A process's environment is read once (``raylet_of`` keeps what it named, by pid, start time and name): the
    suite's processes carry ~40 KB of it each, and reading every process's every second cost a run's driver ~1.5 of
    its ~5 CPU-s. A new name (an exec, or Ray naming its worker ``ray::...``) reads it again."""
    if not raylets:
        return []
    raylet_of = {} if raylet_of is None else raylet_of
    known_pids = {p.pid for p in known}
    found = []
    for process in psutil.process_iter(["name"]):
        if process.pid in known_pids:
            continue
        with contextlib.suppress(psutil.Error, ValueError):
            key = (process.pid, process.create_time(), process.info["name"])
            if key not in raylet_of:
                raylet_of[key] = int(process.environ().get("RAY_RAYLET_PID", "0"))
            if raylet_of[key] in raylets:
                found.append(process)
    return found


@contextlib.contextmanager
def ledger_entry(label: str):
    """Record the enclosed trainer run in ``$FSPO_RUN_LEDGER`` (nothing when it is unset)."""
    path = environment_value(LEDGER_ENV)
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
