"""benchmarks/hhem_gpu_rate.py: the verifier's micro-batches as fspo plans them, the decode stand-in's attention,
and the rates read off timed chunks (CPU, seconds; the GPU run itself is the benchmark's)."""

from __future__ import annotations

import importlib.util
import inspect
from argparse import Namespace
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.verifiers import hhem
from fspo.verifiers.batching import plan_micro_batches
from fspo.verifiers.model_base import DTYPES, VERIFIER_ACTIVATION_BYTES, ModelVerifier, attention_cells

_spec = importlib.util.spec_from_file_location(
    "hhem_gpu_rate", Path(__file__).parents[1] / "benchmarks" / "hhem_gpu_rate.py"
)
rate = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rate)


def test_the_mirrored_verifier_constants_are_fspos():
    """The benchmark runs without verl, so it mirrors these; they must stay the verifier's."""
    default = inspect.signature(ModelVerifier.__init__).parameters["max_tokens_per_batch"].default
    assert rate.MAX_TOKENS_PER_BATCH == default
    assert rate.VERIFIER_ACTIVATION_BYTES == VERIFIER_ACTIVATION_BYTES
    assert rate.HHEM_HEADS == hhem.HHEM_HEADS
    assert rate.ATTENTION_TENSORS == inspect.signature(attention_cells).parameters["tensors"].default
    assert set(rate.DTYPES) <= set(DTYPES)


@settings(max_examples=60, deadline=None)
@given(row_tokens=st.integers(1, 4096), dtype=st.sampled_from(["float32", "tf32", "bfloat16"]))
def test_verifier_rows_is_the_first_micro_batch_the_hhem_verifier_plans(row_tokens, dtype):
    cells = attention_cells(VERIFIER_ACTIVATION_BYTES, hhem.HHEM_HEADS, DTYPES[dtype])
    rows = rate.verifier_rows(row_tokens, dtype)
    plan = plan_micro_batches([row_tokens] * (rows + 1), rate.MAX_TOKENS_PER_BATCH, cells)
    assert len(plan[0]) == rows


chunk = st.tuples(st.floats(0, 100), st.floats(0.01, 5), st.integers(0, 1000)).map(lambda c: (c[0], c[0] + c[1], c[2]))


@given(chunks=st.lists(chunk, max_size=20), start=st.floats(0, 100), length=st.floats(0, 100))
def test_window_rate_counts_only_the_chunks_wholly_inside_the_window(chunks, start, length):
    end = start + length
    inside = [c for c in chunks if c[0] >= start and c[1] <= end]
    got = rate.window_rate(chunks, start, end)
    if not inside:
        assert got is None
    else:
        assert got == pytest.approx(sum(c[2] for c in inside) / sum(c[1] - c[0] for c in inside))


@settings(max_examples=25, deadline=None)
@given(kv_heads=st.integers(1, 3), group=st.integers(1, 4), batch=st.integers(1, 3), context=st.integers(1, 9))
def test_the_decode_stand_in_attends_as_grouped_query_attention(kv_heads, group, batch, context):
    """Each KV head's query heads, attended as that head's query rows, equal per-head attention with the KV heads
    repeated (Qwen2's grouped-query attention)."""
    model = rate.Model(0.0, 1, 8, 8, 16, kv_heads * group, kv_heads, 4)
    rank = rate.DecodeRank(model, 1, batch, context, torch.device("cpu"), torch.float32)
    q = torch.randn(batch, kv_heads * group * 4)
    k, v = torch.randn(batch, kv_heads, context, 4), torch.randn(batch, kv_heads, context, 4)
    per_head = torch.nn.functional.scaled_dot_product_attention(
        q.view(batch, kv_heads * group, 1, 4), k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    )
    assert torch.allclose(rank.attend(q, k, v), per_head.reshape(batch, -1), atol=1e-5)


def test_a_decode_step_writes_its_keys_at_the_position_and_moves_on():
    rank = rate.DecodeRank(rate.TINY_DECODER, 2, 3, 4, torch.device("cpu"), torch.float32)
    before = rank.layers[0]["k"].clone()
    for _ in range(5):  # one past the context: the position wraps
        rank.step()
    assert int(rank.position) == 5 % 4
    changed = (rank.layers[0]["k"] != before).any(dim=-1)  # (batch, kv_heads, context)
    assert changed.all()  # every slot written once
    assert int(rank.tokens.max()) < rate.TINY_DECODER.vocab // 2  # the rank's vocabulary shard


def test_the_rates_are_read_off_the_chunks_of_each_phase():
    args = Namespace(batch=8, tp=2, tiny=True, row_tokens=10, model="Qwen2.5-7B", context=4)
    alone = {"cells": [{"dtype": "tf32", "rows": 4, "chunks": [(0.0, 1.0, 40), (1.0, 2.0, 40)]}]}
    alone |= {"peak_gb": None, "attention": "eager"}
    beside = {"cells": [{"dtype": "tf32", "rows": 4, "chunks": [(20.0, 22.0, 40)]}]}
    # 100 steps a second alone (0-10 s), 50 beside the verifier (20-22 s); 4 tokens per GPU a step (8 over TP 2).
    steps = [(t, t + 1.0, 100) for t in range(10)] + [(20.0, 21.0, 50), (21.0, 22.0, 50)]
    decoded = {"chunks": steps, "how": "eager", "bytes_per_step": 1e9, "weight_gb": 0.5, "kv_gb": 0.5}
    decoded["peak_gb"] = None
    results = rate.summarize(args, alone, beside, decoded, (0.0, 10.0), (19.0, 23.0))
    assert results["alone"] == [{"dtype": "tf32", "rows": 4, "tokens_per_s": 40.0}]
    assert results["beside"][0]["tokens_per_s"] == 20.0
    assert results["decoder"]["tokens_per_s_per_gpu_alone"] == 400.0
    assert results["beside"][0]["decoder_tokens_per_s_per_gpu"] == 200.0
    assert results["decoder"]["hbm_gb_per_s_alone"] == 100.0  # 100 steps/s x 1 GB
    assert "| tf32 | 4 | 40 | 20 | 50% | 200 | 50% |" in rate.table(results)


def test_without_a_gpu_it_says_so_in_one_line(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here")
    with pytest.raises(SystemExit, match="no CUDA GPU here; --tiny runs it"):
        rate.main(["--out", str(tmp_path)])
    assert not any(tmp_path.iterdir())
