"""Every GPU recipe's scaled-down twin: the recipe script itself, run on CPU with a tiny model of its family.

A twin runs ``recipes/<recipe>`` as a user would (bash, environment, extra Hydra overrides), so every override
the recipe sets (LoRA, Qwen3's thinking template and validation sampling, the ablations' estimator and flags)
reaches verl. Appended after them, and so winning (Hydra keeps the last value), are only:

- :data:`CPU_REPLACEMENTS`: the GPU-only settings that have a CPU path, each replaced by it;
- :data:`TWIN_SIZES`: sizes for a tiny model and one step (batch, lengths);
- :func:`twin_learning_rate`: 1e-3 for a full fine-tuning twin; a LoRA twin keeps its recipe's;
- :data:`TWIN_REWARD`: an outcome reward that varies within every group (:mod:`fspo_testing.varied_reward`: a
  tiny model never answers right, the datasets' scorers would give every advantage 0 and a step would change
  nothing);
- paths (model, data, checkpoints) from :func:`twin_env` and :func:`twin_command`.

The verifier stays the recipe's HHEM, colocated as on GPUs (one server per logical GPU bundle): a tiny
HHEM of the published layout is read from an offline HF cache (:func:`fspo_testing.tiny_model.build_tiny_hhem_cache`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fspo.utils.hydra_values import hydra_quoted
from fspo_testing.warm_python import warm_python

REPO = Path(__file__).resolve().parents[1]

# The recipe -> its model family (what the tiny model is built as).
RECIPE_FAMILIES = {
    "run_qwen2.5_7b_base.sh": "qwen2",
    "run_qwen2.5_7b_instruct.sh": "qwen2",
    "run_llama3.1_8b_instruct.sh": "llama",
    "run_ablation_grpo.sh": "qwen2",
    "run_ablation_grpo_factuality_reward.sh": "qwen2",
    "run_ablation_fspo_reinforce_pp.sh": "qwen2",
    "run_baseline_knowrl.sh": "qwen2",
    "run_baseline_fapo.sh": "qwen2",
    "run_qwen3_8b.sh": "qwen3",
    "run_qwen3_4b_lora_1gpu.sh": "qwen3",
}

# GPU-only setting -> its CPU path. Each line says what the recipe sets and why the twin cannot keep it.
CPU_REPLACEMENTS = [
    # The CPU preset (fspo/config/platform/cpu.yaml): gloo, FSDP2, sdpa, the fake GPU of Ray's accounting.
    "platform=cpu",
    # vllm -> hf (fspo.cpu.rollout): vLLM needs CUDA. LoRA adapters reach hf as they reach vLLM.
    "actor_rollout_ref.rollout.name=hf",
    # tensor_model_parallel_size=2 -> 1: the hf rollout is one process.
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    # use_remove_padding=true -> false: verl's unpadded path wants flash-attn's varlen kernels.
    "actor_rollout_ref.model.use_remove_padding=false",
]

# Sizes of a twin: one step of 2 prompts on a tiny model. The recipes' sizes fit 4-8B models on 80 GB GPUs. The
# micro-batches stay the recipe's own (2-4 of the mini-batch's 8 rollouts), so a twin accumulates gradients over
# micro-batches as its GPU run does.
TWIN_SIZES = [
    "data.train_batch_size=2",
    "data.max_prompt_length=192",  # the end-to-end twins append their data's own (tiny_run.prompt_length_override)
    "data.max_response_length=40",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "trainer.total_training_steps=1",
    "trainer.save_freq=1",
    "trainer.test_freq=-1",
    "reward.num_workers=1",
]

# Recipes whose twin trains at the recipe's own learning rate: a LoRA run's merged model is stored in float32
# (scripts/merge_checkpoint.sh), which resolves the recipe's update, and the twin exists to show it does.
AT_RECIPE_LEARNING_RATE = ("run_qwen3_4b_lora_1gpu.sh",)
# A full fine-tuning twin's: the recipes' 1e-6 move a tiny model's weights less than bf16 resolves, and verl's
# merger (like verl's weight sync to vLLM during training) stores bf16.
FULL_FT_TWIN_LEARNING_RATE = "actor_rollout_ref.actor.optim.lr=1e-3"


# The modes whose reward is binary correctness (fspo/methods/reward_modes.py): a group mixes right and wrong answers only
# by chance (each rollout's parity bit from varied_reward.py): 1 in 8 groups of 4 is all one, 1 in 128 of 8.
BINARY_REWARD_MODES = ("knowrl", "fapo")
BINARY_REWARD_ROLLOUTS = "actor_rollout_ref.rollout.n=8"


def twin_sizes(recipe: str) -> list[str]:
    """TWIN_SIZES, with 8 rollouts a prompt where the recipe's fspo.mode rewards binary correctness."""
    try:
        mode = recipe_value(recipe, "fspo.mode")
    except subprocess.CalledProcessError:  # the recipe sets no mode: the default, fspo
        mode = "fspo"
    if mode not in BINARY_REWARD_MODES:
        return TWIN_SIZES
    return [BINARY_REWARD_ROLLOUTS if size.startswith("actor_rollout_ref.rollout.n=") else size for size in TWIN_SIZES]


