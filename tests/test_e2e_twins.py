"""Every GPU recipe's scaled-down twin trains on CPU; the LoRA and one full fine-tuning twin go on to
train -> scripts/merge_checkpoint.sh -> fspo evaluate, and the merged model is shown to be the trained one.

A twin is the recipe script itself with the CPU path of its GPU-only settings, tiny sizes and a varied
outcome reward appended (fspo_testing/twins.py says which and why), on a tiny model of the recipe's family.
One run per twin, shared by its tests (module fixtures).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fspo.cpu.allocator import jemalloc_path
from fspo_testing.shared_ray import JOIN_OVERRIDES, joining_env
from fspo_testing.tiny_run import prompt_length_override, run_logged
from fspo_testing.twins import (
    FULL_FT_TWIN_LEARNING_RATE,
    RECIPE_FAMILIES,
    REPO,
    build_twin_model,
    recipe_value,
    twin_command,
    twin_env,
)

pytestmark = pytest.mark.e2e

LR = float(FULL_FT_TWIN_LEARNING_RATE.split("=")[1])  # a full fine-tuning twin's learning rate
LORA_RECIPE = "run_qwen3_4b_lora_1gpu.sh"


def _run(command: list[str], env: dict[str, str], log: Path, timeout: int) -> subprocess.CompletedProcess:
    return run_logged(command, env, log, timeout, cwd=REPO)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Synthetic train/val rows (no system prompt: every prompt token costs a 151k-vocabulary projection on
    CPU) and a tiny HHEM in an offline hub cache, the recipes' verifier."""
    from fspo.data.io import write_parquet
    from fspo.data.synthetic import make_rows
    from fspo_testing.tiny_model import build_tiny_hhem_cache

    root = tmp_path_factory.mktemp("twin_inputs")

    def rows(count, split):
        return [
            {**row, "prompt": [m for m in row["prompt"] if m["role"] != "system"]}
            for row in make_rows(count, seed=0, split=split)
        ]

    write_parquet(rows(8, "train"), root / "train.parquet")
    write_parquet(rows(4, "test"), root / "val.parquet")
    return {
        "train": root / "train.parquet",
        "val": root / "val.parquet",
        "hub_cache": build_tiny_hhem_cache(root / "hhem")["cache"],
        "root": root,
    }


def train_twin(recipe: str, out: Path, model: Path, inputs: dict, *extra: str, **env_vars: str) -> dict:
    """Run ``recipe``'s twin; returns its run folder, log and per-step metrics."""
    env = {
        **twin_env(model, inputs["train"], inputs["val"], inputs["hub_cache"]),
        "VERL_FILE_LOGGER_PATH": str(out / "metrics.jsonl"),
        **env_vars,
    }
    prompt_length = prompt_length_override(model, inputs["train"], inputs["val"])
    # It joins the test process's Ray cluster, as a GPU run joins one started with `ray start`.
    command = twin_command(recipe, out, prompt_length, *JOIN_OVERRIDES, *extra)
    process = _run(command, joining_env(env), out / "train.log", timeout=1200)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    # Step 0 holds the validation before training (the recipes' val_before_train), merged into step 1's
    # record when the logger writes both under one step.
    return {
        "run_dir": out / "run",
        "log": process.stdout + process.stderr,
        "validation": [record["data"] for record in records if record["step"] == 0],
        "metrics": [record for record in records if record["step"] > 0],
        "env": env,
    }


def merge_and_evaluate(twin: dict, base: Path, inputs: dict, out: Path) -> dict:
    """scripts/merge_checkpoint.sh on the twin's checkpoint, then `fspo evaluate` of the merged and the base model."""
    merge = _run(
        ["bash", str(REPO / "scripts" / "merge_checkpoint.sh"), str(twin["run_dir"])],
        twin["env"],
        out / "merge.log",
        600,
    )
    merged = Path(merge.stdout.strip().splitlines()[-1])
    _run(
        [
            twin["env"]["PYTHON"],  # the warm interpreter: `python -m fspo.cli` is the `fspo` command
            "-m",
            "fspo.cli",
            "evaluate",
            "--model",
            f"trained={merged}",
            "--model",
            f"base={base}",
            "--data",
            f"synth={inputs['val']}",
            "--output-dir",
            str(out / "eval"),
            "--backend",
            "hf",
            "--limit",
            "2",
            "--max-new-tokens",
            "8",
        ],
        twin["env"],
        out / "evaluate.log",
        600,
    )
    return {**twin, "merged": merged, "merge_log": merge.stderr, "eval_dir": out / "eval", "base": base}


