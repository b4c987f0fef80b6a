"""The verifier's runtime, without Ray: cancelled requests never computed, merged calls bounded, the run-level
guard against verifier loss, the GPU a server picks when Ray leaves CUDA_VISIBLE_DEVICES alone, broken devices."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fspo.config.verifier import verifier_config
from fspo.config.vocabulary import ConfigError
from fspo.training.reward_extra_info import RolloutStats, step_metrics
from fspo.training.verifier_loss import VerifierLossError, VerifierLossGuard, failed_share
from fspo.utils.coalesce import Coalescer, plan_chunks
from fspo.verifiers.batching import ErrorKind, classify_error, device_broken, is_out_of_memory
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


# One update: rollouts whose request failed, rollouts verified, and the share of their steps failed alone.
_UPDATES = st.tuples(st.integers(0, 20), st.integers(0, 20), st.floats(0, 1))


@given(st.lists(_UPDATES, max_size=30), st.integers(0, 4), st.floats(0, 1))
def test_the_guard_stops_exactly_after_enough_failing_updates_in_a_row(updates, max_steps, max_share):
    guard = VerifierLossGuard(max_share, max_steps)
    run = 0
    for failed, verified, part in updates:
        failed_in_verified = part * verified
        share = failed_share(failed, verified, failed_in_verified)
        assert 0 <= share <= 1
        run = run + 1 if share > max_share else 0
        if max_steps and run >= max_steps:
            with pytest.raises(VerifierLossError, match="max_failed_share"):
                guard.observe(failed, verified, failed_in_verified=failed_in_verified)
            return
        guard.observe(failed, verified, failed_in_verified=failed_in_verified)


@given(st.integers(1, 20), st.integers(0, 20), st.floats(0, 1))
def test_a_step_failed_alone_weighs_its_share_of_a_rollout(verified, failed, part):
    """Verified rollouts whose steps failed in part add that part: all of them failed weigh as failed requests."""
    assert failed_share(failed, verified, part * verified) >= failed_share(failed, verified)
    assert failed_share(failed, verified, verified) == failed_share(failed + verified, 0) == 1


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


# torch's wording of each failure. c10_cuda_check_implementation (pytorch/pytorch c10/cuda/CUDAException.cpp):
# "CUDA error: " + cudaGetErrorString + the suffix below, raised as torch.AcceleratorError (torch >= 2.8).
# TORCH_CUDABLAS_CHECK (aten/src/ATen/cuda/Exceptions.h): "CUDA error: <status> when calling `<expr>`", a
# RuntimeError. AT_CUDNN_CHECK: "cuDNN error: <status>". The caching allocator: torch.OutOfMemoryError.
CUDA_CHECK_SUFFIX = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
    "be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to "
    "enable device-side assertions.\n"
)


def cuda_check(runtime_message: str) -> BaseException:
    return torch.AcceleratorError(f"CUDA error: {runtime_message}{CUDA_CHECK_SUFFIX}")


def cublas_check(status: str, call: str = "cublasGemmEx( handle, opa, opb, m, n, k, ...)") -> BaseException:
    return RuntimeError(f"CUDA error: {status} when calling `{call}`")


ERRORS = [
    (
        torch.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which "
            "1.06 GiB is free. Including non-PyTorch memory, this process has 5.88 GiB memory in use. Of the "
            "allocated memory 4.12 GiB is allocated by PyTorch, and 1.25 GiB is reserved by PyTorch but unallocated."
        ),
        ErrorKind.OUT_OF_MEMORY,
    ),
    (cuda_check("out of memory"), ErrorKind.OUT_OF_MEMORY),
    (cublas_check("CUBLAS_STATUS_ALLOC_FAILED", "cublasCreate(handle)"), ErrorKind.OUT_OF_MEMORY),
    (cublas_check("CUBLAS_STATUS_NOT_INITIALIZED", "cublasCreate(handle)"), ErrorKind.OUT_OF_MEMORY),
    (RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), ErrorKind.OUT_OF_MEMORY),
    (
        RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4611686018427387904 bytes."),
        ErrorKind.OUT_OF_MEMORY,
    ),
    (cuda_check("an illegal memory access was encountered"), ErrorKind.DEVICE_BROKEN),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), ErrorKind.DEVICE_BROKEN),  # torch < 2.8
    (cuda_check("device-side assert triggered"), ErrorKind.DEVICE_BROKEN),
    (cuda_check("unspecified launch failure"), ErrorKind.DEVICE_BROKEN),
    (cuda_check("misaligned address"), ErrorKind.DEVICE_BROKEN),
    (cuda_check("uncorrectable ECC error encountered"), ErrorKind.DEVICE_BROKEN),
    (RuntimeError("Triton Error [CUDA]: an illegal memory access was encountered"), ErrorKind.DEVICE_BROKEN),
    (cublas_check("CUBLAS_STATUS_EXECUTION_FAILED"), ErrorKind.DEVICE_BROKEN),
    (RuntimeError("cuDNN error: CUDNN_STATUS_EXECUTION_FAILED"), ErrorKind.DEVICE_BROKEN),
    # Not sticky: the same call fails again in a fresh process; the run-level guard sees it if it persists.
    (cuda_check("invalid configuration argument"), ErrorKind.OTHER),
    (cuda_check("invalid argument"), ErrorKind.OTHER),
    (cublas_check("CUBLAS_STATUS_INVALID_VALUE"), ErrorKind.OTHER),
    (cublas_check("CUBLAS_STATUS_NOT_SUPPORTED"), ErrorKind.OTHER),
    (ValueError("3 marked pair(s) in a batch of 8"), ErrorKind.OTHER),
    (
        RuntimeError("The size of tensor a (512) must match the size of tensor b (600) at non-singleton dimension 1"),
        ErrorKind.OTHER,
    ),
]


def _case_id(value) -> str | None:
    return str(value).splitlines()[0][:50] if isinstance(value, BaseException) else None


@pytest.mark.parametrize(("error", "kind"), ERRORS, ids=_case_id)
def test_each_failure_is_classified_by_what_it_says_about_the_process(error, kind):
    """Only a lost CUDA context restarts a server: an allocation failure (cuBLAS's ALLOC_FAILED included) would
    meet the same full GPU in a fresh process, so it is an out-of-memory call (halved, then its rows fail)."""
    assert classify_error(error) is kind
    assert device_broken(error) == (kind is ErrorKind.DEVICE_BROKEN)
    assert is_out_of_memory(error) == (kind is ErrorKind.OUT_OF_MEMORY)


# Words that name no failure: lower-case letters, digits and punctuation only.
_PLAIN_WORDS = st.text(alphabet=st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789 .:()"), max_size=40)


@given(st.sampled_from(ERRORS), _PLAIN_WORDS, _PLAIN_WORDS, st.sampled_from([RuntimeError, torch.AcceleratorError]))
def test_the_class_of_a_failure_survives_the_words_around_it(case, before, after, error_type):
    """A failure re-raised inside another message and type (a backend's, a library's) is classed the same, and an
    allocation failure stays one whatever else its message names."""
    error, kind = case
    assert classify_error(error_type(f"{before} {error} {after}")) is kind
    both = error_type(f"{before} CUBLAS_STATUS_ALLOC_FAILED after {error} {after}")
    assert classify_error(both) is ErrorKind.OUT_OF_MEMORY