def twin_learning_rate(recipe: str) -> list[str]:
    """The learning-rate override a twin appends (none: the recipe's own)."""
    return [] if recipe in AT_RECIPE_LEARNING_RATE else [FULL_FT_TWIN_LEARNING_RATE]


def recipe_value(recipe: str, key: str) -> str:
    """The value ``recipes/<recipe>`` gives ``key`` (FSPO_PRINT_OVERRIDE: the last one, as Hydra keeps it)."""
    process = subprocess.run(
        ["bash", str(REPO / "recipes" / recipe)],
        env={**os.environ, "FSPO_PRINT_OVERRIDE": key},
        capture_output=True,
        text=True,
        check=True,
    )
    return process.stdout.strip()


def twin_overrides(recipe: str) -> list[str]:
    """Everything a twin appends to its recipe's overrides, but its paths."""
    return [*CPU_REPLACEMENTS, *twin_sizes(recipe), *twin_learning_rate(recipe), *TWIN_REWARD]


TWIN_REWARD = [
    f"reward.custom_reward_function.path={Path(__file__).with_name('varied_reward.py')}",
    "reward.custom_reward_function.name=compute_score",
]


def build_twin_model(family: str, root: str | Path, bf16: bool = False) -> Path:
    """A tiny random model of ``family`` (``qwen2``, ``qwen3``, ``llama``) with a real tokenizer under ``root``;
    ``bf16``: its weights stored in bf16, as the recipes' models ship (so on the grid verl's merger writes)."""
    from fspo_testing.tiny_model import build_qwen3_model, build_tiny_llama, build_tiny_model

    root = Path(root)
    if bf16:
        return stored_in_bf16(build_twin_model(family, root))
    if family == "qwen3":
        return build_qwen3_model(root / "qwen3")
    if family == "llama":
        return build_tiny_llama(root / "llama")
    if family == "qwen2":
        return build_tiny_model(root / "qwen2")
    raise ValueError(f"no tiny model for family {family!r}")


def stored_in_bf16(model_dir: Path) -> Path:
    """Rewrite ``model_dir``'s weights in bf16, in place."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    for stale in model_dir.glob("*.safetensors"):
        stale.unlink()
    model.save_pretrained(model_dir)
    return model_dir


def twin_env(model: str | Path, train: str | Path, val: str | Path, hub_cache: str | Path) -> dict[str, str]:
    """The environment a twin runs under: the recipe's paths pointed at tiny local files, one logical GPU, and the
    recipe's ``PYTHON`` the warm shim (its trainer driver or dry run forks from an interpreter that imported it once)."""
    venv_bin = Path(sys.executable).parent
    return {
        **os.environ,
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHON": warm_python(),
        # What scripts/merge_checkpoint.sh sets: the merge's interpreters then share the trainer's warm servers.
        "PYTHONPATH": str(REPO),
        "PYTHONUNBUFFERED": "1",
        "MODEL_PATH": str(model),
        "TRAIN_FILES": str(train),
        "VAL_FILES": str(val),
        "N_GPUS_PER_NODE": "1",
        "HF_HUB_CACHE": str(hub_cache),
        "HF_HUB_OFFLINE": "1",
    }


def twin_command(recipe: str, out: str | Path, *extra: str) -> list[str]:
    """``bash recipes/<recipe>`` with the twin's replacements, sizes, reward and output folders under ``out``."""
    out = Path(out)
    return [
        "bash",
        str(REPO / "recipes" / recipe),
        *twin_overrides(recipe),
        f"trainer.default_local_dir={hydra_quoted(out / 'run')}",
        f"fspo.dump_dir={hydra_quoted(out / 'dump')}",
        # The recipe runs from the repository root: keep Hydra's run folder out of it.
        f"hydra.run.dir={hydra_quoted(out / 'hydra')}",
        "trainer.logger=[console,file]",
        *extra,
    ]
