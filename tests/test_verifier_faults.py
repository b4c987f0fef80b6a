"""The colocated verifier under faults: dead, hung and failing servers, and bad pairs in merged batches.

Four verifier servers on four logical GPUs of one Ray cluster, shared by the module's tests (each breaks
one at most), reached through the real reward manager; the faults are real (``ray.kill``, a backend that
blocks or raises on a marked pair: :mod:`fspo_testing.faulty_verifier`). The merged-batch test runs one
server under another job id in the same namespace, which also shows two jobs never use each other's.
"""

from __future__ import annotations

import asyncio
import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from fspo.training.reward import FSPORewardManager
from fspo.utils.coalesce import isolate_failures
from fspo.verifiers.ray_actor import (
    choose_server,
    colocated_server_name,
    colocated_server_rank,
)
from fspo_testing.faulty_verifier import RAISE_MARKER
from fspo_testing.rollouts import single_rollout

ray = pytest.importorskip("ray")

SERVERS = 4


# --- pure parts -----------------------------------------------------------------------------------


@given(st.integers(1, 80), st.sets(st.integers(0, 79), max_size=8))
def test_isolate_failures_fails_exactly_the_failing_items(size, bad):
    bad = {i for i in bad if i < size}
    calls = []

    def run(items):
        calls.append(len(items))
        if bad & set(items):
            raise ValueError("bad item")
        return [item * 10 for item in items]

    if bad and len(bad) == size:
        with pytest.raises(ValueError):
            isolate_failures(list(range(size)), run, None)
        return
    results, failed = isolate_failures(list(range(size)), run, None)
    assert sorted(failed) == sorted(bad)
    assert results == [None if i in bad else i * 10 for i in range(size)]
    # Each failing item costs at most two calls per halving: O(k log n), not O(n).
    assert len(calls) <= 1 + 2 * len(bad) * max(1, math.ceil(math.log2(size)))


@given(st.lists(st.integers(0, 5), min_size=1, max_size=8), st.data())
def test_choose_server_takes_the_least_busy_available_one(in_flight, data):
    available = data.draw(st.lists(st.booleans(), min_size=len(in_flight), max_size=len(in_flight)))
    turn = data.draw(st.integers(0, 100))
    chosen = choose_server(in_flight, available, turn)
    if not any(available):
        assert chosen is None
        return
    assert available[chosen]
    assert in_flight[chosen] == min(n for n, ok in zip(in_flight, available) if ok)


def test_choose_server_rotates_ties():
    assert {choose_server([0, 0, 0], [True] * 3, turn) for turn in range(3)} == {0, 1, 2}


@given(
    st.text("0123456789abcdef", min_size=1, max_size=12),
    st.text("0123456789abcdef", min_size=1, max_size=12),
    st.integers(0, 10_000),
)
def test_server_names_are_scoped_to_their_job(job, other_job, rank):
    name = colocated_server_name(job, rank)
    assert colocated_server_rank(name, job) == rank
    if other_job != job:
        assert colocated_server_rank(name, other_job) is None


# --- servers on a Ray cluster ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_bundles():
    """A Ray cluster with five logical GPUs: a placement group of one bundle per GPU for four (verl's pool),
    and one of a single GPU bundle."""
    from ray.util.placement_group import placement_group

    ray.init(num_cpus=2, num_gpus=SERVERS + 1, include_dashboard=False, log_to_driver=False)
    groups = {SERVERS: placement_group([{"GPU": 1}] * SERVERS), 1: placement_group([{"GPU": 1}])}
    ray.get([group.ready() for group in groups.values()], timeout=60)
    yield groups
    ray.shutdown()


def start_servers(group, job_id: str, coalesce_ms: float = 10.0) -> list:
    """Faulty-capable lexical servers, one per bundle of ``group``, under ``job_id``."""
    from fspo.config.verifier import verifier_config
    from fspo.verifiers.ray_actor import start_colocated_servers
    from fspo_testing.faulty_verifier import FaultyVerifierServer

    handles, _ = start_colocated_servers(
        [group],
        verifier_config({"name": "lexical", "coalesce_ms": coalesce_ms}),
        gpu_fraction=1 / 4,
        num_cpus=0,
        start_timeout_s=120,
        server_class=FaultyVerifierServer,
        job_id=job_id,
    )
    return handles


