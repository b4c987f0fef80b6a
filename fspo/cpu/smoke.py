"""A small, real FSPO run on CPU: a tiny model, synthetic data, and verl's trainer in a subprocess.

The tiny model and its overrides serve the end-to-end tests and the step-time benchmark; ``launch``
also runs ``fspo quickstart``'s trainings. Everything is built locally (no download), and the trainer
is the same ``python -m fspo.main`` a GPU user launches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def build_tiny_reasoner(root: str | Path, train_rows: int = 48, val_rows: int = 8, warmup_steps: int = 60) -> dict:
    """Write a tiny Qwen2 taught the ``<think>``/``<answer>`` format and synthetic QA parquet under ``root``.

    Returns ``{"model": dir, "train": parquet, "val": parquet}``.
    """
    from fspo.data.io import write_parquet
    from fspo.data.synthetic import make_rows
    from fspo.tiny_model import build_tiny_model, teach_reasoning_format

    root = Path(root)
    rows = [_without_system_prompt(row) for row in make_rows(train_rows, seed=0, split="train")]
    val = [_without_system_prompt(row) for row in make_rows(val_rows, seed=0, split="test")]
    model_dir = build_tiny_model(root / "model")
    teach_reasoning_format(model_dir, rows, steps=warmup_steps)
    write_parquet(rows, root / "train.parquet")
    write_parquet(val, root / "val.parquet")
    return {"model": model_dir, "train": root / "train.parquet", "val": root / "val.parquet"}


def _without_system_prompt(row: dict) -> dict:
    """Drop the format instruction: the tiny model learns the format in its warm-up, and on a CPU
    every prompt token costs a projection onto the 151k-token vocabulary."""
    return {**row, "prompt": [m for m in row["prompt"] if m["role"] != "system"]}


def tiny_run_overrides(setup: dict, out: str | Path, steps: int) -> list[str]:
    """Hydra overrides for a small, fast CPU run on :func:`build_tiny_reasoner`'s output."""
    out = Path(out)
    return [
        f"actor_rollout_ref.model.path={setup['model']}",
        f"data.train_files={setup['train']}",
        f"data.val_files={setup['val']}",
        "data.train_batch_size=2",
        "data.max_prompt_length=192",
        "data.max_response_length=40",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.optim.lr=1e-4",
        # A random tiny model never gets the answer right; the step reward makes rewards differ
        # within a group, so advantages and the update are non-zero.
        "fspo.step_reward_weight=0.5",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false",
        f"trainer.default_local_dir={out / 'ckpt'}",
        f"fspo.dump_dir={out / 'dump'}",
    ]


def launch(
    overrides: list[str],
    log_path: str | Path,
    metrics_path: str | Path,
    timeout: int = 1800,
    on_step: Callable[[dict], None] | None = None,
    on_poll: Callable[[], None] | None = None,
) -> list[dict]:
    """Run ``python -m fspo.main`` with ``overrides``; return the metrics it logged, one dict per step.

    Each record is ``{"step": N, "data": {metric: value}}`` from verl's file logger; ``on_step`` is
    called with each record as soon as the trainer writes it, ``on_poll`` about once a second while it
    runs (to report progress from its log). Raises ``RuntimeError`` with the end
    of the log when the run fails or outlasts ``timeout`` seconds.
    """
    log_path, metrics_path = Path(log_path), Path(metrics_path)
    metrics_path.unlink(missing_ok=True)
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(metrics_path), "PYTHONUNBUFFERED": "1"}
    records: list[dict] = []
    deadline = time.monotonic() + timeout
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "fspo.main", "trainer.logger=[console,file]", *overrides],
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
                raise RuntimeError(f"trainer ran past {timeout} s; log {log_path} ends:\n{log_path.read_text()[-6000:]}")
            time.sleep(1.0)
    if process.returncode != 0:
        raise RuntimeError(f"trainer exited {process.returncode}; log {log_path} ends:\n{log_path.read_text()[-6000:]}")
    return records


def _read_new_records(path: Path, records: list[dict], on_step: Callable[[dict], None] | None) -> list[dict]:
    if not path.exists():
        return records
    content = path.read_text()
    lines = [line for line in content.splitlines() if line.strip()]
    complete = lines if content.endswith("\n") else lines[:-1]  # the last line may be half-written
    for line in complete[len(records) :]:
        record = json.loads(line)
        records.append(record)
        if on_step is not None:
            on_step(record)
    return records
