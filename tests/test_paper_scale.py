"""benchmarks/paper_scale.py's cost model: the step's phases and the verifier's share add up (no dry run, seconds)."""

from __future__ import annotations

import importlib.util
import math
from argparse import Namespace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

_spec = importlib.util.spec_from_file_location(
    "paper_scale", Path(__file__).parents[1] / "benchmarks" / "paper_scale.py"
)
paper_scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(paper_scale)

# An 8-GPU recipe's sizes as recipe_scale reads them from a dry run (run_qwen2.5_7b_base.sh's).
SCALE = {
    "prompts": 128,
    "n": 8,
    "response_tokens": 2048,
    "nnodes": 1,
    "gpus_per_node": 8,
    "reward_workers": 8,
    "placement": "colocated",
    "top_k": None,
    "rollout_tp": 2,
    "gpu_memory_utilization": 0.6,
    "lora_rank": 0,
    "ppo_epochs": 1,
    "request_timeout_s": 300.0,
}
ARGS = Namespace(
    response_tokens=None, step_tokens=None, pair_tokens=350, max_row_tokens=512, top_k=3, prompt_tokens=200
)
EVIDENCE = {"rows": 100, "share": 1.0, "tokens": 78.0, "top_k_tokens": 76.0}
DENSITY = {"low": 33.7, "high": 50.8, "step_tokens": 25.0}


def test_the_step_is_its_phases_and_the_share_is_bounded_by_the_ends_of_every_assumption(capsys):
    rates = paper_scale.ASSUMPTIONS["gpu_tokens_per_s"]
    rows = paper_scale.price("run_qwen2.5_7b_base.sh", SCALE, EVIDENCE, DENSITY, ARGS, 540.0, rates, False)
    slow, fast = (paper_scale.step_seconds(SCALE, "Qwen2.5-7B", 200, 2048, end) for end in (0, 1))
    for step in (slow, fast):
        assert step["step"] == pytest.approx(step["rollout"] + step["log_probs"] + step["update"] + step["sync"])
        assert step["update"] == pytest.approx(2 * step["log_probs"])  # 4 forwards against 2
        assert step["sync"] > 0  # weight sync and vLLM's sleep/wake are in the step
        # Between the cited figures: vLLM decodes a 7B model at thousands of tokens/s per H100.
        assert 3_000 < step["decode_tokens_per_s_per_gpu"] < 40_000
    assert slow["step"] > fast["step"] and slow["sync"] > fast["sync"]
    for row in rows:
        low, high = row["low"], row["high"]
        for figures in (low, high):
            assert figures["verifier"] == figures["colocated"]  # the recipe's placement
            assert figures["share"] == pytest.approx(figures["verifier"] / (figures["step"] + figures["verifier"]))
        # The low end pairs the least verifying at the fastest rate with the slowest step; the high end the reverse.
        assert (low["step"], high["step"]) == (slow["step"], fast["step"])
        assert low["tokens"] < high["tokens"] and low["verifier"] < high["verifier"] and low["share"] < high["share"]
    whole = rows[0]
    assert whole["low"]["evidence_tokens"] == EVIDENCE["tokens"]  # measured (HaluEval: errs short)
    assert whole["high"]["evidence_tokens"] == paper_scale.ASSUMPTIONS["evidence_tokens"][1]  # assumed long
    out = capsys.readouterr().out
    assert f"= {rows[0]['low']['share']:.1%}" in out and f"= {rows[0]['high']['share']:.1%}" in out


def test_the_recipes_own_data_replaces_the_evidence_bounds_and_one_measured_rate_narrows_the_share():
    measured = paper_scale.price("run_qwen2.5_7b_base.sh", SCALE, EVIDENCE, DENSITY, ARGS, 540.0, (1e5, 1e5), True)
    bounded = paper_scale.price("run_qwen2.5_7b_base.sh", SCALE, EVIDENCE, DENSITY, ARGS, 540.0, (3e5, 3e4), False)
    for row in measured:
        assert row["low"]["evidence_tokens"] == row["high"]["evidence_tokens"]
    for narrow, wide in zip(measured, bounded):
        assert wide["low"]["share"] < narrow["low"]["share"] < narrow["high"]["share"] < wide["high"]["share"]