@pytest.fixture(scope="module")
def pool(gpu_bundles):
    """Four servers shared by the module's fault tests (a server process takes ~8 s to start on two cores).

    ``pool["servers"]`` maps name -> handle of the sound ones: a test that breaks a server for good takes it
    out; each test needs two sound ones and builds a fresh client (a new reward worker's view).
    """
    job_id = "pool"
    handles = start_servers(gpu_bundles[SERVERS], job_id)
    yield {"job_id": job_id, "servers": {colocated_server_name(job_id, rank): h for rank, h in enumerate(handles)}}
    for handle in handles:
        ray.kill(handle)


def reward_manager(tokenizer, job_id: str, timeout_s: float = 300.0) -> FSPORewardManager:
    config = OmegaConf.create(
        {
            "fspo": {
                "enable": True,
                "verifier": {"name": "lexical", "placement": "colocated", "request_timeout_s": timeout_s},
            }
        }
    )
    manager = FSPORewardManager(config, tokenizer, compute_score=None)
    manager.verifier.job_id = job_id  # the servers this test started
    return manager


def rollout(tokenizer, i: int, marked: bool = False):
    """A rollout whose one reasoning step its evidence supports word for word (``marked``: the backend raises)."""
    fact = f"Stesta Bagu works for Vigio Shipping {i}."
    step = fact[:-1] + f" {RAISE_MARKER}." if marked else fact
    data, _ = single_rollout(
        tokenizer,
        f" {step}\n</think> <answer> Piobrdell </answer>",
        data_source="synthetic_multihop",
        ground_truth="Piobrdell",
        extra_info={"index": i, "split": "train", "evidence": fact},
    )
    return data


async def stream(manager, rollouts, concurrency: int = 64, on_done=None):
    """The reward loop's view: up to ``concurrency`` rollouts in the manager at once; returns the extra infos."""
    gate = asyncio.Semaphore(concurrency)
    done = 0

    async def one(data):
        nonlocal done
        async with gate:
            result = await manager.run_single(data)
        done += 1
        if on_done is not None:
            await on_done(done)
        return result["reward_extra_info"]

    return await asyncio.gather(*(one(data) for data in rollouts))


def test_a_killed_server_loses_at_most_its_requests_in_flight(pool, qwen_tokenizer):
    manager = reward_manager(qwen_tokenizer, pool["job_id"])
    client = manager.verifier
    rollouts = [rollout(qwen_tokenizer, i) for i in range(600)]
    victim, victim_handle = next(iter(pool["servers"].items()))
    others = [handle for name, handle in pool["servers"].items() if name != victim]
    killed: dict = {}

    async def kill_mid_stream(done):
        if not killed and done >= 200 and client.in_flight(victim):
            killed["in_flight"] = client.in_flight(victim)
            killed["at"] = done
            ray.kill(victim_handle)
            del pool["servers"][victim]

    infos = asyncio.run(stream(manager, rollouts, on_done=kill_mid_stream))
    assert killed, "the stream ended before a request was in flight on the server to kill"
    unlabelled = sum(info["fspo_labelled"] == 0 for info in infos)
    failed = sum(info["fspo_verifier_failed"] for info in infos)
    print(
        f"killed after {killed['at']} rollouts with {killed['in_flight']} in flight on it: {unlabelled} lost, "
        f"client counts {dict(client.counts)}"
    )
    assert unlabelled == failed <= killed["in_flight"]  # lost only what was on it, and every loss is counted
    assert client.counts["died"] >= 1 and client.counts["died"] + client.counts["failed"] >= 1
    assert len(infos) == 600 and all(info["fspo_labelled"] for info in infos[killed["at"] + 64 :])
    served = ray.get([handle.describe.remote() for handle in others])
    assert all(info["requests"] for info in served)  # the others took the rest


