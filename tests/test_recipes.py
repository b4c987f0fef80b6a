"""The launch recipes (recipes/*.sh) in dry-run mode, and scripts/merge_checkpoint.sh's argument handling.

Each recipe is run as a user would (bash, env vars, extra Hydra overrides) with ``FSPO_DRY_RUN=1``:
fspo.training.main composes, resolves and validates the whole config against verl's dataclasses, prints it
and exits without starting Ray. The recipes run concurrently (each is ~10 s of imports) so that the
file stays well under a minute.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from fspo.config.calibrated_thresholds import calibrated_threshold
from fspo_testing.warm_python import warm_python

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "recipes"
MERGE = REPO / "scripts" / "merge_checkpoint.sh"

GPU_RECIPES = [
    "run_qwen2.5_7b_base.sh",
    "run_qwen2.5_7b_instruct.sh",
    "run_llama3.1_8b_instruct.sh",
    "run_ablation_grpo.sh",
    "run_ablation_grpo_factuality_reward.sh",
    "run_ablation_fspo_reinforce_pp.sh",
    "run_baseline_knowrl.sh",
    "run_baseline_fapo.sh",
]
ALL_RECIPES = [*GPU_RECIPES, "run_cpu.sh"]


_weights_lock = threading.Lock()


@functools.cache
def _weights_env() -> dict[str, str]:
    from fspo_testing.tiny_model import recipe_weights_env

    root = tempfile.mkdtemp(prefix="fspo-recipe-weights-")
    atexit.register(shutil.rmtree, root, True)
    return recipe_weights_env(root)


def weights_env() -> dict[str, str]:
    """What a recipe's dry run finds its weights by (it checks them: fspo.launch.preflight): a tiny local policy as
    MODEL_PATH and HHEM in an offline HF cache, built once per test process for every caller of run_recipe."""
    with _weights_lock:
        return _weights_env()


def run_recipe(name: str, *overrides: str, **env: str) -> subprocess.CompletedProcess:
    """Run ``recipes/<name>`` in dry-run mode with the venv's python; returns the finished process."""
    full_env = {
        **os.environ,
        "FSPO_DRY_RUN": "1",
        "PYTHON": warm_python(),
        **weights_env(),
        **env,
    }
    return subprocess.run(
        ["bash", str(RECIPES / name), *overrides], env=full_env, capture_output=True, text=True, timeout=300
    )


def printed_config(process: subprocess.CompletedProcess) -> dict:
    assert process.returncode == 0, process.stderr[-3000:]
    assert "dry run OK" in process.stderr
    # verl logs a line or two ("[...][INFO] ...", "[validate_config] ...") before the YAML.
    lines = [line for line in process.stdout.splitlines() if not line.startswith("[")]
    return yaml.safe_load("\n".join(lines))


@pytest.fixture(scope="module")
def dry_run_processes() -> dict[str, subprocess.CompletedProcess]:
    """Every recipe's dry run, two at a time."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(ALL_RECIPES, pool.map(run_recipe, ALL_RECIPES)))


@pytest.fixture(scope="module")
def dry_runs(dry_run_processes) -> dict[str, dict]:
    """Every recipe's printed config."""
    return {name: printed_config(process) for name, process in dry_run_processes.items()}


