"""The verifier's runtime, without Ray: cancelled requests never computed, merged calls bounded, the run-level
guard against verifier loss, the GPU a server picks when Ray leaves CUDA_VISIBLE_DEVICES alone, broken devices."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fspo.coalesce import Coalescer, plan_chunks
from fspo.config.verifier import verifier_config
from fspo.config.vocabulary import ConfigError
from fspo.reward_extra_info import RolloutStats, step_metrics
from fspo.verifier_loss import VerifierLossError, VerifierLossGuard, failed_share
from fspo.verifiers.batching import device_broken
from fspo.verifiers.lexical import LexicalVerifier
from fspo.verifiers.model_base import MERGED_MICRO_BATCHES, ray_cuda_index

# --- the coalescer ---------------------------------------------------------------------------------


def test_a_request_cancelled_while_it_waits_is_never_computed():
    """The server's side of a client deadline: the cancelled request is dropped, not scored for nobody."""
    computed: list[list[int]] = []
    release = threading.Event()

    def batch_fn(_key, items):
        computed.append(list(items))
        if items == [0]:
            release.wait(10)  # the first call runs while the others queue behind it
        return items

    async def main():
        coalescer = Coalescer(batch_fn, window_s=0.0)
        first = asyncio.ensure_future(coalescer.submit([0]))
        while not computed:
            await asyncio.sleep(0.01)
        queued = [asyncio.ensure_future(coalescer.submit([i])) for i in (1, 2, 3)]
        await asyncio.sleep(0.05)
        queued[1].cancel()  # what Ray does to the server's task when the client cancels the request
        release.set()
        results = await asyncio.gather(first, *queued, return_exceptions=True)
        return coalescer, results

    coalescer, results = asyncio.run(main())
    assert [item for call in computed for item in call] == [0, 1, 3]
    assert coalescer.dropped_submissions == 1 and coalescer.computed_items == 3
    assert isinstance(results[2], asyncio.CancelledError)
    assert [results[i][0] for i in (0, 1, 3)] == [[0], [1], [3]]


def test_merged_calls_stay_within_the_cost_budget():
    calls: list[list[int]] = []

    async def main():
        coalescer = Coalescer(
            lambda _k, items: calls.append(list(items)) or items, window_s=0.02, max_cost=10, cost=float
        )
        return await asyncio.gather(*(coalescer.submit([i % 7, 1]) for i in range(40)))

    results = asyncio.run(main())
    assert [r for r, _ in results] == [[i % 7, 1] for i in range(40)]
    assert len(calls) > 1 and all(sum(call) <= 10 for call in calls)


@given(
    st.lists(st.tuples(st.integers(1, 9), st.integers(0, 50)), max_size=40),
    st.integers(0, 20),
    st.integers(0, 120),
)
def test_plan_chunks_keeps_order_and_bounds(submissions, max_items, max_cost):
    sizes = [size for size, _ in submissions]
    costs = [cost for _, cost in submissions]
    chunks = plan_chunks(sizes, costs, max_items, max_cost)
    assert [i for chunk in chunks for i in chunk] == list(range(len(submissions)))
    for chunk in chunks:
        assert chunk
        if len(chunk) > 1:  # a submission over a bound goes alone; merged ones stay within both bounds
            assert not max_items or sum(sizes[i] for i in chunk) <= max_items
            assert not max_cost or sum(costs[i] for i in chunk) <= max_cost
    if not max_items and not max_cost and submissions:
        assert len(chunks) == 1


def test_a_model_backend_merges_at_most_its_token_budget():
    from fspo.verifiers.embedding import EmbeddingVerifier

    verifier = EmbeddingVerifier(device="cpu", max_tokens_per_batch=256)
    assert verifier.merge_budget() == MERGED_MICRO_BATCHES * 256
    assert verifier.pair_cost(("a" * 400, "b" * 40)) == 110
    assert LexicalVerifier().merge_budget() > 0  # no backend merges without bound


# --- the run-level guard ---------------------------------------------------------------------------


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), max_size=30), st.integers(0, 4), st.floats(0, 1))
def test_the_guard_stops_exactly_after_enough_failing_updates_in_a_row(updates, max_steps, max_share):
    guard = VerifierLossGuard(max_share, max_steps)
    run = 0
    for failed, verified in updates:
        run = run + 1 if failed_share(failed, verified) > max_share else 0
        if max_steps and run >= max_steps:
            with pytest.raises(VerifierLossError, match="max_failed_share"):
                guard.observe(failed, verified)
            return
        guard.observe(failed, verified)


def test_the_guard_reads_the_update_metrics_and_names_the_cause():
    lost = [RolloutStats(has_evidence=1, steps=3, verifier_failed=1).as_info() for _ in range(6)]
    fine = [RolloutStats(has_evidence=1, steps=3, verified=1, labelled=1).as_info() for _ in range(2)]
    no_evidence = [RolloutStats().as_info() for _ in range(40)]  # not failures: nothing was sent
    metrics = step_metrics(lost + fine + no_evidence)
    assert metrics["fspo/verified_rollouts"] == 2 and metrics["fspo/verifier_failures"] == 6
    guard = VerifierLossGuard(0.1, 2)
    guard.observe_metrics(step_metrics(fine + no_evidence), step=1)
    guard.observe_metrics(metrics, step=2)
    with pytest.raises(
        VerifierLossError, match=r"failed 6 of 8 rollouts .* 2 actor update\(s\) in a row \(global step 3\)"
    ):
        guard.observe_metrics(metrics, step=3)


def test_verifier_runtime_options_are_checked():
    settings = verifier_config({"name": "lexical", "request_timeout_s": 30})
    assert settings.deadline_s == 60 and (settings.max_failed_share, settings.max_failed_steps) == (0.1, 2)
    assert verifier_config({"name": "lexical", "request_deadline_s": 5}).deadline_s == 5
    with pytest.raises(ConfigError, match="fspo.verifier.max_failed_share must be a number in"):
        verifier_config({"name": "lexical", "max_failed_share": 1.5})
    with pytest.raises(ConfigError, match="fspo.verifier.max_failed_steps must be a non-negative"):
        verifier_config({"name": "lexical", "max_failed_steps": -1})


# --- devices ---------------------------------------------------------------------------------------


@given(st.lists(st.integers(0, 15), min_size=1, max_size=8, unique=True), st.data())
def test_a_server_takes_the_gpu_ray_assigned_when_ray_leaves_cuda_visible_devices(visible, data):
    assigned = data.draw(st.sampled_from(visible))
    listed = ",".join(map(str, visible))
    assert ray_cuda_index([str(assigned)], listed) == visible.index(assigned)
    assert ray_cuda_index([str(assigned)], None) == assigned  # every GPU visible, numbered as Ray numbers them
    assert ray_cuda_index([], listed) is None
    assert ray_cuda_index(["99"], listed) is None


def test_only_a_broken_device_counts_as_broken():
    assert device_broken(torch.AcceleratorError("CUDA error: an illegal memory access was encountered"))
    assert device_broken(RuntimeError("CUDA error: device-side assert triggered"))
    assert not device_broken(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not device_broken(ValueError("3 marked pair(s) in a batch of 8"))
