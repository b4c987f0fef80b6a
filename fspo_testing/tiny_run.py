"""A small, real FSPO run on CPU for the end-to-end tests and the step-time benchmark.

:func:`build_tiny_reasoner` writes a tiny model that knows the answer format and synthetic data,
:func:`tiny_run_overrides` the Hydra overrides that size a run for it; :func:`fspo.quickstart.launch.launch` runs it.
Everything is built locally (no download).
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from fspo_testing.build_cache import cached_build


@cached_build
def build_tiny_reasoner(root: str | Path, train_rows: int = 48, val_rows: int = 8, warmup_steps: int = 150) -> dict:
    """Write a tiny Qwen2 taught the ``<think>``/``<answer>`` format and synthetic QA parquet under ``root``.

    Returns ``{"model": dir, "train": parquet, "val": parquet}``.
    """
    from fspo.data.io import write_parquet
    from fspo.data.synthetic import make_rows
    from fspo_testing.tiny_model import build_tiny_model, teach_reasoning_format

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


# verl pads every prompt to data.max_prompt_length, and the actor computes the model over every position, the
# 151k-vocabulary projection included: a fixed 192 was twice the longest prompt of the tiny runs' data (90 tokens).
PROMPT_LENGTH_STEP = 16


def prompt_length_override(model: str | Path, *files: str | Path) -> str:
    """``data.max_prompt_length`` for a run on ``files``: their longest prompt under ``model``'s chat template
    (counted as verl's overlong-prompt filter counts it), plus :data:`PROMPT_LENGTH_STEP` tokens for template
    arguments a recipe passes (Qwen3's ``enable_thinking``), rounded up to a multiple of it."""
    versions = tuple((str(file), Path(file).stat().st_mtime_ns) for file in files)  # a rewritten file is counted again
    longest = _longest_prompt(str(model), versions)
    step = PROMPT_LENGTH_STEP
    return f"data.max_prompt_length={-(-(longest + step) // step) * step}"


@functools.cache
def _longest_prompt(model: str, versions: tuple[tuple[str, int], ...]) -> int:
    """Tokens in the longest prompt of the files (``versions``: path, modification time) under ``model``'s template;
    one count per model and files in a test process (a tokenizer load and a read, ~1 s each time)."""
    from transformers import AutoTokenizer

    from fspo.training.data_checks import scan_file

    tokenizer = AutoTokenizer.from_pretrained(model)
    return max(
        max(scan_file(file, tokenizer=tokenizer, check_scorers=False, check_evidence=False).prompt_tokens)
        for file, _ in versions
    )


def tiny_run_overrides(setup: dict, out: str | Path, steps: int) -> list[str]:
    """Hydra overrides for a small, fast CPU run on :func:`build_tiny_reasoner`'s output."""
    out = Path(out)
    return [
        f"actor_rollout_ref.model.path={setup['model']}",
        f"data.train_files={setup['train']}",
        f"data.val_files={setup['val']}",
        "data.train_batch_size=2",
        prompt_length_override(setup["model"], setup["train"], setup["val"]),
        "data.max_response_length=40",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        # 4 as the recipes (recipes/common.sh): a micro-batch's float32 logits over Qwen's 151k vocabulary are
        # ~0.5 GB; at 8 an FSDP worker peaked at 4.0 GB, and two runs at once brought Ray's memory monitor close.
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.optim.lr=1e-4",
        # A random tiny model never gets the answer right; the step reward makes rewards differ
        # within a group, so advantages and the update are non-zero.
        "fspo.step_reward_weight=0.5",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=false",
        f"trainer.default_local_dir={out / 'ckpt'}",
        f"fspo.dump_dir={out / 'dump'}",
    ]


def run_logged(
    command: list[str], env: dict[str, str], log: Path, timeout: int, cwd: Path
) -> subprocess.CompletedProcess:
    """Run ``command`` in ``cwd``, keep its output in ``log``, and fail the test with the output's end if it fails."""
    process = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    log.write_text(f"$ {' '.join(command)}\n--- stdout\n{process.stdout}\n--- stderr\n{process.stderr}")
    assert process.returncode == 0, f"{command[:2]} exited {process.returncode}; end of output:\n" + (
        process.stdout[-3000:] + "\n" + process.stderr[-6000:]
    )
    return process