def test_recipe_files_exist_and_are_executable():
    for name in [*ALL_RECIPES, "common.sh", "README.md"]:
        assert (RECIPES / name).is_file(), name
    for name in ALL_RECIPES:
        assert os.access(RECIPES / name, os.X_OK), f"{name} is not executable"


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_gpu_recipe_carries_the_paper_settings(dry_runs, name):
    config = dry_runs[name]
    actor_rollout_ref = config["actor_rollout_ref"]
    assert config["trainer"]["device"] == "cuda"  # platform=gpu even on this CPU machine
    assert config["trainer"]["n_gpus_per_node"] == 8
    assert actor_rollout_ref["rollout"]["name"] == "vllm"
    assert actor_rollout_ref["rollout"]["n"] == 8
    assert actor_rollout_ref["rollout"]["temperature"] == 1.0
    assert actor_rollout_ref["actor"]["use_kl_loss"] is True
    assert actor_rollout_ref["actor"]["kl_loss_coef"] == 0.001
    assert actor_rollout_ref["actor"]["kl_loss_type"] == "low_var_kl"
    assert config["data"]["max_prompt_length"] == 2048
    assert config["data"]["max_response_length"] == 2048
    # Absolute before Ray starts (fspo/launch/cluster_paths.py): a worker runs where `ray start` ran, not in the repository.
    assert config["data"]["train_files"] == [
        str(REPO / "data/hotpotqa/train.parquet"),
        str(REPO / "data/simplerl_math/train.parquet"),
    ]
    assert config["trainer"]["default_local_dir"] == str(
        REPO / "checkpoints" / "fspo" / config["trainer"]["experiment_name"]
    )
    # verl keeps every checkpoint unless told: ~91 GB each for a 7B model (docs/gpu-sizing.md)
    assert config["trainer"]["max_actor_ckpt_to_keep"] == config["trainer"]["max_critic_ckpt_to_keep"] == 2
    assert config["fspo"]["verifier"]["name"] == "hhem"
    assert config["fspo"]["verifier"]["threshold"] == 0.5  # HHEM's published operating point
    assert actor_rollout_ref["model"]["path"] == weights_env()["MODEL_PATH"]


@pytest.mark.parametrize("name", [n for n in GPU_RECIPES if n != "run_ablation_grpo.sh"])
def test_gpu_recipe_verifies_on_the_gpus_verl_accounts_for(dry_run_processes, dry_runs, name):
    """Startup says where the verifier runs: HHEM colocated with the actor, one copy per GPU."""
    assert dry_runs[name]["fspo"]["verifier"]["placement"] == "colocated"
    lines = [line for line in dry_run_processes[name].stderr.splitlines() if line.startswith("fspo: verifier")]
    assert lines == [
        "fspo: verifier hhem on GPU (colocated with the actor: one copy per GPU, 8 per node, 8 in all, each taking "
        "1/3 of its GPU in Ray's accounting, the share verl keeps for a colocated model)"
    ]
    assert "WARNING" not in dry_run_processes[name].stderr


def test_a_gpu_recipe_told_to_verify_in_the_reward_workers_warns_loudly():
    process = run_recipe("run_qwen2.5_7b_instruct.sh", "fspo.verifier.placement=local")
    assert process.returncode == 0, process.stderr[-2000:]
    assert "fspo: verifier hhem on CPU (local: a copy in each of the 8 reward workers" in process.stderr
    assert "fspo: WARNING: fspo.verifier.placement=local runs hhem on the CPU" in process.stderr


def test_recipes_differ_where_the_paper_runs_differ(dry_runs):
    fspo = {name: dry_runs[name]["fspo"] for name in GPU_RECIPES}
    estimator = {name: dry_runs[name]["algorithm"]["adv_estimator"] for name in GPU_RECIPES}
    for name in ["run_qwen2.5_7b_base.sh", "run_qwen2.5_7b_instruct.sh", "run_llama3.1_8b_instruct.sh"]:
        assert fspo[name]["enable"] is True and fspo[name]["flip"] is True
        assert fspo[name]["step_reward_weight"] == 0.0
        assert estimator[name] == "grpo"
    assert fspo["run_ablation_grpo.sh"]["enable"] is False
    factuality = fspo["run_ablation_grpo_factuality_reward.sh"]
    assert factuality["enable"] is True and factuality["flip"] is False and factuality["step_reward_weight"] > 0
    assert estimator["run_ablation_fspo_reinforce_pp.sh"] == "reinforce_plus_plus"
    assert fspo["run_ablation_fspo_reinforce_pp.sh"]["flip"] is True
    for name, mode in (("run_baseline_knowrl.sh", "knowrl"), ("run_baseline_fapo.sh", "fapo")):
        assert fspo[name]["enable"] is True and fspo[name]["mode"] == mode and estimator[name] == "grpo"
        assert fspo[name]["step_reward_weight"] == 0.0
    assert fspo["run_baseline_knowrl.sh"]["knowrl_fact_weight"] == pytest.approx(1 / 3)
    assert fspo["run_baseline_fapo.sh"]["fapo_penalty"] == 0.5


