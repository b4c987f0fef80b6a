"""benchmarks/cpu_step_time.py's floor: the FLOP counts of each phase, against torch's own FLOP counter."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

_spec = importlib.util.spec_from_file_location(
    "cpu_step_time", Path(__file__).parents[1] / "benchmarks" / "cpu_step_time.py"
)
bench = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = bench  # its dataclasses look their module up
_spec.loader.exec_module(bench)

shapes = st.builds(
    lambda layers, kv_heads, group, head_dim, intermediate, vocab: bench.ModelShape(
        layers, kv_heads * group * head_dim, kv_heads * group, kv_heads, head_dim, intermediate, vocab
    ),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 3),
    st.sampled_from([2, 4, 8]),
    st.integers(1, 40),
    st.integers(2, 120),
)


@settings(max_examples=12, deadline=None)
@given(shape=shapes, length=st.integers(1, 12))
def test_a_forwards_flops_are_what_torch_counts_for_a_llama_of_that_shape(shape, length):
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        attn_implementation="eager",  # attention as matmuls the counter sees (sdpa's CPU kernel it does not)
    )
    assert bench.ModelShape.from_config(config) == shape
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(torch.randint(0, shape.vocab, (1, length)))
    counts = {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}
    assert counts["aten.mm"] == bench.layer_flops(shape, length, pairs=0) + bench.output_flops(shape, length)
    # Eager attention scores every (query, key) pair, masked ones too; rotary's position product is the rest.
    rotary = 2 * (shape.head_dim // 2) * length
    assert counts["aten.bmm"] - rotary == bench.layer_flops(shape, 0, pairs=length * length)


steps = st.builds(bench.StepLengths, st.integers(1, 8), st.integers(1, 8), st.integers(1, 400), st.integers(1, 200))


@settings(max_examples=50, deadline=None)
@given(shape=shapes, step=steps)
def test_generation_is_one_forward_per_distinct_prompt_and_one_position_per_later_token(shape, step):
    flops = bench.phase_flops(shape, step)
    prompt, response = step.prompt_tokens, step.response_tokens
    # One rollout per prompt: the prompt's forward and its decoding are one forward over the row but its last token.
    alone = bench.phase_flops(shape, bench.StepLengths(step.prompts, 1, prompt, response))["gen"][0]
    row = prompt + response - 1
    assert alone == bench.layer_flops(shape, step.prompts * row, step.prompts * bench.causal_pairs(row))
    # More rollouts of the same prompts add decoding only: the prefill is shared.
    prefill = bench.layer_flops(shape, step.prompts * prompt, step.prompts * bench.causal_pairs(prompt))
    assert flops["gen"][0] - prefill == step.rollouts_per_prompt * (alone - prefill)
    # Logits: one at each prompt's end, then one per decoded token.
    assert flops["gen"][1] == bench.output_flops(shape, step.prompts + step.rollouts * (response - 1))
    # The update is the log-prob forward and its backward (twice the forward).
    assert flops["update_actor"] == tuple(3 * value for value in flops["old_log_prob"])
    assert flops["old_log_prob"][1] == bench.output_flops(shape, step.rollouts * response)


def test_the_floor_table_reads_a_runs_metrics_and_config():
    records = [
        {"step": 0, "data": {"val-core/acc": 0.1}},
        *(
            {
                "step": i,
                "data": {
                    "timing_s/step": 9.0,
                    "timing_s/gen": 4.0,
                    "timing_s/old_log_prob": 2.0,
                    "timing_s/update_actor": 3.0,
                    "prompt_length/mean": 200.0 + i,
                    "response_length/mean": 40.0,
                },
            }
            for i in (1, 2)
        ),
    ]
    config = {"data": {"train_batch_size": 2}, "actor_rollout_ref": {"rollout": {"n": 4}, "actor": {"ppo_epochs": 1}}}
    assert bench.run_lengths(records, config) == bench.StepLengths(2, 4, 202, 40)
    floors = bench.floor_seconds(
        {"gen": (1e9, 0.0), "old_log_prob": (2e9, 1e9), "update_actor": (6e9, 3e9)},
        (1e9, 0.5e9),
        decode_bytes=8e9,
        bytes_per_s=2e9,
        weight_bytes=1e9,
    )
    assert floors == {"gen": 4.0, "old_log_prob": 4.0, "update_actor": 12.0, "update_weights": 0.5}
    timings = {"gen": 8.0, "old_log_prob": 4.0, "update_actor": 48.0, "update_weights": 1.0, "step": 82.0}
    table = bench.floor_table(timings, floors)
    assert [line.split()[-1] for line in table[1:]] == ["50%", "100%", "25%", "50%", "25%"]
    # The old-policy pass the rollout's log-probs replaced (bypass_mode): not run, and not in the step's floor.
    bypassed = bench.floor_table({**timings, "old_log_prob": 0.01, "step": 78.0}, floors)
    assert bypassed[2].split()[-2:] == ["not", "run"]
    assert bypassed[-1].split()[-2:] == ["16.50", "21%"]
