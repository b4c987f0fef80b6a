"""The Qwen3 recipes in dry-run mode: the 8-GPU thinking-model run and the one-GPU LoRA run.

Run the way tests/test_recipes.py runs the paper's recipes (its ``run_recipe``: bash, env vars, extra
Hydra overrides, ``FSPO_DRY_RUN=1``), so a change to how recipes are dry-run there applies here too.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

# pytest imports tests in importlib mode (no sibling imports): load test_recipes.py's helpers by path.
_spec = importlib.util.spec_from_file_location("recipe_dry_runs", Path(__file__).with_name("test_recipes.py"))
_recipe_dry_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_recipe_dry_runs)
RECIPES, printed_config, run_recipe = (
    _recipe_dry_runs.RECIPES,
    _recipe_dry_runs.printed_config,
    _recipe_dry_runs.run_recipe,
)

QWEN3_RECIPES = _recipe_dry_runs.THINKING_RECIPES


@pytest.fixture(scope="module")
def processes():
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(QWEN3_RECIPES, pool.map(run_recipe, QWEN3_RECIPES)))


@pytest.fixture(scope="module")
def configs(processes):
    return {name: printed_config(process) for name, process in processes.items()}


@pytest.mark.parametrize("name", QWEN3_RECIPES)
def test_recipe_is_executable_and_keeps_the_paper_settings(configs, name):
    assert os.access(RECIPES / name, os.X_OK)
    config = configs[name]
    actor_rollout_ref = config["actor_rollout_ref"]
    assert config["trainer"]["device"] == "cuda"
    assert actor_rollout_ref["rollout"]["name"] == "vllm" and actor_rollout_ref["rollout"]["n"] == 8
    assert (
        actor_rollout_ref["actor"]["kl_loss_coef"] == 0.001
        and actor_rollout_ref["actor"]["kl_loss_type"] == "low_var_kl"
    )
    assert config["fspo"]["enable"] is True and config["fspo"]["flip"] is True
    assert config["fspo"]["verifier"]["name"] == "hhem"
    # Qwen3's own template, thinking on: the model opens <think> itself.
    assert actor_rollout_ref["model"]["custom_chat_template"] is None
    assert config["data"]["apply_chat_template_kwargs"] == {"enable_thinking": True}
    assert config["data"]["max_response_length"] == 4096


def test_qwen3_8b_runs_on_8_gpu_nodes(processes, configs):
    config = configs["run_qwen3_8b.sh"]
    assert config["trainer"]["n_gpus_per_node"] == 8
    assert config["actor_rollout_ref"]["model"]["lora_rank"] == 0
    assert "fspo: verifier hhem on GPU (colocated with the actor: one copy per GPU, 8 per node, 8 in all" in (
        processes["run_qwen3_8b.sh"].stderr
    )


def test_lora_recipe_fits_one_gpu(processes, configs):
    config = configs["run_qwen3_4b_lora_1gpu.sh"]
    model, rollout = config["actor_rollout_ref"]["model"], config["actor_rollout_ref"]["rollout"]
    assert config["trainer"]["nnodes"] == 1 and config["trainer"]["n_gpus_per_node"] == 1
    assert model["lora_rank"] == 64 and model["lora_alpha"] == 32 and model["target_modules"] == "all-linear"
    assert rollout["tensor_model_parallel_size"] == 1 and rollout["load_format"] == "safetensors"
    assert config["data"]["train_batch_size"] % config["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"] == 0
    lines = [
        line for line in processes["run_qwen3_4b_lora_1gpu.sh"].stderr.splitlines() if line.startswith("fspo: verifier")
    ]
    assert lines == [
        "fspo: verifier hhem on GPU (colocated with the actor: one copy per GPU, 1 per node, 1 in all, "
        "each taking 1/3 of its GPU in Ray's accounting, the share verl keeps for a colocated model)"
    ]


def test_thinking_can_be_switched_off_and_a_bad_lora_rank_is_named():
    off = printed_config(run_recipe("run_qwen3_8b.sh", "data.apply_chat_template_kwargs.enable_thinking=false"))
    assert off["data"]["apply_chat_template_kwargs"] == {"enable_thinking": False}
    too_big = run_recipe("run_qwen3_4b_lora_1gpu.sh", "actor_rollout_ref.model.lora_rank=1024")
    assert too_big.returncode != 0
    assert "lora_rank must be at most 512" in too_big.stderr


def _load_recipe_memory():
    import sys

    if "recipe_memory" not in sys.modules:  # its dataclasses need their module registered
        spec = importlib.util.spec_from_file_location(
            "recipe_memory", RECIPES.parent / "benchmarks" / "recipe_memory.py"
        )
        sys.modules["recipe_memory"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["recipe_memory"])
    return sys.modules["recipe_memory"]


@pytest.mark.parametrize("name", QWEN3_RECIPES)
def test_the_memory_estimate_reads_the_recipes_settings(configs, name):
    """benchmarks/recipe_memory.py's table (docs/gpu-sizing.md, Memory and disk) holds what the dry run resolves."""
    recipe = _load_recipe_memory().RECIPES[name]
    config = configs[name]
    actor_rollout_ref = config["actor_rollout_ref"]
    assert recipe.gpus == config["trainer"]["nnodes"] * config["trainer"]["n_gpus_per_node"]
    assert (recipe.prompt, recipe.response) == (
        config["data"]["max_prompt_length"],
        config["data"]["max_response_length"],
    )
    assert recipe.micro_batch == actor_rollout_ref["actor"]["ppo_micro_batch_size_per_gpu"]
    assert recipe.rollout_tp == actor_rollout_ref["rollout"]["tensor_model_parallel_size"]
    assert recipe.gpu_memory_utilization == actor_rollout_ref["rollout"]["gpu_memory_utilization"]
    assert recipe.lora_rank == actor_rollout_ref["model"]["lora_rank"]
    assert recipe.log_prob_micro_batch == actor_rollout_ref["rollout"]["log_prob_micro_batch_size_per_gpu"]
    assert recipe.log_prob_micro_batch == actor_rollout_ref["ref"]["log_prob_micro_batch_size_per_gpu"]
    assert recipe.verifier == config["fspo"]["verifier"]["name"]


