"""Commands that mostly wait on the network, started when their test is collected and run beside the suite.

The GPU install's dry run asks the package index about ~270 packages one after another: 124 s wall for 57 CPU-s
here. Run inside its test, it held an xdist worker idle for a minute while the other worker had one core of two.
Started at collection instead, its waits overlap the rest of the suite, and its test (ordered last,
:func:`fspo_testing.scheduling.ordered_by_cost`) reads a result that is ready or nearly so.

A test names its command with ``@pytest.mark.background.with_args(builder)`` (a bare call with a function would
mark the function): ``builder(folder)`` returns the command and its
environment, and may write files the command needs under ``folder``. The conftest calls :func:`start` for every
builder a collected test names, and the test calls :func:`result`. Every pytest process of a session (the xdist
workers too) shares one root folder, :data:`ROOT_ENV`, which the controller makes; the first process to claim a
command's folder starts it, so it runs once however many workers collect it. The controller ends what is still
running when the session ends (:func:`stop_all`).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

ROOT_ENV = "FSPO_BACKGROUND_DIR"
# The controller's pid, which owns every command (stop_all): a command carries it as its warm-server owner
# (fspo_testing/warm_python.py), not the xdist worker that started it, whose reaper would kill the command when that
# worker ends early (xdist shuts an idle worker down) while another worker's test waits for it. The worker's warm
# interpreter and Ray hook, which that reaper removes, are left out too.
OWNER_ENV = "FSPO_BACKGROUND_OWNER"
WORKER_ONLY = ("FSPO_WARM_OWNER", "FSPO_WARM_PYTHON", "RAY_RUNTIME_ENV_HOOK")

Builder = Callable[[Path], tuple[list[str], dict[str, str]]]


def folder(builder: Builder, root: str | Path | None = None) -> Path:
    """Where ``builder``'s command runs and keeps its output (``stdout``, ``stderr``, ``returncode``)."""
    return Path(root or os.environ[ROOT_ENV]) / builder.__name__


def start(builder: Builder, root: str | Path | None = None) -> bool:
    """Start ``builder``'s command unless a process of this session has; returns whether this call started it."""
    here = folder(builder, root)
    try:
        here.mkdir(parents=True)  # atomic: one process of the session claims the command
    except FileExistsError:
        return False
    # The exit status is written last, through a rename, so a reader never sees half of it.
    wrapper = '"$@" > "$OUT/stdout" 2> "$OUT/stderr"; echo $? > "$OUT/returncode.part"; mv "$OUT/returncode.part" "$OUT/returncode"'
    try:
        command, env = builder(here)
        owner = {"FSPO_WARM_OWNER": os.environ[OWNER_ENV]} if OWNER_ENV in os.environ else {}
        process = subprocess.Popen(
            ["bash", "-c", wrapper, "background", *command],
            env={**{k: v for k, v in env.items() if k not in WORKER_ONLY}, **owner, "OUT": str(here)},
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stop_all ends pip and its children together
        )
    except Exception as error:  # the test that reads the result fails with it; collection goes on
        (here / "stdout").write_text("")
        (here / "stderr").write_text(f"could not start {builder.__name__}: {error!r}\n")
        (here / "returncode").write_text("1")
        return True
    (here / "pid").write_text(str(process.pid))
    return True


def result(builder: Builder, timeout_s: float, root: str | Path | None = None) -> subprocess.CompletedProcess:
    """Wait for ``builder``'s command (started now if no process has) and return what it did."""
    here = folder(builder, root)
    start(builder, root)
    deadline = time.monotonic() + timeout_s
    while not (here / "returncode").exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{builder.__name__} did not finish within {timeout_s:g} s (output in {here})")
        time.sleep(1.0)
    return subprocess.CompletedProcess(
        args=builder.__name__,
        returncode=int((here / "returncode").read_text()),
        stdout=(here / "stdout").read_text(),
        stderr=(here / "stderr").read_text(),
    )


def stop_all(root: str | Path, keep_output: bool) -> None:
    """End every command under ``root`` that is still running (a session cut short leaves none behind); remove
    ``root`` unless ``keep_output`` (a failed session's output stays, as pytest keeps a failed test's tmp_path)."""
    for pid_file in Path(root).glob("*/pid"):
        if (pid_file.parent / "returncode").exists():
            continue
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, ValueError):
            pass
    if not keep_output:
        shutil.rmtree(root, ignore_errors=True)
