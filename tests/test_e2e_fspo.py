"""End to end on CPU: FSPO's labels reach the actor, after GRPO and after REINFORCE++.

Checked on the batch the actor was updated with (saved by ``fspo.dump_dir``): every labelled
token's advantage has its label's sign, and every other token's advantage is what the estimator
computed.
"""

from __future__ import annotations

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
        # The outcome scorer (a file-path custom reward) ran in each reward worker's scorer process.
        assert metrics["fspo/scorer_timeouts"] == 0


def test_reinforce_plus_plus_with_embedding_verifier_carries_step_labels(tiny_reasoner, varied_reward_overrides, tmp_path):
    overrides = tiny_run_overrides(tiny_reasoner, tmp_path, steps=2) + [
        *varied_reward_overrides,
        "algorithm.adv_estimator=reinforce_plus_plus",
        "trainer.save_freq=-1",
        # The offline MiniLM embedding verifier (a real model in the reward workers).
        "fspo.verifier.name=embedding",
    ]
    records = launch(overrides, tmp_path / "run.log", tmp_path / "run.jsonl")
    assert [record["step"] for record in records] == [1, 2]
    assert_flip_applied(tmp_path / "dump", [1, 2])
    # The reward varies independently of the labels, so some labelled tokens needed flipping.
    assert any(record["data"]["fspo/flipped_frac"] > 0 for record in records)
