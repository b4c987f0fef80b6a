"""End to end on CPU: a run whose verifier servers are all gone stops, naming the cause, instead of training
on as plain GRPO.

One colocated ``lexical`` server on one logical GPU; once the first step is logged the test kills the
server's process each time Ray brings it back (as a segfault or the OOM killer would), until Ray's restarts
are spent. The next actor updates find no server: every rollout sent to the verifier fails, and the
run-level guard (``fspo.verifier.max_failed_share``, ``max_failed_steps``) stops the run.
"""

from __future__ import annotations

import os
import re
import signal

import pytest

from fspo.quickstart.launch import launch
from fspo.verifier_loss import failed_share
from fspo.verifiers.ray_actor import SERVER_RESTARTS
from fspo_testing.tiny_run import tiny_run_overrides

pytestmark = pytest.mark.e2e

STEPS = 8


def test_a_run_whose_verifier_servers_are_gone_stops_within_the_guard_s_updates(
    tiny_reasoner, varied_reward_overrides, tmp_path
):
    overrides = tiny_run_overrides(tiny_reasoner, tmp_path, steps=STEPS) + [
        *varied_reward_overrides,
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
    ]
    log_path = tmp_path / "run.log"
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

    with pytest.raises(RuntimeError, match="trainer exited 3") as stopped:
        launch(overrides, log_path, tmp_path / "run.jsonl", on_step=records.append, on_poll=kill_servers)
    log = log_path.read_text()
    steps = [record["step"] for record in records]
    print(f"killed {len(killed)} server processes; steps logged {steps}")
    # Killed as each came up: the first process and Ray's restarts, as many as the run lived to see (the guard
    # may stop it while Ray is still restarting: a step whose requests all failed counts either way).
    assert 1 <= len(killed) <= SERVER_RESTARTS + 1
    assert "fspo: run stopped: the step verifier failed" in log, str(stopped.value)[-3000:]
    assert "training on would be plain GRPO" in log
    # Within the guard's updates: of the updates over max_failed_share that end the log, at most
    # max_failed_steps - 1 were logged; the next one stopped the run. (How many steps Ray's restarts still
    # served depends on the machine's load.)
    over = [
        failed_share(record["data"]["fspo/verifier_failures"], record["data"]["fspo/verified_rollouts"]) > 0.1
        for record in records
    ]
    trailing = next((i for i, flag in enumerate(reversed(over)) if not flag), len(over))
    assert steps[-1] < STEPS and trailing <= 1