def test_the_one_gpu_recipe_is_estimated_to_fit_80_gb_and_lora_is_what_makes_it_fit():
    import dataclasses

    memory = _load_recipe_memory()
    lora = memory.RECIPES["run_qwen3_4b_lora_1gpu.sh"]
    assert memory.estimate(lora, 80)["peak"] < 80
    full_fine_tuning = dataclasses.replace(lora, lora_rank=0)
    assert memory.estimate(full_fine_tuning, 80)["peak"] > 80  # 4B x 16 bytes of fp32 state alone is 64 GB


@pytest.mark.parametrize("name", QWEN3_RECIPES)
def test_qwen3_recipes_validate_with_the_model_cards_thinking_sampling(configs, name):
    """Not verl's greedy default: Qwen3's model card warns that greedy decoding in thinking mode repeats
    endlessly (validation would run to the length limit without </think>)."""
    val_kwargs = configs[name]["actor_rollout_ref"]["rollout"]["val_kwargs"]
    assert (val_kwargs["temperature"], val_kwargs["top_p"], val_kwargs["top_k"]) == (0.6, 0.95, 20)
    assert val_kwargs["do_sample"] is True and val_kwargs["n"] == 1


def test_a_recipe_names_its_response_length_for_the_evaluation():
    """evaluate/run.sh reads a recipe's data.max_response_length (RECIPE=...) the way Hydra would resolve it:
    the last value, the recipe's own arguments included; nothing starts."""

    def printed(name, *args):
        process = subprocess.run(
            ["bash", str(RECIPES / name), *args],
            env={**os.environ, "FSPO_PRINT_OVERRIDE": "data.max_response_length"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert process.returncode == 0, process.stderr
        return process.stdout.strip()

    assert printed("run_qwen3_8b.sh") == printed("run_qwen3_4b_lora_1gpu.sh") == "4096"
    assert printed("run_qwen2.5_7b_instruct.sh") == "2048"
    assert printed("run_qwen3_8b.sh", "data.max_response_length=8192") == "8192"


@pytest.mark.parametrize("name", QWEN3_RECIPES)
def test_evaluation_samples_as_the_recipe_validates(configs, name, tmp_path):
    """`RECIPE=<name> evaluate/run.sh` samples as the run validates (tests/test_recipes.py, every other recipe)."""
    _recipe_dry_runs.assert_evaluation_samples_as_the_recipe_validates(name, configs[name], tmp_path)
