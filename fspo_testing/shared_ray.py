"""One Ray cluster per test process, which its trainer runs join (``RAY_ADDRESS``) as a GPU run joins a cluster
started with ``ray start``.

A run that starts its own Ray waits ~7 s for it, and its daemons (GCS, raylet, dashboard agent, log and autoscaler
monitors, runtime env agent) cost ~8 CPU-s to start; runs that join this cluster pay for these once per test
process. Each run is still a job of its own: Ray ends its actors and placement groups when its driver exits
(:func:`leftovers`), and its workers fork from a warm server of their own (fspo_testing/warm_python.py keys servers
by ``RAY_JOB_ID``: a server shared by two jobs registered the second's workers under the first's id).

The cluster has the CPU preset's logical resources (``fspo/config/platform/cpu.yaml``), a temp folder of its own
(a ``ray.init()`` without an address in this process would otherwise join it), and Ray's token authentication off
(a driver that joins by address reads no token). It stops with the process that started it.
"""

from __future__ import annotations

import atexit
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
# Ray's log monitor lists the logs folder every 0.1 s until it holds 1,000 files, then every 0.5 s. A cluster that
# lives through a test session collects a few hundred (each worker's .out/.err): its monitor was the costliest of
# its daemons (126 CPU-s of the two clusters in a CI run). Listing every 0.5 s from the start: with 198 files, 2.05
# -> 0.92 CPU-s a minute. A new worker's output reaches the driver up to 0.5 s later (its file is read from the start).
QUIETER_LOG_MONITOR = {"RAY_LOG_MONITOR_MANY_FILES_THRESHOLD": "0"}
_PR_SET_PDEATHSIG = 1


def _stop_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it ends (a killed xdist worker included)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@functools.cache
def shared_cluster() -> str:
    """The address (``ip:port``) of this process's shared cluster, started at the first call."""
    folder = tempfile.mkdtemp(prefix="ray-s-", dir="/tmp")  # short: Ray's socket paths fit 107 bytes
    log_path = Path(folder) / "head.log"
    env = {**os.environ, "RAY_TMPDIR": folder, "RAY_AUTH_MODE": "disabled", **QUIETER_LOG_MONITOR}
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
            return found.group(1)
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


def joining_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with ``RAY_ADDRESS`` naming the shared cluster."""
    return {**(os.environ if env is None else env), "RAY_ADDRESS": shared_cluster()}


def launch_joined(overrides: list[str], log_path: Path, metrics_path: Path, **kwargs) -> list[dict]:
    """:func:`fspo.quickstart.launch.launch` from the warm interpreter, the run joining the shared cluster."""
    import pytest

    from fspo.quickstart.launch import launch
    from fspo_testing.warm_python import warm_python

    with pytest.MonkeyPatch.context() as env:
        env.setenv("RAY_ADDRESS", shared_cluster())
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
