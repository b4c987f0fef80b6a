"""placement=ray: the verifier runs in one named Ray actor shared by every caller (CPU, num_gpus=0)."""

from __future__ import annotations

import asyncio

import pytest

from fspo.config.verifier import verifier_config
from fspo.verifiers import build_verifier

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_ray_placement_needs_a_running_ray():
    assert not ray.is_initialized()  # runs before the module's cluster starts
    with pytest.raises(RuntimeError, match="ray.init"):
        build_verifier(verifier_config({"name": "lexical", "placement": "ray", "num_gpus": 0}))


def test_ray_actor_is_shared_and_scores_like_local(ray_cluster):
    config = {
        "name": "lexical",
        "placement": "ray",
        "num_gpus": 0,
        "num_cpus": 0,
        "actor_name": "fspo_verifier_test",
    }
    first, second = build_verifier(verifier_config(config)), build_verifier(verifier_config(config))
    assert first.actor._actor_id == second.actor._actor_id  # get_if_exists: one actor, one model
    pairs = [
        ("Paris is the capital of France.", "Paris is the capital."),
        ("Paris is big.", "Rome is big."),
    ]
    local = build_verifier(verifier_config({"name": "lexical"})).score(pairs)
    assert first.score(pairs) == local
    assert asyncio.run(second.ascore(pairs)) == local
    described = ray.get(first.actor.describe.remote())
    assert described["name"] == "lexical" and described["pid"] != __import__("os").getpid()


def test_ray_actor_merges_concurrent_requests(ray_cluster):
    verifier = build_verifier(
        verifier_config(
            {
                "name": "lexical",
                "placement": "ray",
                "num_gpus": 0,
                "num_cpus": 0,
                "actor_name": "fspo_verifier_merge",
                "coalesce_ms": 200,
            }
        )
    )
    requests = [[(f"Paris has {i} bridges.", f"Paris has {i} bridges.")] for i in range(8)]

    async def run():
        return await asyncio.gather(*(verifier.ascore(r) for r in requests))

    assert asyncio.run(run()) == [[1.0]] * 8
    assert ray.get(verifier.actor.describe.remote())["model_calls"] <= 2


def test_auto_device_stays_off_cuda_in_a_ray_process_without_a_gpu(ray_cluster):
    # Ray leaves CUDA_VISIBLE_DEVICES set for GPU-less actors; `auto` must not take a GPU there.
    from fspo.verifiers.model_base import _ray_assigned_no_gpu, resolve_device

    @ray.remote(num_gpus=0)
    def probe():
        return _ray_assigned_no_gpu(), str(resolve_device("auto"))

    assert ray.get(probe.remote()) == (True, "cpu")


def test_actor_that_cannot_get_its_gpu_is_a_clear_error(ray_cluster):
    config = {
        "name": "lexical",
        "placement": "ray",
        "num_gpus": 1,
        "actor_name": "fspo_verifier_no_gpu",
        "start_timeout_s": 1,
    }
    with pytest.raises(RuntimeError, match="no free GPU"):
        build_verifier(verifier_config(config))


def test_a_worker_that_times_out_waiting_does_not_kill_the_actor_another_worker_created(ray_cluster):
    """Only the creator kills a pending actor: a second worker's shorter wait must not take it from the first."""
    import threading
    import time

    config = {"name": "lexical", "placement": "ray", "num_gpus": 1, "actor_name": "fspo_verifier_shared_wait"}
    creator_error: list = []

    def creator():
        try:
            build_verifier(verifier_config({**config, "start_timeout_s": 8}))
        except RuntimeError as error:
            creator_error.append(error)

    thread = threading.Thread(target=creator)
    thread.start()
    deadline = time.monotonic() + 5
    while config["actor_name"] not in ray.util.list_named_actors():
        assert time.monotonic() < deadline, "the creator never created its actor"
        time.sleep(0.1)
    with pytest.raises(RuntimeError, match="did not start within 1 s"):
        build_verifier(verifier_config({**config, "start_timeout_s": 1}))  # attaches to the creator's actor
    assert config["actor_name"] in ray.util.list_named_actors()  # still there for the creator
    thread.join()
    assert creator_error and "no free GPU" in str(creator_error[0])
    time.sleep(1)
    assert config["actor_name"] not in ray.util.list_named_actors()  # the creator killed it
