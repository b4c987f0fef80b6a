"""End to end on CPU: a run whose verifier servers are all gone stops, naming the cause, instead of training
on as plain GRPO.

The run (``servers_gone_run``, fspo_testing/servers_gone.py): one colocated ``lexical`` server on one logical GPU,
killed once the first step is logged and each time Ray brings it back, until Ray's restarts are spent. The next
actor updates find no server: every rollout sent to the verifier fails, and the run-level guard
(``fspo.verifier.max_failed_share``, ``max_failed_steps``) stops the run.
"""

from __future__ import annotations

import pytest

from fspo.training.verifier_loss import failed_share
from fspo.verifiers.ray_actor import SERVER_RESTARTS
from fspo_testing.servers_gone import STEPS

pytestmark = pytest.mark.e2e


def test_a_run_whose_verifier_servers_are_gone_stops_within_the_guard_s_updates(servers_gone_run):
    records, log, killed = servers_gone_run["records"], servers_gone_run["log"], servers_gone_run["killed"]
    assert servers_gone_run["error"] is not None and "trainer exited 3" in servers_gone_run["error"], log[-3000:]
    steps = [record["step"] for record in records]
    print(f"killed {len(killed)} server processes; steps logged {steps}")
    # Killed as each came up: the first process and Ray's restarts, as many as the run lived to see (the guard
    # may stop it while Ray is still restarting: a step whose requests all failed counts either way).
    assert 1 <= len(killed) <= SERVER_RESTARTS + 1
    assert "fspo: run stopped: the step verifier failed" in log, servers_gone_run["error"][-3000:]
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