def state_dict(path: Path):
    from safetensors.torch import load_file

    tensors = {}
    for file in sorted(path.glob("*.safetensors")):
        tensors.update(load_file(file))
    return tensors


def check_evaluated(pipeline: dict) -> None:
    results = json.loads((pipeline["eval_dir"] / "results.json").read_text())
    assert sorted(results) == ["base", "trained"]
    for model in results.values():
        assert model["synth"]["n"] == 2 and model["synth"]["generated"] == 2


# ---------------------------------------------------------------------------------------------------------
# The one-GPU LoRA recipe: two steps (the second samples after an adapter sync), merge, evaluate.
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lora_twin(inputs, tmp_path_factory):
    """The recipe's own learning rate and adapter (twins.AT_RECIPE_LEARNING_RATE); its model stored in bf16, as
    Qwen3-4B is. Computed in float32 (FSPO_CPU_DTYPE): at lr 1e-5 the adapter moves log-probs by ~2e-4, below
    what bf16 activations resolve (~2e-2 between two bf16 forwards here), so the adapter-sync check needs it."""
    out = tmp_path_factory.mktemp("lora_twin")
    model = build_twin_model("qwen3", out / "model", bf16=True)
    twin = train_twin(LORA_RECIPE, out, model, inputs, "trainer.total_training_steps=2", FSPO_CPU_DTYPE="float32")
    return merge_and_evaluate(twin, model, inputs, out)


def test_lora_twin_trains_with_the_recipes_adapter(lora_twin):
    assert [record["step"] for record in lora_twin["metrics"]] == [1, 2]
    actor = lora_twin["run_dir"] / "global_step_2" / "actor"
    assert json.loads((actor / "lora_train_meta.json").read_text()) == {
        "r": int(recipe_value(LORA_RECIPE, "actor_rollout_ref.model.lora_rank")),
        "lora_alpha": int(recipe_value(LORA_RECIPE, "actor_rollout_ref.model.lora_alpha")),
        "task_type": "CAUSAL_LM",
    }
    assert lora_twin["metrics"][0]["data"]["actor/grad_norm"] > 0
    assert lora_twin["metrics"][0]["data"]["actor/lr"] == float(
        recipe_value(LORA_RECIPE, "actor_rollout_ref.actor.optim.lr")
    )


def test_lora_twin_rollouts_sample_from_base_plus_the_synced_adapter(lora_twin, lora_log_probs):
    """Step 2's rollouts come after step 1's update reached the hf rollout as verl sends it to vLLM (the adapter
    alone, base weights read from disk): their log-probs are the updated actor's. Unsynced, they would differ
    by the adapter's effect: about half the trained adapter's (one update of two), ~2e-6 per sequence here."""
    step2 = lora_twin["metrics"][1]["data"]
    effect = lora_log_probs["adapter_effect_per_sequence"]
    print(f"step 2: rollout vs actor |log-ppl diff| {step2['rollout_corr/log_ppl_abs_diff']:.2e}; adapter {effect:.2e}")
    assert step2["rollout_corr/log_ppl_abs_diff"] < 0.25 * effect


def lora_pieces(pipeline: dict):
    """(merged weights, the original base's weights, the adapter, lora_alpha / r) of the LoRA twin."""
    from safetensors.torch import load_file

    config = json.loads((pipeline["merged"] / "lora_adapter" / "adapter_config.json").read_text())
    adapter = load_file(pipeline["merged"] / "lora_adapter" / "adapter_model.safetensors")
    return state_dict(pipeline["merged"]), state_dict(pipeline["base"]), adapter, config["lora_alpha"] / config["r"]