def test_every_assumption_has_two_ends_on_the_sides_it_names():
    """Each assumption's low-share value makes the step slower or the verifier faster than its high-share value."""
    ends = paper_scale.ASSUMPTIONS
    assert ends["gpu_tokens_per_s"][0] > ends["gpu_tokens_per_s"][1]  # a faster verifier: a smaller share
    assert ends["train_mfu"][0] < ends["train_mfu"][1]  # a slower step: a smaller share
    assert ends["decode_bandwidth_efficiency"][0] < ends["decode_bandwidth_efficiency"][1]
    assert ends["sync_gb_per_s"][0] < ends["sync_gb_per_s"][1] and ends["host_gb_per_s"][0] < ends["host_gb_per_s"][1]
    assert ends["sleep_wake_s"][0] > ends["sleep_wake_s"][1]
    assert ends["evidence_tokens"][1] > EVIDENCE["tokens"]


def test_lora_skips_the_frozen_gradients_and_one_gpu_decodes_in_waves():
    lora = {**SCALE, "nnodes": 1, "gpus_per_node": 1, "prompts": 32, "rollout_tp": 1, "lora_rank": 64}
    lora["gpu_memory_utilization"] = 0.5
    full = paper_scale.step_seconds({**lora, "lora_rank": 0}, "Qwen3-4B", 200, 4096)
    adapted = paper_scale.step_seconds(lora, "Qwen3-4B", 200, 4096)
    assert adapted["update"] == pytest.approx(0.75 * full["update"])
    assert adapted["in_flight"] < 256  # 256 rollouts of 4k tokens do not fit one GPU's KV cache at once
    assert math.isfinite(adapted["step"]) and adapted["step"] > adapted["rollout"] > 0


@given(st.integers(0, 2_000), st.integers(-1, 300), st.booleans())
def test_validations_per_run_follow_verls_rule(steps, test_freq, before_training):
    """Before training when asked, then after each step that is a multiple of test_freq or the last
    (verl/trainer/ppo/v1/trainer_base.py:439, 491-492), counted step by step."""
    after = sum(1 for step in range(1, steps + 1) if test_freq > 0 and (step == steps or step % test_freq == 0))
    assert paper_scale.validations_per_run(steps, test_freq, before_training) == int(before_training) + after


def test_the_one_gpu_recipe_validates_41_times_a_run_and_500_rows_cost_a_quarter_of_the_split():
    """run_qwen3_4b_lora_1gpu.sh's sizes: 3 epochs of 10,500 rows in batches of 32 are 984 steps; validated before
    training, every 25 steps and at the last."""
    lora = {**SCALE, "gpus_per_node": 1, "prompts": 32, "rollout_tp": 1, "lora_rank": 64, "gpu_memory_utilization": 0.5}
    lora.update(val_n=1, test_freq=25, val_before_train=True, total_epochs=3, total_training_steps=None)
    subset, whole = (paper_scale.validation_cost(lora, "Qwen3-4B", 200, 4096, rows, 10_500, 0) for rows in (500, 2000))
    assert subset["steps"] == 984 and subset["validations"] == whole["validations"] == 41
    assert subset["run"] == pytest.approx(41 * subset["each"])
    # One GPU decodes 4k-token validations in waves of what its KV cache holds: the time grows with the rows.
    assert whole["each"] == pytest.approx(4 * subset["each"], rel=0.1)
    assert subset["share"] == pytest.approx(subset["run"] / (subset["run"] + subset["training"]))
    assert 0 < subset["share"] < whole["share"] < 1