def test_a_hung_server_costs_one_deadline_not_the_step(pool, qwen_tokenizer):
    timeout_s = 3.0
    rollouts = [rollout(qwen_tokenizer, i) for i in range(500)]
    healthy = reward_manager(qwen_tokenizer, pool["job_id"], timeout_s)
    started = time.monotonic()
    asyncio.run(stream(healthy, rollouts))
    baseline = time.monotonic() - started

    name, hung = next(iter(pool["servers"].items()))
    ray.get(hung.hang.remote(3600))
    del pool["servers"][name]
    manager = reward_manager(qwen_tokenizer, pool["job_id"], timeout_s)
    started = time.monotonic()
    infos = asyncio.run(stream(manager, rollouts))
    elapsed = time.monotonic() - started
    ray.kill(hung)  # for good: later tests' clients must not find it
    print(
        f"500 rollouts: {baseline:.1f} s with {len(pool['servers']) + 1} sound servers, {elapsed:.1f} s with one hung"
    )
    assert elapsed <= baseline + timeout_s + 10.0
    assert manager.verifier.counts["timeouts"] >= 1
    assert all(info["fspo_labelled"] for info in infos)  # every request it held went elsewhere


def test_one_raising_pair_in_a_merged_batch_costs_only_its_own_rollout(gpu_bundles, qwen_tokenizer):
    job_id = "one"  # a job of its own, in the same namespace as the pool's: neither sees the other's servers
    handles = start_servers(gpu_bundles[1], job_id, coalesce_ms=500)
    manager = reward_manager(qwen_tokenizer, job_id)
    marked = 17
    infos = asyncio.run(stream(manager, [rollout(qwen_tokenizer, i, marked=i == marked) for i in range(64)]))
    lost = [i for i, info in enumerate(infos) if not info["fspo_labelled"]]
    assert lost == [marked]
    assert infos[marked]["fspo_unverifiable"] == 1 and infos[marked]["fspo_verifier_failed"] == 0
    described = ray.get(handles[0].describe.remote())
    assert described["failed_pairs"] == 1
    assert described["requests"] == 64 and described["model_calls"] <= 2 * 6 + 1  # one batch, split around the pair
    assert not manager.verifier.counts["errors"]
    assert len(manager.verifier.server_infos) == 1  # its own server, none of the pool's
    ray.kill(handles[0])


def test_a_crashed_server_is_restarted_by_ray_and_used_again(pool, qwen_tokenizer, monkeypatch):
    """A server process that dies unasked (``ray.kill(no_restart=False)``: as a segfault would) is restarted by
    Ray under its name (``max_restarts``), and the client sends requests to it again once its back-off ends."""
    from fspo.verifiers import ray_actor

    monkeypatch.setattr(ray_actor, "SET_ASIDE_S", 1.0)  # the back-off, shortened for the test
    monkeypatch.setattr(ray_actor, "REDISCOVER_S", 1.0)
    manager = reward_manager(qwen_tokenizer, pool["job_id"])
    client = manager.verifier
    rollouts = [rollout(qwen_tokenizer, i) for i in range(128)]
    victim = next(iter(pool["servers"].values()))
    asyncio.run(stream(manager, rollouts))
    pid = ray.get(victim.describe.remote())["pid"]
    ray.kill(victim, no_restart=False)
    infos = asyncio.run(stream(manager, rollouts))  # while it restarts
    deadline = time.monotonic() + 120
    while True:  # Ray answers "unavailable" until the restarted process has loaded its verifier
        try:
            restarted = ray.get(victim.describe.remote(), timeout=30)
            break
        except ray.exceptions.ActorUnavailableError:
            assert time.monotonic() < deadline, "Ray did not restart the server"
            time.sleep(0.5)
    assert restarted["pid"] != pid
    time.sleep(1.5)  # past the back-off and the lookup interval
    # The client takes the restarted process back once its back-off and lookup have run, which a loaded machine
    # delays: streams go on until it serves, within a deadline (a wait, not a timing the test depends on).
    deadline = time.monotonic() + 60
    served = 0
    while not served and time.monotonic() < deadline:
        asyncio.run(stream(manager, rollouts))
        served = ray.get(victim.describe.remote())["requests"]
    print(f"restart: client counts {dict(client.counts)}")
    assert all(info["fspo_labelled"] for info in infos)
    assert served > 0  # the restarted process serves again


