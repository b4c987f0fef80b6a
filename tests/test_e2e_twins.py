"""Every GPU recipe's scaled-down twin trains on CPU; the LoRA and one full fine-tuning twin go on to
train -> scripts/merge_checkpoint.sh -> fspo evaluate, and the merged model is shown to be the trained one.

A twin is the recipe script itself with the CPU path of its GPU-only settings, tiny sizes and a varied
outcome reward appended (fspo_testing/twins.py says which and why), on a tiny model of the recipe's family.
One run per twin, shared by its tests (module fixtures).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fspo_testing.tiny_run import run_logged
from fspo_testing.twins import RECIPE_FAMILIES, REPO, build_twin_model, twin_command, twin_env

pytestmark = pytest.mark.e2e

VENV_BIN = Path(sys.executable).parent
LR = 1e-3  # fspo_testing.twins.TWIN_SIZES' learning rate


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


def train_twin(recipe: str, out: Path, model: Path, inputs: dict, *extra: str) -> dict:
    """Run ``recipe``'s twin; returns its run folder, log and per-step metrics."""
    env = {
        **twin_env(model, inputs["train"], inputs["val"], inputs["hub_cache"]),
        "VERL_FILE_LOGGER_PATH": str(out / "metrics.jsonl"),
    }
    process = _run(twin_command(recipe, out, *extra), env, out / "train.log", timeout=1200)
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
            str(VENV_BIN / "fspo"),
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
    out = tmp_path_factory.mktemp("lora_twin")
    model = build_twin_model("qwen3", out / "model")
    twin = train_twin("run_qwen3_4b_lora_1gpu.sh", out, model, inputs, "trainer.total_training_steps=2")
    return merge_and_evaluate(twin, model, inputs, out)


def test_lora_twin_trains_with_the_recipes_adapter(lora_twin):
    assert [record["step"] for record in lora_twin["metrics"]] == [1, 2]
    actor = lora_twin["run_dir"] / "global_step_2" / "actor"
    assert json.loads((actor / "lora_train_meta.json").read_text()) == {
        "r": 64,
        "lora_alpha": 32,
        "task_type": "CAUSAL_LM",
    }
    assert lora_twin["metrics"][0]["data"]["actor/grad_norm"] > 0


def test_lora_twin_rollouts_sample_from_base_plus_the_synced_adapter(lora_twin):
    """Step 2's rollouts come after step 1's update reached the hf rollout as verl sends it to vLLM (the adapter
    alone, base weights read from disk): their log-probs are the updated actor's. Rollouts from the base alone
    differ from it by ~1e-3 in mean log-prob on this run (measured with the adapter sync skipped)."""
    step2 = lora_twin["metrics"][1]["data"]
    assert step2["actor/kl_loss"] > 1e-6, "the actor did not move from the reference: the test lost its point"
    assert max(abs(step2["rollout_corr/log_ppl_diff_max"]), abs(step2["rollout_corr/log_ppl_diff_min"])) < 1e-4


def test_merged_lora_model_is_the_base_plus_the_trained_adapter(lora_twin):
    """The merged weights are W + lora_alpha/r * B A of the trained adapter (bf16, verl's merged dtype); the
    base weights alone (what merge_checkpoint.sh used to write) are not."""
    import torch
    from safetensors.torch import load_file

    assert "folded the LoRA adapter (r=64, lora_alpha=32, 14 modules: " in lora_twin["merge_log"]
    merged = state_dict(lora_twin["merged"])
    base = state_dict(lora_twin["base"])
    adapter = load_file(lora_twin["merged"] / "lora_adapter" / "adapter_model.safetensors")
    config = json.loads((lora_twin["merged"] / "lora_adapter" / "adapter_config.json").read_text())
    scale = config["lora_alpha"] / config["r"]
    assert set(merged) == set(base)
    moved = 0
    for name, base_weight in base.items():
        module = name.removesuffix(".weight")
        lora_a = adapter.get(f"base_model.model.{module}.lora_A.weight")
        if lora_a is None:
            assert torch.equal(merged[name], base_weight.to(merged[name].dtype)), name
            continue
        lora_b = adapter[f"base_model.model.{module}.lora_B.weight"]
        # Two Adam steps of lr 1e-3 from B = 0: each moves every element of B by about the learning rate.
        assert 0.5 * LR < lora_b.float().abs().median() < 2.5 * LR, name
        # verl's merger stores the base in bf16 (merged's dtype); the script adds the adapter to that in float32.
        expected = base_weight.to(merged[name].dtype).float() + scale * lora_b.float() @ lora_a.float()
        torch.testing.assert_close(merged[name].float(), expected, atol=1e-9, rtol=2**-8)  # bf16's rounding
        moved += int((merged[name] != base_weight.to(merged[name].dtype)).sum())
    assert moved > 0.5 * sum(t.numel() for n, t in merged.items() if "proj" in n)


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
