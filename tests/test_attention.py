"""fspo.launch.attention: the actor's and the critic's attention implementation where flash-attn is not installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from fspo.config.vocabulary import ConfigError
from fspo.launch.attention import (
    ACTOR,
    CRITIC,
    FALLBACK_ATTENTION,
    FLASH_ATTENTION_MODULES,
    AttentionUnavailable,
    apply_attention_fallback,
    attention_fallback,
    importable,
)
from fspo_testing.warm_python import warm_python

REPO = Path(__file__).resolve().parent.parent


@given(
    requested=st.sampled_from([None, "flash_attention_2", "flash_attention_3", "sdpa", "eager"]),
    use_remove_padding=st.booleans(),
    ulysses_sp_size=st.integers(1, 8),
    device=st.sampled_from(["cuda", "cpu", "npu"]),
    installed=st.sets(st.sampled_from(sorted(FLASH_ATTENTION_MODULES.values()))),
    role=st.sampled_from([ACTOR, CRITIC]),
)
def test_the_fallback_leaves_flash_attention_only_where_it_cannot_run(
    requested, use_remove_padding, ulysses_sp_size, device, installed, role
):
    implementation = requested or "flash_attention_2"
    needed = FLASH_ATTENTION_MODULES.get(implementation)
    runs_as_configured = device != "cuda" or needed is None or needed in installed
    args = (requested, use_remove_padding, ulysses_sp_size, device, installed.__contains__, role)
    if runs_as_configured:
        assert attention_fallback(*args) is None
        return
    if requested is not None or ulysses_sp_size > 1:
        # Asked for flash by name, or sequence parallelism (flash-only in verl): no silent change.
        with pytest.raises(AttentionUnavailable) as error:
            attention_fallback(*args)
        assert isinstance(error.value, ConfigError)  # the driver's exit 2, one line
        assert "\n" not in str(error.value) and role.model.split(".")[0] in str(error.value)
        return
    fallback = attention_fallback(*args)
    assert fallback.overrides[role.attention_key] == FALLBACK_ATTENTION
    assert set(fallback.overrides) <= {role.attention_key, role.remove_padding_key}  # this model's keys only
    assert fallback.overrides.get(role.remove_padding_key, False) is False  # never turned on under sdpa
    assert (role.remove_padding_key in fallback.overrides) == use_remove_padding  # and not added when off
    assert "\n" not in fallback.warning and FALLBACK_ATTENTION in fallback.warning and role.name in fallback.warning
    assert ("use_remove_padding=false" in fallback.warning) == use_remove_padding


def test_importable_tells_a_missing_package_from_a_present_one():
    assert importable("json")
    assert not importable("fspo_no_such_package")


def test_the_fallback_reaches_verls_actor_through_the_interpolation():
    """verl's actor.use_remove_padding interpolates the model's: applied before resolving, both turn off."""
    if importable("flash_attn"):
        pytest.skip("flash-attn is installed: nothing falls back")
    config = OmegaConf.create(
        {
            "trainer": {"device": "cuda"},
            "actor_rollout_ref": {
                "model": {"use_remove_padding": True, "override_config": {}},
                "actor": {
                    "ulysses_sequence_parallel_size": 1,
                    "use_remove_padding": "${oc.select:actor_rollout_ref.model.use_remove_padding,false}",
                },
            },
        }
    )
    OmegaConf.set_struct(config, True)
    apply_attention_fallback(config)
    OmegaConf.resolve(config)
    assert config.actor_rollout_ref.model.override_config.attn_implementation == FALLBACK_ATTENTION
    assert config.actor_rollout_ref.model.use_remove_padding is False
    assert config.actor_rollout_ref.actor.use_remove_padding is False


def test_a_gpu_recipe_dry_run_without_flash_attn_says_so_in_one_line_and_runs_sdpa():
    if importable("flash_attn"):
        pytest.skip("flash-attn is installed: nothing falls back")
    # FSPO_PREFLIGHT=0: the weights check is not what this measures (tests/test_preflight.py is).
    env = {
        **os.environ,
        "FSPO_DRY_RUN": "1",
        "FSPO_PREFLIGHT": "0",
        "PYTHON": warm_python(),
        "MODEL_PATH": "/nonexistent/model",
    }
    process = subprocess.run(
        ["bash", str(REPO / "recipes" / "run_qwen2.5_7b_instruct.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    lines = [line for line in process.stderr.splitlines() if "flash-attn" in line]
    assert len(lines) == 1 and lines[0].startswith("fspo: flash-attn is not installed, so the actor"), lines
    config = yaml.safe_load("\n".join(line for line in process.stdout.splitlines() if not line.startswith("[")))
    model = config["actor_rollout_ref"]["model"]
    assert model["override_config"]["attn_implementation"] == FALLBACK_ATTENTION
    assert model["use_remove_padding"] is False
    assert config["actor_rollout_ref"]["actor"]["use_remove_padding"] is False


def test_a_gae_dry_run_without_flash_attn_runs_the_critic_on_sdpa_too(tmp_path):
    """The critic is an FSDP model of its own (critic.model), with verl's flash_attention_2 default."""
    if importable("flash_attn"):
        pytest.skip("flash-attn is installed: nothing falls back")
    from fspo_testing.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "model")  # verl reads the critic's config.json when it checks the critic
    env = {**os.environ, "FSPO_DRY_RUN": "1", "FSPO_PREFLIGHT": "0", "PYTHON": warm_python(), "MODEL_PATH": str(model)}
    process = subprocess.run(
        [
            "bash",
            str(REPO / "recipes" / "run_qwen2.5_7b_instruct.sh"),
            "algorithm.adv_estimator=gae",
            f"critic.model.path={model}",
            "critic.ppo_micro_batch_size_per_gpu=1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    lines = [line for line in process.stderr.splitlines() if "flash-attn" in line]
    assert len(lines) == 2, lines
    for line, role in zip(lines, (ACTOR, CRITIC)):
        assert line.startswith(
            f"fspo: flash-attn is not installed, so the {role.name} falls back to {role.attention_key}=sdpa"
        )
    config = yaml.safe_load("\n".join(line for line in process.stdout.splitlines() if not line.startswith("[")))
    for model in (config["actor_rollout_ref"]["model"], config["critic"]["model"]):
        assert model["override_config"]["attn_implementation"] == FALLBACK_ATTENTION
        assert model["use_remove_padding"] is False


# --- the decision is made for the GPU workers, not for a driver without a GPU ---------------------------------


@given(listed=st.sets(st.sampled_from(sorted(FLASH_ATTENTION_MODULES.values()))), use_remove_padding=st.booleans())
def test_what_the_gpu_nodes_answered_decides_the_fallback_not_this_machine(listed, use_remove_padding):
    """With FSPO_GPU_WORKER_IMPORTS set (fspo.training.main sets it from a GPU node of the cluster), whether flash-attn
    imports on this machine plays no part: a GPU-less head node does not switch GPU workers that have it to sdpa."""
    from unittest import mock

    from fspo.launch.attention import WORKER_IMPORTS_ENV

    with mock.patch.dict(os.environ, {WORKER_IMPORTS_ENV: ",".join(sorted(listed))}):
        fallback = attention_fallback(None, use_remove_padding, 1, "cuda")
    assert (fallback is None) == ("flash_attn" in listed)


RAY_PROBE = """
import os, sys
import ray
from fspo.launch.attention import importable, importable_on_a_gpu_node
modules = ("json", "only_on_the_gpu_workers", "not_anywhere")
ray.init(num_cpus=1, num_gpus=1, runtime_env={"env_vars": {"PYTHONPATH": sys.argv[1]}}, logging_level="ERROR")
print("driver", [name for name in modules if importable(name)])
print("gpu node", importable_on_a_gpu_node(modules, 120))
ray.shutdown()
"""


def test_the_flash_attn_check_runs_where_the_gpu_workers_run(tmp_path):
    """The check is a Ray task on a GPU of the cluster: a package that the workers' environment has and this
    driver's lacks is found (a one-node Ray with a logical GPU; the workers get a module the driver cannot see)."""
    workers_only = tmp_path / "workers_only"
    workers_only.mkdir()
    (workers_only / "only_on_the_gpu_workers.py").write_text("")
    script = tmp_path / "probe.py"
    script.write_text(RAY_PROBE)
    done = subprocess.run(
        [sys.executable, str(script), f"{workers_only}{os.pathsep}{REPO}"],
        env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "driver ['json']" in done.stdout
    assert "gpu node ['json', 'only_on_the_gpu_workers']" in done.stdout
