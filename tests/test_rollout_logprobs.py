"""Old-policy log-probs from the rollout (verl 0.9.1's algorithm.rollout_correction.bypass_mode) where they are the
actor's numbers: float32 runs of the quickstart and recipes/run_cpu.sh."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fspo.cpu.compute import register_dtype_resolver, rollout_logprobs_exact
from fspo.quickstart.cli import run_overrides

BYPASS_KEYS = ("actor_rollout_ref.rollout.calculate_log_probs", "algorithm.rollout_correction.bypass_mode")


def test_only_float32_log_probs_stand_for_the_old_policy_pass():
    # The tolerance in float32 is held by tests/test_cpu_backend.py (rollout vs one forward, atol 1e-4).
    assert rollout_logprobs_exact("float32") and rollout_logprobs_exact("fp32")
    assert not rollout_logprobs_exact("bfloat16") and not rollout_logprobs_exact("float16")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_quickstart_takes_the_rollouts_log_probs_as_the_old_policys_in_float32_only(dtype, tmp_path):
    # verl 0.9.1 copies rollout_log_probs into old_log_probs instead of the actor's forward when bypass_mode is on
    # (verl/trainer/ppo/v1/trainer_base.py:1640-1649) and then skips the rollout correction (:1765-1771); the
    # rollout returns log-probs only with calculate_log_probs (v1/agent_loop_tq.py:69).
    register_dtype_resolver()
    setup = {"model": "m", "train": "t", "val": "v"}
    chosen = [item for item in run_overrides(setup, tmp_path, 2) if item.split("=")[0] in BYPASS_KEYS]
    config = OmegaConf.from_dotlist([*chosen, f"actor_rollout_ref.rollout.dtype={dtype}"])
    values = [OmegaConf.select(config, key) for key in BYPASS_KEYS]
    assert values == [dtype == "float32"] * 2


def test_run_cpu_sh_ties_both_settings_to_the_same_check():
    text = (Path(__file__).resolve().parents[1] / "recipes" / "run_cpu.sh").read_text()
    for key in BYPASS_KEYS:
        assert f"{key}='${{fspo_exact_rollout_logprobs:actor_rollout_ref.rollout.dtype}}'" in text
