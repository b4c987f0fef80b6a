"""End to end on CPU: verl's real V1 trainer through `python -m fspo.training.main`.

One GRPO run of 2 steps with a checkpoint, a resumed run for a third step, and a merge of the
final checkpoint into a Hugging Face directory that loads and generates.
"""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from fspo_testing.warm_python import warm_python

pytestmark = pytest.mark.e2e


def test_two_steps_update_the_policy(grpo_run):
    steps = [record["step"] for record in grpo_run["first"]]
    assert steps == [1, 2]
    for record in grpo_run["first"]:
        metrics = record["data"]
        assert metrics["actor/grad_norm"] > 0, "the actor received no gradient"
        assert metrics["actor/pg_loss"] != 0
        assert metrics["response_length/mean"] > 0
    # The update moved the weights: the step-2 checkpoint differs from the initial model.
    shard = grpo_run["out"] / "ckpt" / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt"
    trained = torch.load(shard, weights_only=False)
    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(grpo_run["setup"]["model"]).state_dict()
    name = "model.layers.0.mlp.up_proj.weight"
    trained_weight = trained[name]
    trained_weight = trained_weight.full_tensor() if hasattr(trained_weight, "full_tensor") else trained_weight
    assert not torch.allclose(trained_weight.float(), initial[name].float())


def test_the_trainer_reads_its_data_through_fspos_dataset_class(grpo_run):
    # fspo/config/fspo_trainer.yaml names it; verl prints the class it builds (train, validation, resume).
    for log in ("first.log", "resumed.log"):
        classes = re.findall(r"Using dataset class: (\w+)", (grpo_run["out"] / log).read_text())
        assert classes and set(classes) == {"FingerprintedRLHFDataset"}, log


def test_checkpoint_and_resume(grpo_run):
    ckpt = grpo_run["out"] / "ckpt"
    assert (ckpt / "global_step_2" / "actor").is_dir()
    # The resumed run started from the saved step 2 and trained exactly one more step.
    assert [record["step"] for record in grpo_run["resumed"]] == [3]
    assert (ckpt / "global_step_3" / "actor").is_dir()
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


def test_merged_checkpoint_loads_and_generates(grpo_run, tmp_path):
    target = tmp_path / "merged"
    subprocess.run(
        [
            warm_python(),  # forks from an interpreter that imported verl once
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            str(grpo_run["out"] / "ckpt" / "global_step_3" / "actor"),
            "--target_dir",
            str(target),
        ],
        check=True,
        capture_output=True,
    )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target)
    inputs = tokenizer("Question: who works where?", return_tensors="pt")
    output = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert output.shape[1] > inputs["input_ids"].shape[1]
    # The merged weights are the trained step-3 weights (in the merger's dtype), not the starting model's.
    name = "model.layers.0.mlp.up_proj.weight"
    merged = model.state_dict()[name]
    shard = grpo_run["out"] / "ckpt" / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt"
    trained = torch.load(shard, weights_only=False)[name]
    trained = trained.full_tensor() if hasattr(trained, "full_tensor") else trained
    assert torch.equal(merged, trained.to(merged.dtype))
    initial = AutoModelForCausalLM.from_pretrained(grpo_run["setup"]["model"]).state_dict()[name]
    assert not torch.equal(merged, initial.to(merged.dtype))