def test_merged_lora_model_is_the_base_plus_the_trained_adapter(lora_twin):
    """The merged weights are W + lora_alpha/r * B A of the trained adapter in float32; a bf16 store of the same
    fold (what merge_checkpoint.sh wrote before) leaves most of them equal to the base at the recipe's lr."""
    import torch

    lr = float(recipe_value(LORA_RECIPE, "actor_rollout_ref.actor.optim.lr"))
    assert "folded the LoRA adapter (r=64, lora_alpha=32, 14 modules: " in lora_twin["merge_log"]
    merged, base, adapter, scale = lora_pieces(lora_twin)
    assert set(merged) == set(base)
    adapted = kept_by_bf16 = 0
    for name, base_weight in base.items():
        assert merged[name].dtype == torch.float32, name
        module = name.removesuffix(".weight")
        lora_a = adapter.get(f"base_model.model.{module}.lora_A.weight")
        if lora_a is None:
            assert torch.equal(merged[name], base_weight.float()), name
            continue
        lora_b = adapter[f"base_model.model.{module}.lora_B.weight"]
        # Two Adam steps from B = 0: each moves every element of B by about the learning rate.
        assert 0.5 * lr < lora_b.float().abs().median() < 2.5 * lr, name
        expected = base_weight.float() + scale * lora_b.float() @ lora_a.float()
        torch.testing.assert_close(merged[name], expected, atol=1e-7, rtol=1e-6)
        changed = merged[name] != base_weight.float()
        adapted += int(changed.sum())
        kept_by_bf16 += int((merged[name].bfloat16() != base_weight)[changed].sum())
    print(f"LoRA twin at lr {lr}: a bf16 store keeps {kept_by_bf16 / adapted:.1%} of the {adapted} changed weights")
    assert kept_by_bf16 < 0.5 * adapted, "the update is within bf16's resolution: the test lost its point"


def sequence_log_probs(model, ids):
    """Each next token's log-prob under ``model`` (float32 arithmetic on the log-softmax)."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    return torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


@pytest.fixture(scope="module")
def lora_log_probs(lora_twin) -> dict:
    """Next-token log-probs on random sequences: the base, base + the unmerged adapter (peft, as vLLM applied it
    in training), the model `fspo evaluate` loads (fspo.evaluation.generation.HFGenerator), and a bf16 store of the
    same fold (what merge_checkpoint.sh wrote before); the max abs differences to base + adapter."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from fspo.evaluation.generation import GenerationSettings, HFGenerator

    evaluated = HFGenerator(lora_twin["merged"], GenerationSettings(), device="cpu").model
    ids = torch.randint(0, evaluated.config.vocab_size, (4, 48), generator=torch.Generator().manual_seed(0))
    base = AutoModelForCausalLM.from_pretrained(lora_twin["base"], dtype=torch.float32).eval()
    base_log_probs = sequence_log_probs(base, ids)
    expected = sequence_log_probs(PeftModel.from_pretrained(base, lora_twin["merged"] / "lora_adapter").eval(), ids)
    bf16_fold = AutoModelForCausalLM.from_pretrained(lora_twin["merged"], dtype=torch.bfloat16).float().eval()
    figures = {
        "evaluated_dtype": evaluated.dtype,
        "adapter_effect": (expected - base_log_probs).abs().max().item(),
        "adapter_effect_per_sequence": (expected - base_log_probs).mean(1).abs().mean().item(),
        "evaluated_error": (sequence_log_probs(evaluated, ids) - expected).abs().max().item(),
        "bf16_error": (sequence_log_probs(bf16_fold, ids) - expected).abs().max().item(),
    }
    print(
        f"max |log-prob - base+adapter|: evaluated (float32 fold) {figures['evaluated_error']:.2e}, bf16 fold "
        f"{figures['bf16_error']:.2e}; the adapter's own effect {figures['adapter_effect']:.2e}"
    )
    return figures


def test_evaluated_lora_model_log_probs_match_base_plus_adapter(lora_log_probs):
    """The evaluated model gives base + adapter's log-probs to float32 precision; the bf16 fold loses most of the
    update (its error is most of the adapter's whole effect)."""
    import torch

    figures = lora_log_probs
    assert figures["evaluated_dtype"] == torch.float32
    assert figures["adapter_effect"] > 1e-5, "the adapter does not change the model: the test lost its point"
    assert figures["evaluated_error"] < 0.01 * figures["adapter_effect"]
    assert figures["bf16_error"] > 0.5 * figures["adapter_effect"]


def test_lora_twin_evaluates_the_merged_model(lora_twin):
    check_evaluated(lora_twin)


