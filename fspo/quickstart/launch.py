"""Run verl's trainer (``python -m fspo.training.main``) in a subprocess and follow the metrics it logs.

``fspo quickstart`` trains through :func:`launch`; the end-to-end tests and the step-time benchmark use it
too, so that they run the trainer exactly as the quickstart and a GPU user do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from fspo.utils.input_files import jsonl_lines, parse_jsonl, read_text
from fspo.utils.record_schemas import TrainerMetrics


def launch(
    overrides: list[str],
    log_path: str | Path,
    metrics_path: str | Path,
    timeout: int = 1800,
    on_step: Callable[[dict], None] | None = None,
    on_poll: Callable[[], None] | None = None,
    python: str = sys.executable,
) -> list[dict]:
    """Run ``python -m fspo.training.main`` with ``overrides``; return the metrics it logged, one dict per step.

    Each record is ``{"step": N, "data": {metric: value}}`` from verl's file logger; ``on_step`` is
    called with each record as soon as the trainer writes it, ``on_poll`` about once a second while it
    runs (to report progress from its log). ``python`` is the interpreter (this one by default; the tests
    pass one that forks from a process that imported the trainer). Raises ``RuntimeError`` with the end
    of the log when the run fails or outlasts ``timeout`` seconds.
    """
    log_path, metrics_path = Path(log_path), Path(metrics_path)
    metrics_path.unlink(missing_ok=True)
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics_path), "PYTHONUNBUFFERED": "1"}
    records: list[dict] = []
    deadline = time.monotonic() + timeout
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [python, "-m", "fspo.training.main", "trainer.logger=[console,file]", *overrides],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=log_path.parent,
        )
        while True:
            finished = process.poll() is not None
            records = _read_new_records(metrics_path, records, on_step)
            if on_poll is not None:
                on_poll()
            if finished:
                break
            if time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise RuntimeError(
                    f"trainer ran past {timeout} s; log {log_path} ends:\n{log_path.read_text()[-6000:]}"
                )
            time.sleep(1.0)
    if process.returncode != 0:
        raise RuntimeError(f"trainer exited {process.returncode}; log {log_path} ends:\n{log_path.read_text()[-6000:]}")
    return records


def _read_new_records(path: Path, records: list[dict], on_step: Callable[[dict], None] | None) -> list[dict]:
    if not path.exists():
        return records
    text = read_text(path, "JSON Lines file")
    complete = text[: text.rfind("\n") + 1]  # the last line may be half-written
    for record in parse_jsonl(path, jsonl_lines(complete), TrainerMetrics)[len(records) :]:
        records.append(record)
        if on_step is not None:
            on_step(record)
    return records
