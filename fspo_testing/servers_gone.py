"""A CPU run that loses its verifier: one colocated ``lexical`` server on one logical GPU, killed once the first
step is logged, and again each time Ray brings it back (as a segfault or the OOM killer would), until Ray's
restarts are spent. The next actor updates find no server, and the run-level guard
(``fspo.verifier.max_failed_share``, ``max_failed_steps``) should stop the run.

The run samples at seed 3 and keeps its rollouts: step 1's are sampled before any kill, so they are also a
second seed's rollouts for the reproducibility test.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

from fspo.quickstart.launch import launch
from fspo.verifiers.ray_actor import SERVER_RESTARTS
from fspo_testing.tiny_run import tiny_run_overrides

STEPS = 8
SEED = 3


def run_with_servers_killed(setup: dict, reward_overrides: list[str], out: Path) -> dict:
    """Launch the run in ``out`` and kill its verifier servers as described above.

    Returns the logged step records, the run's log, the pids killed, and the launcher's error (None if the
    run was not stopped)."""
    overrides = tiny_run_overrides(setup, out, steps=STEPS) + [
        *reward_overrides,
        "trainer.save_freq=-1",
        "trainer.n_gpus_per_node=1",
        "ray_kwargs.ray_init.num_gpus=1",
        "reward.num_workers=1",
        "fspo.verifier.name=lexical",
        "fspo.verifier.placement=colocated",
        # Short deadlines, so that a step without servers costs seconds, not the production 10 minutes.
        "fspo.verifier.request_timeout_s=5",
        "fspo.verifier.request_deadline_s=10",
        "fspo.verifier.max_failed_share=0.1",
        "fspo.verifier.max_failed_steps=2",
        f"actor_rollout_ref.rollout.seed={SEED}",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
    ]
    log_path = out / "run.log"
    killed: set[int] = set()
    records: list[dict] = []  # the steps logged, as they are

    def kill_servers() -> None:
        if not records or len(killed) > SERVER_RESTARTS:
            return
        for pid in map(int, re.findall(r"fspo: verifier server lexical ready in pid (\d+)", log_path.read_text())):
            if pid not in killed:
                killed.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    error = None
    try:
        launch(overrides, log_path, out / "run.jsonl", on_step=records.append, on_poll=kill_servers)
    except RuntimeError as stopped:
        error = str(stopped)
    return {"out": out, "records": records, "log": log_path.read_text(), "killed": killed, "error": error}
