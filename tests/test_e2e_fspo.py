"""End to end on CPU: FSPO's labels reach the actor, after GRPO (sync trainer) and after REINFORCE++
(colocate_async trainer, padded batches).

Checked on the batch the actor was updated with (saved by ``fspo.dump_dir``): every labelled
token's advantage has its label's sign, and every other token's advantage is what the estimator
computed.
"""

from __future__ import annotations

import re

import pytest
import torch

from fspo.quickstart.launch import launch
from fspo_testing.tiny_run import tiny_run_overrides
from fspo_testing.warm_python import warm_python
from fspo_testing.worker_memory import RSSByStep

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
        assert metrics["fspo/verifier_failures"] == 0
        # The outcome scorer (a file-path custom reward) ran in each reward worker's scorer process.
        assert metrics["fspo/scorer_timeouts"] == 0
    # Over the run, not per step: the tiny model samples 8 rollouts a step at temperature 1 and closes
    # </think> within 40 tokens in 1 to 5 of them, so a step with none happens (seen once in CI).
    records = grpo_run["first"] + grpo_run["resumed"]
    assert sum(record["data"]["fspo/steps_per_response"] for record in records) > 0
    assert sum(record["data"]["fspo/labelled_frac"] for record in records) > 0


def test_colocate_async_reinforce_plus_plus_on_two_logical_gpus_with_colocated_verifier(
    tiny_reasoner, varied_reward_overrides, tmp_path
):
    """One run for several of verl's own batch mechanics and the GPU recipes' verifier layout:

    - the colocate_async trainer, two actor updates per step (parameter_sync_step=2) of 1 prompt x 4
      rollouts each, which verl pads to its mini-batch with copies of sample 0 (labels included);
    - REINFORCE++, rollouts at temperature 0.7;
    - two (logical) GPUs with a model verifier (the offline MiniLM embedding) colocated with the actor
      as the GPU recipes place HHEM: one server per GPU bundle holding a GPU Ray assigned it, no model
      in the reward workers, the verifier's time in the step's metrics.
    """
    overrides = tiny_run_overrides(tiny_reasoner, tmp_path, steps=2) + [
        *varied_reward_overrides,
        "algorithm.adv_estimator=reinforce_plus_plus",
        "trainer.save_freq=-1",
        "trainer.v1.trainer_mode=colocate_async",
        "+trainer.v1.colocate_async.parameter_sync_step=2",
        # At T != 1 the hf rollout's log-probs must be the tempered ones the actor computes (as vLLM's
        # processed_logprobs); raw ones put the probability gap verl logs at ~0.16 on this model.
        "actor_rollout_ref.rollout.temperature=0.7",
        "trainer.n_gpus_per_node=2",
        "ray_kwargs.ray_init.num_gpus=2",
        # 8 rows an update over 2 FSDP workers: 4 sequences each.
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "reward.num_workers=2",
        "fspo.verifier.name=embedding",
        "fspo.verifier.placement=colocated",
    ]
    rss = RSSByStep(tmp_path / "run.log")
    records = launch(overrides, tmp_path / "run.log", tmp_path / "run.jsonl", python=warm_python(), on_step=rss)
    log = (tmp_path / "run.log").read_text()
    assert "fspo: trainer FSPOPPOTrainerColocateAsync (trainer.v1.trainer_mode=colocate_async)" in log
    assert [record["step"] for record in records] == [1, 2]
    # Both workers at the end of each step, measured: 1,709 -> 1,672 MB; with jemalloc's decay off 5,149 -> 5,534.
    assert rss.mb[1] > 0 and rss.mb[2] - rss.mb[1] < 200, f"FSDP workers' RSS by step (MB): {rss.mb}"
    # One dump per actor update: none overwrote another.
    names = [f"step_{step}_{update}.pt" for step in (1, 2) for update in (0, 1)]
    assert sorted(p.name for p in (tmp_path / "dump").iterdir()) == names
    assert_flip_applied(tmp_path / "dump", names)
    for name in names:
        record = torch.load(tmp_path / "dump" / name)
        pads = record["is_padding"]
        assert int((~pads).sum()) == 4 and pads.any(), "verl did not pad the batch: the test lost its point"
        assert not record["labels"][pads].any() and not record["response_mask"][pads].any()
    for record in records:
        metrics = record["data"]
        # Pad rows are no rollouts of FSPO's: 4 real rollouts per update, no rejected labels.
        assert metrics["fspo/rollouts"] == 4
        assert metrics["fspo/rejected_label_rows"] == 0
        assert metrics["fspo/evidence_rollout_frac"] == 1.0
        assert metrics["training/rollout_probs_diff_mean"] < 0.02
        # Every verified rollout went to a GPU-placed server, and the step reports the verifier's time.
        # (absent from a step none of whose actor updates verified a rollout)
        assert metrics.get("fspo/verifier_ray_gpu_frac", 1.0) == 1.0
        assert metrics["fspo/verifier_seconds"] > 0
        assert metrics["fspo/verifier_failures"] == 0
    assert "ignoring the step labels" not in log
    # The reward varies independently of the labels, so some labelled tokens needed flipping.
    assert any(record["data"]["fspo/flipped_frac"] > 0 for record in records)
    assert any("fspo/verifier_ray_gpu_frac" in record["data"] for record in records)

    assert "fspo: verifier embedding on CPU (colocated with the actor: one copy per logical GPU, 2 per node" in log
    servers = re.findall(
        r"fspo: verifier server embedding ready in pid (\d+) on node \S+: Ray GPU ids \[([^\]]*)\]", log
    )
    assert len(servers) == 2, log[-4000:]  # one model copy per GPU bundle...
    assert len({pid for pid, _ in servers}) == 2 and sorted(gpu for _, gpu in servers) == ["'0'", "'1'"]
    assert "loaded in reward worker" not in log  # ...and none in the reward workers
    assert "fspo: 2 colocated verifier server(s) of embedding on 2 Ray GPU(s)" in log
