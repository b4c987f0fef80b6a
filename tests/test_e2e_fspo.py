"""End to end on CPU: FSPO's labels reach the actor, after GRPO (sync trainer) and after REINFORCE++
(colocate_async trainer, padded batches).

Checked on the batch the actor was updated with (saved by ``fspo.dump_dir``): every labelled
token's advantage has its label's sign, and every other token's advantage is what the estimator
computed.
"""

from __future__ import annotations

import pytest
import torch

from fspo.cpu.smoke import launch, tiny_run_overrides

pytestmark = pytest.mark.e2e


def assert_flip_applied(dump_dir, names):
    labelled_tokens = 0
    for name in names:
        record = torch.load(dump_dir / name)
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
    assert_flip_applied(grpo_run["out"] / "dump", ["step_1.pt", "step_2.pt"])
    assert "fspo: trainer FSPOTrainer (trainer.v1.trainer_mode=sync)" in (grpo_run["out"] / "first.log").read_text()
    for record in grpo_run["first"]:
        metrics = record["data"]
        assert metrics["fspo/evidence_rollout_frac"] == 1.0
        assert metrics["fspo/labelled_frac"] > 0
        assert metrics["fspo/steps_per_response"] > 0
        assert metrics["fspo/verifier_failures"] == 0


def test_colocate_async_reinforce_plus_plus_with_padded_batches_carries_step_labels(
    tiny_reasoner, varied_reward_overrides, tmp_path
):
    """One run for several of verl's own batch mechanics: the colocate_async trainer, two actor
    updates per step (parameter_sync_step=2) of 1 prompt x 4 rollouts each, which verl pads to its
    8-row mini-batch with 4 copies of sample 0 (labels included), REINFORCE++ with the MiniLM
    embedding verifier (a real model in the reward workers), and rollouts at temperature 0.7."""
    overrides = tiny_run_overrides(tiny_reasoner, tmp_path, steps=2) + [
        *varied_reward_overrides,
        "algorithm.adv_estimator=reinforce_plus_plus",
        "trainer.save_freq=-1",
        "fspo.verifier.name=embedding",
        "trainer.v1.trainer_mode=colocate_async",
        "+trainer.v1.colocate_async.parameter_sync_step=2",
        # At T != 1 the hf rollout's log-probs must be the tempered ones the actor computes (as vLLM's
        # processed_logprobs); raw ones put the probability gap verl logs at ~0.16 on this model.
        "actor_rollout_ref.rollout.temperature=0.7",
    ]
    records = launch(overrides, tmp_path / "run.log", tmp_path / "run.jsonl")
    log = (tmp_path / "run.log").read_text()
    assert "fspo: trainer FSPOPPOTrainerColocateAsync (trainer.v1.trainer_mode=colocate_async)" in log
    assert [record["step"] for record in records] == [1, 2]
    # One dump per actor update: none overwrote another.
    names = [f"step_{step}_{update}.pt" for step in (1, 2) for update in (0, 1)]
    assert sorted(p.name for p in (tmp_path / "dump").iterdir()) == names
    assert_flip_applied(tmp_path / "dump", names)
    for name in names:
        record = torch.load(tmp_path / "dump" / name)
        pads = record["is_padding"]
        assert int(pads.sum()) == 4 and len(pads) == 8, "verl did not pad the batch: the test lost its point"
        assert not record["labels"][pads].any() and not record["response_mask"][pads].any()
    for record in records:
        metrics = record["data"]
        # Pad rows are no rollouts of FSPO's: 4 real rollouts per update, no rejected labels.
        assert metrics["fspo/rollouts"] == 4
        assert metrics["fspo/rejected_label_rows"] == 0
        assert metrics["fspo/evidence_rollout_frac"] == 1.0
        assert metrics["training/rollout_probs_diff_mean"] < 0.02
    assert "ignoring the step labels" not in log
    # The reward varies independently of the labels, so some labelled tokens needed flipping.
    assert any(record["data"]["fspo/flipped_frac"] > 0 for record in records)
