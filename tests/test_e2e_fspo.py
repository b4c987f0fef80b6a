"""End to end on CPU: FSPO's labels reach the actor, after GRPO and after REINFORCE++.

Checked on the batch the actor was updated with (saved by ``fspo.dump_dir``): every labelled
token's advantage has its label's sign, and every other token's advantage is what the estimator
computed.
"""

from __future__ import annotations

import re

import pytest
import torch

from fspo.cpu.smoke import launch, tiny_run_overrides

pytestmark = pytest.mark.e2e


def assert_flip_applied(dump_dir, steps):
    labelled_tokens = 0
    for step in steps:
        record = torch.load(dump_dir / f"step_{step}.pt")
        before, after = record["advantages_before"], record["advantages"]
        labels, mask = record["labels"].long(), record["response_mask"].bool()
        labelled = mask & (labels != 0)
        labelled_tokens += int(labelled.sum())
        # Labelled tokens: the advantage takes the label's sign, with the estimator's magnitude.
        assert torch.all((after * labels)[labelled] >= 0)
        assert torch.allclose(after.abs()[labelled], before.abs()[labelled])
        # Everything else is exactly what the estimator produced.
        assert torch.equal(after[~labelled], before[~labelled])
    assert labelled_tokens > 0, "no token was labelled: the test did not exercise FSPO"


def test_grpo_actor_batch_carries_step_labels(grpo_run):
    assert_flip_applied(grpo_run["out"] / "dump", [1, 2])
    for record in grpo_run["first"]:
        metrics = record["data"]
        assert metrics["fspo/evidence_rollout_frac"] == 1.0
        assert metrics["fspo/labelled_frac"] > 0
        assert metrics["fspo/steps_per_response"] > 0
        assert metrics["fspo/verifier_failures"] == 0


def test_reinforce_plus_plus_with_colocated_verifier_on_two_logical_gpus(tiny_reasoner, varied_reward_overrides, tmp_path):
    """The GPU recipes' verifier layout, scaled down: two (logical) GPUs, a model verifier colocated with the actor.

    Checks where the steps were verified (one server per GPU bundle, each holding a GPU Ray assigned it;
    the reward workers load no model of their own), that the labels reached the actor after
    REINFORCE++, and that the step's metrics report the verifier's time.
    """
    overrides = tiny_run_overrides(tiny_reasoner, tmp_path, steps=2) + [
        *varied_reward_overrides,
        "algorithm.adv_estimator=reinforce_plus_plus",
        "trainer.save_freq=-1",
        "trainer.n_gpus_per_node=2",
        "ray_kwargs.ray_init.num_gpus=2",
        # 8 rollouts over 2 FSDP workers: 4 sequences each.
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "reward.num_workers=2",
        # The offline MiniLM embedding verifier: a real model, placed as the GPU recipes place HHEM.
        "fspo.verifier.name=embedding",
        "fspo.verifier.placement=colocated",
    ]
    records = launch(overrides, tmp_path / "run.log", tmp_path / "run.jsonl")
    assert [record["step"] for record in records] == [1, 2]
    assert_flip_applied(tmp_path / "dump", [1, 2])
    # The reward varies independently of the labels, so some labelled tokens needed flipping.
    assert any(record["data"]["fspo/flipped_frac"] > 0 for record in records)

    log = (tmp_path / "run.log").read_text()
    assert "fspo: verifier embedding on CPU (colocated with the actor: one copy per logical GPU, 2 per node" in log
    servers = re.findall(r"fspo: verifier server embedding ready in pid (\d+) on node \S+: Ray GPU ids \[([^\]]*)\]", log)
    assert len(servers) == 2, log[-4000:]  # one model copy per GPU bundle...
    assert len({pid for pid, _ in servers}) == 2 and sorted(gpu for _, gpu in servers) == ["'0'", "'1'"]
    assert "loaded in reward worker" not in log  # ...and none in the reward workers
    assert "fspo: 2 colocated verifier server(s) of embedding on 2 Ray GPU(s)" in log
    for record in records:
        metrics = record["data"]
        assert metrics["fspo/verifier_ray_gpu_frac"] == 1.0  # every verified rollout went to a GPU-placed server
        assert metrics["fspo/verifier_seconds"] > 0
        assert metrics["fspo/verifier_failures"] == 0
