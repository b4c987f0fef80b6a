"""One Ray cluster per test process, which its trainer runs join (``RAY_ADDRESS``) as a GPU run joins a cluster
started with ``ray start``.

A run that starts its own Ray waits ~7 s for it, and its daemons (GCS, raylet, dashboard agent, log and autoscaler
monitors, runtime env agent) cost ~8 CPU-s to start; runs that join this cluster pay for these once per test
process. Each run is still a job of its own: Ray ends its actors and placement groups when its driver exits
(:func:`leftovers`), and its workers fork from a warm server of their own (fspo_testing/warm_python.py keys servers
by ``RAY_JOB_ID``: a server shared by two jobs registered the second's workers under the first's id).

The cluster has the CPU preset's logical resources (``fspo/config/platform/cpu.yaml``), a temp folder of its own
(a ``ray.init()`` without an address in this process would otherwise join it), and Ray's token authentication off
(a driver that joins by address reads no token; :data:`JOINING_AUTH`). It stops with the process that started it:
at its exit, or, when a signal ended that process, by the reaper of its warm servers (fspo_testing/warm_python.py),
which also removes the cluster's folder.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The CPU preset's logical resources (ray_kwargs.ray_init in fspo/config/platform/cpu.yaml).
LOGICAL_CPUS = 16
LOGICAL_GPUS = 1
# A joined run's overrides: with RAY_ADDRESS set and no platform given, the trainer asks the cluster whether it has
# GPUs, and this one's logical GPU would pick the GPU preset.
JOIN_OVERRIDES = ["platform=cpu"]
START_TIMEOUT_S = 120
# The daemons of a cluster that lives through a test session (~30 min, ~10 runs each leaving ~20 worker log files)
# cost 4.1 CPU-s a minute with Ray's defaults and 160 dead workers' files, 2.1 with these and the dead workers' files
# retired before each run (:func:`retire_dead_workers_logs`; benchmarks/ray_daemons.py). GPU clusters keep Ray's.
QUIET_DAEMONS = {
    # The log monitor lists the folder every 0.5 s from the start (Ray: every 0.1 s below 1,000 files); a new worker's
    # output reaches the driver up to 0.5 s later, read from the file's start.
    "RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0",
    # It reads the size of every file it tracks every 0.1 s; with few held open it closes them all often, which
    # drops those of dead workers. Log monitor alone: 2.04 -> 0.55 CPU-s a minute, with the retiring.
    "RAY_LOG_MONITOR_MAX_OPEN_FILES": "16",
    # The dashboard agent's node stats (psutil over every worker) every 60 s, not 5, and no metrics export from the
    # raylet, GCS and workers, which nothing here reads: agent 1.00 -> 0.46, raylet and GCS 1.21 -> 0.94 a minute.
    "REPORTER_UPDATE_INTERVAL_MS": "60000",
    "RAY_enable_metrics_collection": "0",
}
# A driver that joins the cluster runs without token authentication, as the cluster does. Ray 2.60's first local
# `ray.init()` in a process turns it on in that process's environment (RAY_AUTH_MODE=token), and a process started
# from there with it rejects the cluster's calls ("Missing authorization header in request"): the cluster then ends
# the driver's actors as out of scope before they start. Ray reads it as the process starts, not at ray.init.
JOINING_AUTH = {"RAY_AUTH_MODE": "disabled"}
_PR_SET_PDEATHSIG = 1


def _stop_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it ends (a killed xdist worker included)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def shared_cluster() -> str:
    """The address (``ip:port``) of this process's shared cluster, started at the first call."""
    return _start_shared()[0]