def test_fapo_recipe_trains_with_its_authors_clip_higher_and_overlong_penalty(dry_runs):
    """verl-recipe fapo/run_fapo_7b.sh (and its GRPO baseline): clip_ratio_high=0.28 (line 15); DAPO's overlong
    penalty over the last 4096 of 8192 response tokens at factor 1.0 on +-1 rewards (lines 18-21, 128-133), here the
    last half of the response limit at 0.5 on 0-1 rewards. The other recipes keep verl's 0.2 and no penalty."""
    from fspo.methods.fapo import OverlongBuffer, overlong_buffer

    config = dry_runs["run_baseline_fapo.sh"]
    actor = config["actor_rollout_ref"]["actor"]
    assert (actor["clip_ratio_low"], actor["clip_ratio_high"]) == (0.2, 0.28)
    limit = config["data"]["max_response_length"]
    assert overlong_buffer(config) == OverlongBuffer(max_length=limit, length=limit // 2, factor=0.5, log=True)
    # A user's longer response limit (the Qwen3 recipes' 4096) without the penalty's is refused in one line: past
    # max_resp_len the penalty would grow beyond its factor.
    longer = run_recipe("run_baseline_fapo.sh", f"data.max_response_length={2 * limit}")
    assert longer.returncode == 2 and longer.stderr.strip().splitlines()[-1] == (
        f"fspo: reward.reward_kwargs.max_resp_len={limit} is below data.max_response_length={2 * limit}: a longer "
        "response would lose more than penalty_factor; set reward.reward_kwargs.max_resp_len='${data.max_response_length}'"
    )
    for name in GPU_RECIPES:
        if name != "run_baseline_fapo.sh":
            assert dry_runs[name]["actor_rollout_ref"]["actor"]["clip_ratio_high"] == 0.2, name
            assert overlong_buffer(dry_runs[name]) is None, name


def test_base_recipe_resolves_the_qwen_base_chat_template(dry_runs):
    from fspo.training.prompt_formats import chat_template

    base = dry_runs["run_qwen2.5_7b_base.sh"]["actor_rollout_ref"]["model"]["custom_chat_template"]
    assert base == chat_template("qwen-base")
    assert dry_runs["run_qwen2.5_7b_instruct.sh"]["actor_rollout_ref"]["model"]["custom_chat_template"] is None


def test_cpu_recipe_uses_the_cpu_preset(dry_runs):
    config = dry_runs["run_cpu.sh"]
    assert config["trainer"]["device"] == "cpu"
    assert config["actor_rollout_ref"]["rollout"]["name"] == "hf"
    assert config["fspo"]["verifier"]["name"] == "lexical"
    assert config["trainer"]["max_actor_ckpt_to_keep"] == 2  # every recipe, run_cpu.sh too (common.sh)
    # calibrated on held-out synthetic facts: the threshold `fspo verify` and the quickstart use for lexical
    assert config["fspo"]["verifier"]["threshold"] == calibrated_threshold("lexical") == 1.0
    # and so does a GPU recipe told to verify with lexical: one threshold per backend whatever the platform
    lexical = printed_config(run_recipe("run_qwen2.5_7b_instruct.sh", "fspo.verifier.name=lexical"))
    assert lexical["fspo"]["verifier"]["threshold"] == 1.0
    # each clause of a step in its own evidence sentence, as the quickstart trains
    assert config["fspo"]["verifier"]["evidence_unit"] == "sentence"
    assert config["data"]["train_batch_size"] == 2


# Dry-run by tests/test_recipes_qwen3.py, which asserts the evaluation's sampling of these two with the helper below.
THINKING_RECIPES = ["run_qwen3_8b.sh", "run_qwen3_4b_lora_1gpu.sh"]
EVALUATE = REPO / "evaluate" / "run.sh"


def test_every_recipe_is_dry_run_here_or_in_the_qwen3_file():
    assert sorted(path.name for path in RECIPES.glob("run_*.sh")) == sorted([*ALL_RECIPES, *THINKING_RECIPES])


def evaluate_run_sh_calls(root: Path, *, cwd: Path | None = None, **env: str) -> list[dict[str, str]]:
    """Each `fspo evaluate` that evaluate/run.sh starts, as {option: its last value} (argparse keeps the last), read
    by a stand-in interpreter that records its arguments and generates nothing (and has no vLLM)."""
    process = run_evaluate_sh(root, cwd=cwd, **env)
    assert process.returncode == 0, process.stderr
    parsed = []
    for call in sorted((root / "calls").iterdir(), key=lambda path: int(path.name)):
        words = call.read_text().splitlines()
        parsed.append({word: value for word, value in zip(words, words[1:]) if word.startswith("--")})
    return parsed


def run_evaluate_sh(root: Path, *, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """evaluate/run.sh on gsm8k and aime2024 (empty files in root/data) with a stand-in interpreter that records
    each `fspo evaluate` call in root/calls."""
    calls = root / "calls"
    calls.mkdir()
    python = root / "python"
    python.write_text(  # the environment door and the output rule's check run in the real interpreter
        f'#!/usr/bin/env bash\n[[ "$1" == -c ]] && exit 1\n[[ "$1 $2" == "-m fspo.cli" ]] || exec {sys.executable} "$@"\n'
        'printf "%s\\n" "$@" > "$CALLS/$(ls "$CALLS" | wc -l)"\n'
    )
    python.chmod(0o755)
    for name in ("gsm8k", "aime2024"):
        (root / "data" / name).mkdir(parents=True)
        (root / "data" / name / "test.parquet").write_bytes(b"")  # run.sh checks it is there; nothing reads it
    full_env = {
        **{key: value for key, value in os.environ.items() if key not in ("MAX_NEW_TOKENS", "TEMPERATURE", "TOP_P")},
        "PYTHON": str(python),
        "CALLS": str(calls),
        "DATA_DIR": str(root / "data"),
        "BENCHMARKS": "gsm8k aime2024",
        **env,
    }
    return subprocess.run(
        ["bash", str(EVALUATE), "model"], env=full_env, cwd=cwd or root, capture_output=True, text=True, timeout=60
    )


def assert_evaluation_samples_as_the_recipe_validates(name: str, config: dict, root: Path) -> None:
    """`RECIPE=<name> evaluate/run.sh` gives fspo evaluate the sampling the recipe's composed config validates with
    (actor_rollout_ref.rollout.val_kwargs) and its response length; AIME draws 16 samples only when sampling."""
    validation = config["actor_rollout_ref"]["rollout"]["val_kwargs"]
    plain, aime = evaluate_run_sh_calls(root, RECIPE=name)
    assert float(plain["--temperature"]) == validation["temperature"]
    assert float(plain["--top-p"]) == validation["top_p"]
    assert int(plain["--top-k"]) == validation["top_k"]  # -1 is off in both (fspo.evaluation.cli.TOP_K)
    assert int(plain["--samples"]) == validation["n"]
    assert int(plain["--max-new-tokens"]) == config["data"]["max_response_length"]
    # vLLM's validation reads temperature, not do_sample (verl/experimental/agent_loop/agent_loop.py:604-607); verl's
    # transformers rollout reads do_sample (verl/workers/rollout/hf_rollout.py:56-69): the two must agree.
    assert validation["do_sample"] is (validation["temperature"] > 0)
    assert int(aime["--samples"]) == (16 if validation["temperature"] > 0 else 1)
    assert {key: aime[key] for key in plain if key not in ("--samples", "--output-dir", "--data", "--model")} == {
        key: plain[key] for key in plain if key not in ("--samples", "--output-dir", "--data", "--model")
    }


@pytest.mark.parametrize("name", ALL_RECIPES)
def test_evaluation_samples_as_the_recipe_validates(dry_runs, name, tmp_path):
    assert_evaluation_samples_as_the_recipe_validates(name, dry_runs[name], tmp_path)


@pytest.mark.parametrize("name", GPU_RECIPES)
def test_gpu_recipes_validate_on_a_fixed_subset(dry_runs, name):
    """500 rows drawn with a seed (verl/utils/dataset/rl_dataset.py:185-191: unseeded when data.seed is null, so
    every start would validate on other rows), not the whole test split."""
    data = dry_runs[name]["data"]
    assert data["val_max_samples"] == 500
    assert data["shuffle"] is True and data["seed"] == dry_runs[name]["actor_rollout_ref"]["rollout"]["seed"]


def test_evaluate_run_sh_takes_relative_paths_in_the_repository_and_its_variables_over_the_recipes(tmp_path):
    """As the recipes take TRAIN_FILES and CKPT_DIR: OUTPUT_DIR=eval_x from another folder is <repo>/eval_x. A
    variable set in the environment wins over the recipe's value."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    plain, _ = evaluate_run_sh_calls(
        tmp_path, cwd=elsewhere, OUTPUT_DIR="eval_x", RECIPE="run_qwen3_8b.sh", TOP_K="5", MAX_NEW_TOKENS="7"
    )
    assert plain["--output-dir"] == str(REPO / "eval_x")
    assert (plain["--top-k"], plain["--max-new-tokens"], plain["--temperature"]) == ("5", "7", "0.6")
    missing = subprocess.run(
        ["bash", str(EVALUATE), "model"],
        env={**os.environ, "DATA_DIR": "no_such_data", "BENCHMARKS": "gsm8k", "MAX_NEW_TOKENS": "8"},
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1
    assert missing.stderr.strip().endswith(
        f"missing {REPO / 'no_such_data/gsm8k/test.parquet'}: build it with 'fspo data gsm8k'"
    )


def test_env_vars_and_extra_overrides_reach_the_config():
    process = run_recipe(
        "run_qwen2.5_7b_instruct.sh",
        "actor_rollout_ref.rollout.n=4",
        "trainer.total_epochs=1",
        NNODES="2",
        N_GPUS_PER_NODE="4",
        EXPERIMENT="my_run",
        CKPT_DIR="/ckpt/here",
        TRAIN_FILES="[a.parquet]",
        CKPT_KEEP="3",
    )
    config = printed_config(process)
    assert config["trainer"]["nnodes"] == 2
    assert config["trainer"]["n_gpus_per_node"] == 4
    assert config["trainer"]["experiment_name"] == "my_run"
    assert config["trainer"]["default_local_dir"] == "/ckpt/here"
    assert config["trainer"]["total_epochs"] == 1
    assert config["data"]["train_files"] == [str(REPO / "a.parquet")]  # the recipes launch from the repository
    assert config["trainer"]["max_actor_ckpt_to_keep"] == 3
    assert config["actor_rollout_ref"]["rollout"]["n"] == 4  # the command line wins over the recipe


def test_mistyped_key_fails_the_dry_run():
    process = run_recipe("run_ablation_grpo.sh", "actor_rollout_ref.rollout.temprature=0.7")
    assert process.returncode != 0
    assert "temprature" in process.stderr


def test_cpu_recipe_needs_a_model_path(tmp_path):
    # An empty cache: no converted SmolLM2 to fall back on.
    env = {
        **{key: value for key, value in os.environ.items() if key != "MODEL_PATH"},
        "FSPO_CACHE": str(tmp_path),
        "FSPO_DRY_RUN": "1",
    }
    process = subprocess.run(["bash", str(RECIPES / "run_cpu.sh")], env=env, capture_output=True, text=True)
    assert process.returncode != 0
    assert "MODEL_PATH" in process.stderr and "fspo quickstart" in process.stderr


def test_cpu_recipe_defaults_to_the_quickstarts_smollm2(tmp_path):
    from fspo_testing.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "SmolLM2-135M-Instruct")  # the dry run checks the folder holds a model
    env = {key: value for key, value in os.environ.items() if key != "MODEL_PATH"}
    process = subprocess.run(
        ["bash", str(RECIPES / "run_cpu.sh")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "FSPO_CACHE": str(tmp_path), "FSPO_DRY_RUN": "1", "PYTHON": warm_python()},
    )
    assert printed_config(process)["actor_rollout_ref"]["model"]["path"] == str(model)


@pytest.mark.skipif(not (REPO / ".venv" / "bin" / "python").exists(), reason="no .venv (run scripts/setup.sh)")
def test_recipes_use_the_projects_venv_without_activating_it():
    # As the README runs it after scripts/setup.sh: no PYTHON, no venv on PATH.
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHON", "VIRTUAL_ENV")}
    env.update(PATH="/usr/bin:/bin", FSPO_DRY_RUN="1", **weights_env())
    process = subprocess.run(
        ["bash", str(RECIPES / "run_qwen2.5_7b_instruct.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    assert f"exec {REPO / '.venv' / 'bin' / 'python'} -m fspo.training.main" in process.stderr
    assert printed_config(process)["trainer"]["experiment_name"] == "fspo_qwen2.5_7b_instruct"


def run_merge(*args: str) -> subprocess.CompletedProcess:
    # Its interpreters (verl's merger, the checks on stdin) fork from one that imported verl once.
    env = {**os.environ, "PYTHON": warm_python()}
    return subprocess.run(["bash", str(MERGE), *args], env=env, capture_output=True, text=True, timeout=300)


def test_merge_usage_without_arguments():
    process = run_merge()
    assert process.returncode == 2
    assert "RUN_DIR [STEP]" in process.stderr


def test_merge_missing_run_dir(tmp_path):
    process = run_merge(str(tmp_path / "nope"))
    assert process.returncode == 1
    assert "does not exist" in process.stderr and "nope" in process.stderr


def test_merge_without_a_saved_checkpoint(tmp_path):
    process = run_merge(str(tmp_path))
    assert process.returncode == 1
    assert "latest_checkpointed_iteration.txt" in process.stderr


def test_merge_missing_step_lists_the_available_ones(tmp_path):
    for step in (2, 10):
        (tmp_path / f"global_step_{step}" / "actor").mkdir(parents=True)
    process = run_merge(str(tmp_path), "5")
    assert process.returncode == 1
    assert "no checkpoint for step 5" in process.stderr
    assert "2 10" in process.stderr


def test_merge_latest_step_pointing_at_a_missing_dir(tmp_path):
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("7\n")
    process = run_merge(str(tmp_path))
    assert process.returncode == 1
    assert "global_step_7/actor" in process.stderr


def test_merge_rejects_a_non_numeric_step_and_unknown_options(tmp_path):
    bad_step = run_merge(str(tmp_path), "latest")
    assert bad_step.returncode == 1 and "non-negative integer" in bad_step.stderr
    bad_option = run_merge("--output", str(tmp_path))
    assert bad_option.returncode == 2 and "unknown option --output" in bad_option.stderr


def test_merge_refuses_a_non_empty_target_it_did_not_create(tmp_path):
    (tmp_path / "global_step_1" / "actor").mkdir(parents=True)
    base_model = tmp_path / "base_model"
    base_model.mkdir()
    (base_model / "config.json").write_text('{"model_type": "qwen2"}')
    process = run_merge("--target-dir", str(base_model), str(tmp_path), "1")
    assert process.returncode == 1
    assert "config.json was not written by fspo" in process.stderr and str(base_model) in process.stderr
    assert [p.name for p in base_model.iterdir()] == ["config.json"]  # untouched


def fake_actor_checkpoint(run_dir, world_size: int = 1, ranks=(0,)):
    """global_step_1/actor as verl lays it out, with shards that are not torch files (the merger fails on them)."""
    actor = run_dir / "global_step_1" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (actor / "huggingface" / "config.json").write_text('{"model_type": "qwen2"}')
    (actor / "fsdp_config.json").write_text(f'{{"FSDP_version": 2, "world_size": {world_size}}}')
    for rank in ranks:
        (actor / f"model_world_size_{world_size}_rank_{rank}.pt").write_text("not a torch file")
    return actor


def test_merge_names_a_checkpoint_without_its_shards(tmp_path):
    (tmp_path / "global_step_1" / "actor").mkdir(parents=True)
    process = run_merge(str(tmp_path), "1")
    assert process.returncode == 1 and "no fsdp_config.json" in process.stderr
    assert "Traceback" not in process.stderr
    fake_actor_checkpoint(tmp_path, world_size=2, ranks=(0,))
    process = run_merge(str(tmp_path), "1")
    assert process.returncode == 1 and "lacks the model shards of rank(s) 1 of 2" in process.stderr


def test_merge_help_exits_0():
    process = run_merge("--help")
    assert process.returncode == 0 and "RUN_DIR [STEP]" in process.stdout and "--target-dir" in process.stdout


def test_a_failed_merge_leaves_nothing_behind(tmp_path):
    fake_actor_checkpoint(tmp_path)  # complete in layout, but its shard is not a torch file: the merger fails
    process = run_merge(str(tmp_path), "1")
    assert process.returncode != 0
    assert sorted(p.name for p in (tmp_path / "global_step_1").iterdir()) == ["actor"]  # no empty merged/
    empty_target = tmp_path / "empty_target"
    empty_target.mkdir()
    assert run_merge("--target-dir", str(empty_target), str(tmp_path), "1").returncode != 0
    assert empty_target.is_dir() and not any(empty_target.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty_target", "global_step_1"]


@pytest.fixture(scope="module")
def world_size_1_checkpoint(tmp_path_factory):
    """global_step_1/actor of a tiny Qwen2 as verl's FSDP saves it at world size 1 (plain tensors, one shard),
    which verl's real merger merges."""
    import torch
    from transformers import AutoModelForCausalLM

    from fspo_testing.tiny_model import build_tiny_model

    root = tmp_path_factory.mktemp("merge_run")
    model_dir = build_tiny_model(root / "model")
    actor = root / "run" / "global_step_1" / "actor"
    shutil.copytree(model_dir, actor / "huggingface", ignore=shutil.ignore_patterns("*.safetensors"))
    state = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    torch.save(state, actor / "model_world_size_1_rank_0.pt")
    (actor / "fsdp_config.json").write_text('{"FSDP_version": 2, "world_size": 1}')
    return root / "run"


def test_merge_into_a_used_target_keeps_the_users_files_and_follows_a_link(world_size_1_checkpoint, tmp_path):
    """fspo.utils.output_dir's rule in merge_checkpoint.sh: a merge into an earlier merge's folder replaces its own
    files (a stale shard of its own is deleted) and keeps the user's notes and adapter folder; a linked target is followed, not replaced by a folder;
    a user's config.json there is refused by name, before the merge, and left as it was."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "NOTES.md").write_text("mine")
    (real / "my_adapter").mkdir()
    (real / "my_adapter" / "adapter_config.json").write_text("{}")
    target = tmp_path / "linked"
    target.symlink_to(real)
    # An earlier merge's output, moved in by the same rule the script uses (one real merge is ~20 s): its
    # marker, and a shard this merge does not write.
    earlier = real / ".fspo-staging-earlier"
    earlier.mkdir()
    (earlier / ".fspo_merged_from").write_text("an earlier step")
    (earlier / "model-00002-of-00002.safetensors").write_text("stale")
    rule = [sys.executable, "-m", "fspo.utils.output_dir", "--flag=--target-dir", "--command=merge_checkpoint.sh"]
    subprocess.run([*rule, "install", str(earlier), str(target)], check=True)
    process = run_merge("--target-dir", str(target), str(world_size_1_checkpoint), "1")
    assert process.returncode == 0, process.stderr
    assert process.stdout.splitlines()[-1] == str(real.resolve())
    assert target.is_symlink() and (real / "NOTES.md").read_text() == "mine"
    assert not (real / "model-00002-of-00002.safetensors").exists()  # its own stale file: gone
    assert (real / "my_adapter" / "adapter_config.json").read_text() == "{}"
    assert (real / "config.json").is_file() and (real / ".fspo_merged_from").is_file()
    assert not [p for p in real.iterdir() if p.name.startswith(".fspo-staging")]
    base = tmp_path / "base_model"
    base.mkdir()
    (base / "config.json").write_text('{"model_type": "qwen2"}')
    process = run_merge("--target-dir", str(base), str(world_size_1_checkpoint), "1")
    assert process.returncode == 1 and process.stderr.count("\n") == 1
    assert "config.json was not written by fspo" in process.stderr and "merging" not in process.stderr
    assert [p.name for p in base.iterdir()] == ["config.json"]
