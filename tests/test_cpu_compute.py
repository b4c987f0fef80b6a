"""The CPU preset's compute dtype and threads (fspo.cpu.compute), and how the preset carries them."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from fspo.cpu.allocator import jemalloc_path
from fspo.cpu.compute import (
    BFLOAT16,
    FLOAT32,
    CPUFeatures,
    choose_compute_dtype,
    compute_dtype_choice,
    cpu_threads,
)
from fspo_testing.warm_python import warm_python


def features(capability, machine="x86_64", avx512_bf16=False, amx=False, arm_bf16=False):
    return CPUFeatures(capability, machine, avx512_bf16=avx512_bf16, amx=amx, arm_bf16=arm_bf16)


@pytest.mark.parametrize(
    "cpu, expected",
    [
        (features("AVX2"), FLOAT32),  # AMD Zen 2/3, Intel Haswell..Comet Lake: the reference bf16 kernel
        (features("AVX512"), FLOAT32),  # Skylake-SP, Cascade Lake: bf16 only by conversion
        (features("AVX512", avx512_bf16=True), BFLOAT16),  # Cooper Lake, AMD Zen 4/5
        (features("AVX512", avx512_bf16=True, amx=True), BFLOAT16),  # Sapphire Rapids and later
        (features("AVX512", amx=True), BFLOAT16),
        (features("DEFAULT"), FLOAT32),
        (features("NO AVX"), FLOAT32),
        (features("SVE256", machine="aarch64", arm_bf16=True), BFLOAT16),  # Graviton 3, Grace
        (features("DEFAULT", machine="aarch64"), FLOAT32),
    ],
)
def test_bf16_only_where_the_processor_has_bf16_instructions(cpu, expected):
    choice = choose_compute_dtype(cpu)
    assert choice.dtype == expected
    assert cpu.capability in choice.reason


def test_this_machine_is_detected_and_explained():
    detected = CPUFeatures.detect()
    import torch

    assert detected.capability == torch.backends.cpu.get_cpu_capability()
    assert choose_compute_dtype(detected).dtype in (FLOAT32, BFLOAT16)


@pytest.fixture
def fresh_choice():
    compute_dtype_choice.cache_clear()
    yield
    compute_dtype_choice.cache_clear()


def test_the_environment_overrides_the_choice(monkeypatch, fresh_choice):
    monkeypatch.setenv("FSPO_CPU_DTYPE", "BFloat16")
    assert compute_dtype_choice().dtype == BFLOAT16
    compute_dtype_choice.cache_clear()
    monkeypatch.setenv("FSPO_CPU_DTYPE", "fp8")
    with pytest.raises(ValueError, match="environment variable FSPO_CPU_DTYPE must be float32 or bfloat16, got 'fp8'"):
        compute_dtype_choice()


def test_threads_are_the_cores_this_process_may_use(monkeypatch):
    monkeypatch.delenv("FSPO_CPU_THREADS", raising=False)
    assert cpu_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("FSPO_CPU_THREADS", "3")
    assert cpu_threads() == 3
    monkeypatch.setenv("FSPO_CPU_THREADS", "0")
    with pytest.raises(ValueError, match=r"FSPO_CPU_THREADS must be an integer in \[1, 4096\], got '0'"):
        cpu_threads()


def test_the_cpu_preset_gives_every_fsdp_worker_and_the_rollout_the_choice(tmp_path):
    """The dry run of a CPU run: actor, ref and critic compute in the chosen dtype, the rollout loads it."""
    # FSPO_PREFLIGHT=0: the weights check is not what this measures (tests/test_preflight.py is).
    env = {**os.environ, "FSPO_DRY_RUN": "1", "FSPO_PREFLIGHT": "0", "FSPO_CPU_DTYPE": BFLOAT16}
    result = subprocess.run(
        [warm_python(), "-m", "fspo.training.main", f"actor_rollout_ref.model.path={tmp_path}", "platform=cpu"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"fspo: CPU compute dtype {BFLOAT16} (set by FSPO_CPU_DTYPE); " in result.stderr
    printed = result.stdout[result.stdout.index("actor_rollout_ref:") :]
    config = yaml.safe_load(printed)
    actor_rollout_ref = config["actor_rollout_ref"]
    assert actor_rollout_ref["actor"]["fsdp_config"]["mixed_precision"]["param_dtype"] == BFLOAT16
    assert actor_rollout_ref["ref"]["fsdp_config"]["mixed_precision"]["param_dtype"] == BFLOAT16
    assert config["critic"]["fsdp"]["mixed_precision"]["param_dtype"] == BFLOAT16
    assert actor_rollout_ref["rollout"]["dtype"] == BFLOAT16
    # ... and its Ray workers allocate with jemalloc (fspo.cpu.allocator; tests/test_cpu_allocator.py).
    worker_env = config["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert worker_env["LD_PRELOAD"].split()[0] == jemalloc_path() and worker_env["MALLOC_CONF"]


@pytest.mark.parametrize(
    "cpu_choice, asked, computed",
    [
        (FLOAT32, "bfloat16", FLOAT32),
        (FLOAT32, "float16", FLOAT32),
        (FLOAT32, "float32", FLOAT32),
        (BFLOAT16, "bfloat16", BFLOAT16),
    ],
)
def test_a_model_verifier_on_cpu_computes_in_half_precision_only_where_it_is_fast(
    monkeypatch, fresh_choice, caplog, cpu_choice, asked, computed
):
    import torch

    from fspo.verifiers.model_base import resolve_dtype

    monkeypatch.setenv("FSPO_CPU_DTYPE", cpu_choice)
    assert resolve_dtype(asked, torch.device("cpu")) == getattr(torch, computed)
    assert ("computing in float32" in caplog.text) == (asked != computed)
    assert resolve_dtype(asked, torch.device("cuda")) == getattr(torch, asked)  # a GPU gets what was asked
