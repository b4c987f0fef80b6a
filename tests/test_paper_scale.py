"""benchmarks/paper_scale.py's cost model: the step's phases and the verifier's share add up (no dry run, seconds)."""

from __future__ import annotations

import importlib.util
import math
from argparse import Namespace
from pathlib import Path

import pytest

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


def test_the_step_is_its_phases_and_the_share_is_verifier_over_step_plus_verifier(capsys):
    rows = paper_scale.price("run_qwen2.5_7b_base.sh", SCALE, EVIDENCE, DENSITY, ARGS, 540.0, 165_000.0, "assumed")
    step = paper_scale.step_seconds(SCALE, "Qwen2.5-7B", 200, 2048)
    assert step["step"] == pytest.approx(step["rollout"] + step["log_probs"] + step["update"])
    assert step["update"] == pytest.approx(2 * step["log_probs"])  # 4 forwards against 2
    # Between the cited bounds: vLLM decodes a 7B model at thousands of tokens/s per H100, not 100s or 100ks.
    assert 3_000 < step["decode_tokens_per_s_per_gpu"] < 40_000
    for row in rows:
        for bound in ("low", "high"):
            figures = row[bound]
            assert figures["verifier"] == figures["colocated"]  # the recipe's placement
            assert figures["share"] == pytest.approx(figures["verifier"] / (figures["step"] + figures["verifier"]))
        assert row["low"]["share"] < row["high"]["share"]  # more steps per response, more verifying
    out = capsys.readouterr().out
    assert f"= {rows[0]['low']['share']:.1%}" in out


def test_lora_skips_the_frozen_gradients_and_one_gpu_decodes_in_waves():
    lora = {**SCALE, "nnodes": 1, "gpus_per_node": 1, "prompts": 32, "rollout_tp": 1, "lora_rank": 64}
    lora["gpu_memory_utilization"] = 0.5
    full = paper_scale.step_seconds({**lora, "lora_rank": 0}, "Qwen3-4B", 200, 4096)
    adapted = paper_scale.step_seconds(lora, "Qwen3-4B", 200, 4096)
    assert adapted["update"] == pytest.approx(0.75 * full["update"])
    assert adapted["in_flight"] < 256  # 256 rollouts of 4k tokens do not fit one GPU's KV cache at once
    assert math.isfinite(adapted["step"]) and adapted["step"] > adapted["rollout"] > 0