@functools.cache
def _start_shared() -> tuple[str, str]:
    """The shared cluster's address and temp folder."""
    from fspo_testing.warm_python import remove_with_owner, warm_python

    warm_python()  # the cluster's processes carry this process's mark, which the reaper goes by
    folder = tempfile.mkdtemp(prefix="ray-s-", dir="/tmp")  # short: Ray's socket paths fit 107 bytes
    remove_with_owner(folder)
    log_path = Path(folder) / "head.log"
    env = {**os.environ, "RAY_TMPDIR": folder, **JOINING_AUTH, **QUIET_DAEMONS}
    env.pop("RAY_ADDRESS", None)
    command = [
        sys.executable, "-m", __name__, "start", "--head", "--block", "--port=0", "--disable-usage-stats",
        f"--num-cpus={LOGICAL_CPUS}", f"--num-gpus={LOGICAL_GPUS}", "--include-dashboard=false",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        head = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_stop_with_parent,
        )  # fmt: skip
    atexit.register(_stop, head, folder)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        found = re.search(r"ray start --address='([\d.]+:\d+)'", log_path.read_text(errors="replace"))
        if found:
            return found.group(1), folder
        if head.poll() is not None:
            break
        time.sleep(0.2)
    _stop(head, folder)
    raise RuntimeError(
        f"the shared Ray cluster did not start; its log:\n{log_path.read_text(errors='replace')[-3000:]}"
    )


def _stop(head: subprocess.Popen, folder: str) -> None:
    if head.poll() is None:
        head.send_signal(signal.SIGTERM)  # `ray start --block` stops the cluster's processes on SIGTERM
        try:
            head.wait(30)
        except subprocess.TimeoutExpired:
            head.kill()
    shutil.rmtree(folder, ignore_errors=True)


def logs_folder() -> Path:
    """The shared cluster's logs folder."""
    return Path(_start_shared()[1]) / "ray" / "session_latest" / "logs"


def retire_dead_workers_logs() -> int:
    """Move the log files of the shared cluster's dead workers to ``logs/old``, as Ray's log monitor does with the
    files it holds open; returns how many. The monitor drops a file that is gone from its list: those of the runs
    before the next one are not read again every 0.1 s. Their drivers are gone, and with them whoever read them."""
    from ray._private.log_monitor import WORKER_LOG_PATTERN  # worker-<worker id>-<job id>-<pid>.out|.err

    folder = logs_folder()
    moved = 0
    for path in folder.glob("worker-*"):
        found = WORKER_LOG_PATTERN.match(path.name)
        if found and not Path(f"/proc/{found.group(2)}").exists():
            (folder / "old").mkdir(exist_ok=True)
            with contextlib.suppress(FileNotFoundError):  # the monitor moved it first
                path.rename(folder / "old" / path.name)
                moved += 1
    return moved


def joining_variables() -> dict[str, str]:
    """What a process that joins the shared cluster needs in its environment as it starts: ``RAY_ADDRESS`` naming
    the cluster, and :data:`JOINING_AUTH`. The logs of the runs that joined it before are retired."""
    address = shared_cluster()
    retire_dead_workers_logs()
    return {"RAY_ADDRESS": address, **JOINING_AUTH}


def joining_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with :func:`joining_variables`."""
    return {**(os.environ if env is None else env), **joining_variables()}


def launch_joined(overrides: list[str], log_path: Path, metrics_path: Path, **kwargs) -> list[dict]:
    """:func:`fspo.quickstart.launch.launch` from the warm interpreter, the run joining the shared cluster."""
    import pytest

    from fspo.quickstart.launch import launch
    from fspo_testing.warm_python import warm_python

    with pytest.MonkeyPatch.context() as env:
        for name, value in joining_variables().items():
            env.setenv(name, value)
        return launch([*overrides, *JOIN_OVERRIDES], log_path, metrics_path, python=warm_python(), **kwargs)


def leftovers() -> dict[str, float]:
    """The logical CPUs and GPUs of the shared cluster still taken (none between runs: Ray frees a finished job's
    placement groups and actors, a moment after its driver exits)."""
    import ray

    ray.init(address=shared_cluster(), logging_level="ERROR", log_to_driver=False)
    try:
        deadline = time.monotonic() + 20
        while True:
            total, free = ray.cluster_resources(), ray.available_resources()
            taken = {k: total[k] - free.get(k, 0) for k in ("CPU", "GPU") if total.get(k, 0) > free.get(k, 0)}
            if not taken or time.monotonic() > deadline:
                return taken
            time.sleep(0.5)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    # `ray start`, its workers' setup forked from a warm server as in the suite's other clusters.
    from ray.scripts.scripts import main

    from fspo_testing.warm_python import setup_workers_forked

    setup_workers_forked()
    sys.argv = ["ray", *sys.argv[1:]]
    main()