# ---------------------------------------------------------------------------------------------------------
# A full fine-tuning recipe: Qwen2.5-7B base's twin on the tiny Qwen2 taught its qwen-base format.
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def full_ft_twin(tiny_reasoner, inputs, tmp_path_factory):
    out = tmp_path_factory.mktemp("full_ft_twin")
    setup = {**inputs, "train": tiny_reasoner["train"], "val": tiny_reasoner["val"]}
    twin = train_twin("run_qwen2.5_7b_base.sh", out, Path(tiny_reasoner["model"]), setup)
    return merge_and_evaluate(twin, Path(tiny_reasoner["model"]), setup, out)


def test_full_ft_twin_merged_model_moved_by_one_adam_step(full_ft_twin):
    """Adam's first step moves every weight with a gradient by about the learning rate: the merged layers sit
    ~1e-3 from the base (the base alone, in bf16, would be ~1e-5 from it)."""
    assert [record["step"] for record in full_ft_twin["metrics"]] == [1]
    merged = state_dict(full_ft_twin["merged"])
    base = state_dict(full_ft_twin["base"])
    layers = [name for name in base if name.startswith("model.layers.") and name.endswith("proj.weight")]
    assert layers
    for name in layers:
        change = (merged[name].float() - base[name].float()).abs().median().item()
        assert change == pytest.approx(LR, rel=0.3), name
    assert not (full_ft_twin["merged"] / "lora_adapter").exists()
    assert "folded the LoRA adapter" not in full_ft_twin["merge_log"]


def test_full_ft_twin_evaluates_the_merged_model(full_ft_twin):
    check_evaluated(full_ft_twin)


# ---------------------------------------------------------------------------------------------------------
# Every other recipe's twin trains one step.
# ---------------------------------------------------------------------------------------------------------

OTHER_TWINS = [name for name in RECIPE_FAMILIES if name not in ("run_qwen3_4b_lora_1gpu.sh", "run_qwen2.5_7b_base.sh")]


@pytest.mark.parametrize("recipe", OTHER_TWINS)
def test_twin_trains_one_step(recipe, inputs, tmp_path):
    model = build_twin_model(RECIPE_FAMILIES[recipe], tmp_path / "model")
    twin = train_twin(recipe, tmp_path, model, inputs)
    [record] = twin["metrics"]
    assert record["step"] == 1
    assert record["data"]["actor/grad_norm"] > 0
    assert (twin["run_dir"] / "global_step_1" / "actor").is_dir()
    # The CPU preset's allocator reached ray.init resolved (fspo.cpu.allocator; verl prints the arguments).
    assert f"'LD_PRELOAD': '{jemalloc_path()}'" in twin["log"]
    if recipe.startswith("run_baseline_"):
        # KnowRL's and FAPO's modes change the reward, not the advantages; FAPO's metrics are logged in every mode.
        assert record["data"]["fspo/flipped_frac"] == 0.0
        assert {"fspo/flawed_positive_rate", "fspo/fapo_refinement_group_frac"} <= set(record["data"])


def test_evaluate_run_sh_generates_as_long_as_the_recipe_trained(full_ft_twin, tiny_reasoner, tmp_path):
    """RECIPE=run_qwen3_8b.sh: evaluate/run.sh asks fspo evaluate for the recipe's 4096 new tokens, not 2048."""
    (tmp_path / "data" / "synth").mkdir(parents=True)
    (tmp_path / "data" / "synth" / "test.parquet").write_bytes(Path(tiny_reasoner["val"]).read_bytes())
    env = {
        **full_ft_twin["env"],
        "RECIPE": "run_qwen3_8b.sh",
        "DATA_DIR": str(tmp_path / "data"),
        "BENCHMARKS": "synth",
        "OUTPUT_DIR": str(tmp_path / "eval"),
    }
    command = ["bash", str(REPO / "evaluate" / "run.sh"), str(full_ft_twin["merged"]), "--", "--limit", "1"]
    process = _run([*command, "--backend", "hf"], env, tmp_path / "run.log", 900)
    assert "generating up to 4096 new tokens, run_qwen3_8b.sh's data.max_response_length" in process.stderr
    [sidecar] = (tmp_path / "eval" / "predictions").glob("*.provenance.json")
    assert json.loads(sidecar.read_text())["max_new_tokens"] == 4096