# --- one server: cancelled requests, a stall it recovers from, a broken device ---------------------


def one_server(gpu_bundles, job_id: str):
    """A faulty-capable server of its own job in the single-GPU group (sharing its GPU, as servers of several
    jobs may), and a client of it with the back-off shortened to 1 s."""
    (handle,) = start_servers(gpu_bundles[1], job_id)
    return handle


def client(job_id: str, timeout_s: float, deadline_s: float):
    from fspo.verifiers.ray_actor import ColocatedVerifier

    return ColocatedVerifier("lexical", request_timeout_s=timeout_s, request_deadline_s=deadline_s, job_id=job_id)


def pair(i: int) -> list[tuple[str, str]]:
    fact = f"Stesta Bagu works for Vigio Shipping {i}."
    return [(fact, fact)]


def test_a_request_its_client_gave_up_on_is_never_scored(gpu_bundles):
    handle = one_server(gpu_bundles, "cancel")
    ray.get(handle.hang.remote(6))
    verifier = client("cancel", timeout_s=1.0, deadline_s=1.0)

    async def main():
        first = asyncio.ensure_future(verifier.ascore(pair(0)))  # its batch starts, and stalls
        await asyncio.sleep(0.5)
        late = [verifier.ascore(pair(i)) for i in range(1, 9)]  # queued behind it until their deadline
        return await asyncio.gather(first, *late, return_exceptions=True)

    results = asyncio.run(main())
    assert all(isinstance(result, Exception) for result in results)  # every deadline passed
    time.sleep(6)  # the stall ends: the server's loop would now compute what was queued
    described = ray.get(handle.describe.remote())
    ray.kill(handle)
    print(f"cancelled: server {described}")
    assert described["requests"] == 9
    assert described["computed_pairs"] == 1  # only the batch that was already running
    assert described["dropped_requests"] == 8


def test_one_server_that_stalls_then_recovers_scores_the_requests_it_held(gpu_bundles, monkeypatch):
    """The one-GPU recipe's case: nowhere else to retry, so the request waits out the back-off and asks again."""
    from fspo.verifiers import ray_actor

    monkeypatch.setattr(ray_actor, "SET_ASIDE_S", 1.0)
    handle = one_server(gpu_bundles, "recover")
    verifier = client("recover", timeout_s=1.5, deadline_s=20.0)
    ray.get(handle.hang.remote(3))
    started = time.monotonic()

    async def main():
        return await asyncio.gather(*(verifier.ascore(pair(i)) for i in range(8)))

    scores = asyncio.run(main())
    elapsed = time.monotonic() - started
    described = ray.get(handle.describe.remote())
    ray.kill(handle)
    print(f"stall of 3 s: {elapsed:.1f} s, client counts {dict(verifier.counts)}, server {described}")
    assert scores == [[1.0]] * 8
    assert verifier.counts["timeouts"] >= 1 and verifier.counts["retries"] >= 1 and not verifier.counts["failed"]
    assert elapsed < 20


def test_a_server_whose_device_broke_exits_and_ray_restarts_it(gpu_bundles, monkeypatch):
    from fspo.verifiers import ray_actor

    monkeypatch.setattr(ray_actor, "SET_ASIDE_S", 1.0)
    monkeypatch.setattr(ray_actor, "REDISCOVER_S", 1.0)
    handle = one_server(gpu_bundles, "broken")
    verifier = client("broken", timeout_s=30.0, deadline_s=90.0)
    assert asyncio.run(verifier.ascore(pair(0))) == [1.0]
    pid = ray.get(handle.describe.remote())["pid"]
    ray.get(handle.break_device.remote())
    scores = asyncio.run(verifier.ascore(pair(1)))  # fails on the broken process, then on the restarted one
    restarted = ray.get(handle.describe.remote())
    ray.kill(handle)
    print(f"broken device: client counts {dict(verifier.counts)}")
    assert scores == [1.0]
    assert restarted["pid"] != pid and restarted["requests"] >= 1
