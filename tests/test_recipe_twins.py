"""A recipe's CPU twin (fspo_testing/twins.py) is the recipe with only its listed replacements: dry-run both.

For every GPU recipe, the resolved config of its twin differs from the recipe's only in keys the twin sets
(CPU replacements, sizes, reward, output folders), keys the CPU preset sets, and keys verl derives from those.
So the end-to-end twins (tests/test_e2e_twins.py) train with everything else the recipe sets: LoRA, Qwen3's
thinking template and validation sampling, the ablations' estimator and flags, the HHEM verifier's placement.
"""

from __future__ import annotations

import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from fspo_testing.twins import RECIPE_FAMILIES, REPO, twin_command, twin_env, twin_overrides

# Keys verl fills from others (a mirror of a size, the disabled critic, the unused teacher, the platform's env var).
DERIVED = (
    "actor_rollout_ref.actor.rollout_n",
    "actor_rollout_ref.ref.rollout_n",
    "actor_rollout_ref.ref.strategy",
    "actor_rollout_ref.ref.use_torch_compile",
    "actor_rollout_ref.rollout.n_gpus_per_node",
    "actor_rollout_ref.rollout.prompt_length",
    "actor_rollout_ref.rollout.response_length",
    "critic.",
    "distillation.",
    "ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM",
)
# Set by twin_command beside the override lists.
OUTPUT_KEYS = ("trainer.default_local_dir", "fspo.dump_dir", "trainer.logger")


def flat(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def override_keys(overrides: list[str]) -> set[str]:
    return {item.split("=", 1)[0].lstrip("+") for item in overrides if "=" in item and "platform=" not in item}


def cpu_preset_keys() -> set[str]:
    return set(flat(yaml.safe_load((REPO / "fspo" / "config" / "platform" / "cpu.yaml").read_text())))


def dry_run(command: list[str], env: dict[str, str]) -> dict:
    process = subprocess.run(
        command,
        env={**env, "FSPO_DRY_RUN": "1"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    return flat(yaml.safe_load("\n".join(line for line in process.stdout.splitlines() if not line.startswith("["))))


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> dict[str, tuple[dict, dict]]:
    """(recipe's config, twin's config) per recipe, dry-run two at a time."""
    from fspo.data.io import write_parquet
    from fspo.data.synthetic import make_rows
    from fspo_testing.tiny_model import build_tiny_hhem_cache
    from fspo_testing.twins import build_twin_model

    root = tmp_path_factory.mktemp("twin_dry_runs")
    write_parquet(make_rows(4, seed=0), root / "data.parquet")
    cache = build_tiny_hhem_cache(root / "hhem")["cache"]
    models = {family: build_twin_model(family, root / family) for family in set(RECIPE_FAMILIES.values())}

    def both(recipe):
        env = twin_env(models[RECIPE_FAMILIES[recipe]], root / "data.parquet", root / "data.parquet", cache)
        recipe_env = {**env, "N_GPUS_PER_NODE": os.environ.get("N_GPUS_PER_NODE", "8")}
        return dry_run(["bash", str(REPO / "recipes" / recipe)], recipe_env), dry_run(twin_command(recipe, root), env)

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(RECIPE_FAMILIES, pool.map(both, RECIPE_FAMILIES)))


@pytest.mark.parametrize("recipe", list(RECIPE_FAMILIES))
def test_twin_differs_from_its_recipe_only_where_it_says(configs, recipe):
    gpu, cpu = configs[recipe]
    allowed = override_keys(twin_overrides(recipe)) | cpu_preset_keys() | set(OUTPUT_KEYS)
    allowed |= {"trainer.n_gpus_per_node", "trainer.total_training_steps", "trainer.save_freq", "trainer.test_freq"}
    differing = {key for key in set(gpu) | set(cpu) if gpu.get(key, "<absent>") != cpu.get(key, "<absent>")}
    unexplained = sorted(key for key in differing - allowed if not key.startswith(DERIVED))
    assert not unexplained, {key: (gpu.get(key), cpu.get(key)) for key in unexplained}
    assert gpu["trainer.device"] == "cuda" and cpu["trainer.device"] == "cpu"


def test_twins_keep_lora_qwen3_and_ablation_settings(configs):
    _, lora = configs["run_qwen3_4b_lora_1gpu.sh"]
    assert (lora["actor_rollout_ref.model.lora_rank"], lora["actor_rollout_ref.model.lora_alpha"]) == (64, 32)
    assert lora["actor_rollout_ref.model.target_modules"] == "all-linear"
    # The LoRA twin trains at the recipe's learning rate (what the merged model must keep), not the 1e-3 of others.
    assert (
        lora["actor_rollout_ref.actor.optim.lr"]
        == configs["run_qwen3_4b_lora_1gpu.sh"][0]["actor_rollout_ref.actor.optim.lr"]
    )
    assert lora["actor_rollout_ref.actor.optim.lr"] == 1e-5
    assert lora["actor_rollout_ref.rollout.load_format"] == "safetensors"
    assert lora["actor_rollout_ref.rollout.layered_summon"] is True
    for recipe in ("run_qwen3_8b.sh", "run_qwen3_4b_lora_1gpu.sh"):
        _, twin = configs[recipe]
        assert twin["data.apply_chat_template_kwargs.enable_thinking"] is True
        assert twin["actor_rollout_ref.rollout.val_kwargs.temperature"] == 0.6
        assert twin["actor_rollout_ref.rollout.val_kwargs.top_k"] == 20
        assert twin["trainer.val_before_train"] is True
    assert configs["run_ablation_grpo.sh"][1]["fspo.enable"] is False
    assert configs["run_ablation_fspo_reinforce_pp.sh"][1]["algorithm.adv_estimator"] == "reinforce_plus_plus"
    assert configs["run_ablation_grpo_factuality_reward.sh"][1]["fspo.step_reward_weight"] == 0.5
    assert configs["run_baseline_knowrl.sh"][1]["fspo.mode"] == "knowrl"
    assert configs["run_baseline_fapo.sh"][1]["fspo.mode"] == "fapo"
    qwen_base = configs["run_qwen2.5_7b_base.sh"][1]["actor_rollout_ref.model.custom_chat_template"]
    assert qwen_base and "Assistant: <think>" in qwen_base
    for _, twin in configs.values():
        assert twin["fspo.verifier.name"] == "hhem" and twin["fspo.verifier.placement"] == "colocated"
        assert twin["actor_rollout_ref.rollout.name"] == "hf"


def test_twin_models_are_of_their_recipes_families(tmp_path):
    from transformers import AutoConfig

    from fspo_testing.twins import build_twin_model

    expected = {"qwen2": "qwen2", "qwen3": "qwen3", "llama": "llama"}
    for family, model_type in expected.items():
        assert AutoConfig.from_pretrained(build_twin_model(family, tmp_path)).model_type == model_type
    assert Path(build_twin_model("llama", tmp_path) / "tokenizer.json").is_file()
