"""placement=ray: one verifier server with resources of its own, reached through the colocated placement's
client (deadlines, retries, re-discovery) on a Ray cluster with two logical GPUs."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
from omegaconf import OmegaConf

from fspo.config.verifier import verifier_config
from fspo.verifiers import build_verifier
from fspo.verifiers.ray_actor import ColocatedVerifier, start_dedicated_server

ray = pytest.importorskip("ray")

PAIRS = [
    ("Paris is the capital of France.", "Paris is the capital."),
    ("Paris is big.", "Rome is big."),
]


@pytest.fixture(scope="module")
def ray_cluster():
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def dedicated(job_id: str, server_class=None, **options):
    settings = verifier_config({"name": "lexical", "placement": "ray", "num_gpus": 0, "num_cpus": 0, **options})
    (handle,), (info,) = start_dedicated_server(settings, server_class=server_class, job_id=job_id)
    verifier = build_verifier(settings)
    verifier.job_id = job_id
    return handle, info, verifier


def test_the_ray_placement_server_scores_like_local_and_merges_requests(ray_cluster):
    handle, info, verifier = dedicated("ray-scores", coalesce_ms=200)
    assert isinstance(verifier, ColocatedVerifier)  # the same client as colocated servers
    local = build_verifier(verifier_config({"name": "lexical"})).score(PAIRS)
    assert verifier.score(PAIRS) == local
    assert info["name"] == "lexical" and info["pid"] != __import__("os").getpid()
    requests = [[(f"Paris has {i} bridges.", f"Paris has {i} bridges.")] for i in range(8)]

    async def run():
        return await asyncio.gather(*(verifier.ascore(r) for r in requests))

    assert asyncio.run(run()) == [[1.0]] * 8
    assert ray.get(handle.describe.remote())["model_calls"] <= 3
    ray.kill(handle)


def test_a_hung_ray_placement_server_costs_a_step_its_deadline_not_forever(ray_cluster, qwen_tokenizer):
    """A pair the server failed alone reaches the client as a failure; then the reward manager's step over a hung
    server ends within the request deadline, every rollout counted as a
    verifier failure, and the run-level guard then stops the run."""
    from fspo.training.reward import FSPORewardManager
    from fspo.training.reward_extra_info import step_metrics
    from fspo.training.verifier_loss import VerifierLossError, VerifierLossGuard
    from fspo_testing.faulty_verifier import RAISE_MARKER, FaultyVerifierServer
    from fspo_testing.rollouts import single_rollout

    handle, _, client = dedicated("ray-hung", server_class=FaultyVerifierServer)
    # Before it hangs: a pair the server failed alone (its batcher isolated it) reaches the client as a failure,
    # not as a verdict like a step with nothing to check (fspo.training.verifier_loss counts only the first).
    pairs = [PAIRS[0], ("Paris is big.", f"{RAISE_MARKER} Paris."), ("Paris is big.", "Then it is so.")]
    scored = asyncio.run(client.ascore_with_failures(pairs))
    assert scored.failed == (1,) and scored.scores[0] == 1.0 and all(map(math.isnan, scored.scores[1:]))
    ray.get(handle.hang.remote(3600))
    config = OmegaConf.create(
        {
            "fspo": {
                "enable": True,
                "verifier": {"name": "lexical", "placement": "ray", "request_timeout_s": 1, "request_deadline_s": 3},
            }
        }
    )
    manager = FSPORewardManager(config, qwen_tokenizer, compute_score=None)
    manager.verifier.job_id = "ray-hung"
    fact = "Stesta Bagu works for Vigio Shipping."
    rollouts = [
        single_rollout(
            qwen_tokenizer,
            f" {fact}\n</think> <answer> Piobrdell </answer>",
            data_source="synthetic_multihop",
            ground_truth="Piobrdell",
            extra_info={"index": i, "split": "train", "evidence": fact},
        )[0]
        for i in range(16)
    ]

    async def step():
        return await asyncio.gather(*(manager.run_single(data) for data in rollouts))

    started = time.monotonic()
    results = asyncio.run(step())
    elapsed = time.monotonic() - started
    ray.kill(handle)
    infos = [result["reward_extra_info"] for result in results]
    print(f"hung ray placement: step of 16 rollouts in {elapsed:.1f} s, client {dict(manager.verifier.counts)}")
    assert elapsed < 3 + 5  # the deadline, plus the rollouts' own scoring
    assert all(info["fspo_verifier_failed"] == 1 for info in infos)
    guard = VerifierLossGuard(max_share=0.1, max_steps=2)
    guard.observe_metrics(step_metrics(infos), step=1)
    with pytest.raises(VerifierLossError, match="failed 16 of 16 rollouts"):
        guard.observe_metrics(step_metrics(infos), step=2)


def test_a_ray_placement_server_that_cannot_get_its_gpu_is_a_clear_error(ray_cluster):
    settings = verifier_config({"name": "lexical", "placement": "ray", "num_gpus": 3, "start_timeout_s": 1})
    with pytest.raises(RuntimeError, match="no free GPU"):
        start_dedicated_server(settings, job_id="ray-no-gpu")


def test_auto_device_stays_off_cuda_in_a_ray_process_without_a_gpu(ray_cluster):
    # Ray leaves CUDA_VISIBLE_DEVICES set for GPU-less actors; `auto` must not take a GPU there.
    from fspo.verifiers.model_base import _ray_assigned_no_gpu, resolve_device

    @ray.remote(num_gpus=0)
    def probe():
        return _ray_assigned_no_gpu(), str(resolve_device("auto"))

    assert ray.get(probe.remote()) == (True, "cpu")


def test_a_server_takes_the_gpu_ray_assigned_when_ray_leaves_cuda_visible_devices(ray_cluster):
    """With RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES every process sees every GPU: `auto` must be the one Ray
    assigned, not cuda:0 for every server."""
    from fspo.verifiers import model_base

    @ray.remote(num_gpus=1, num_cpus=0)
    def index():
        return ray.get_gpu_ids(), model_base._noset_cuda_index()

    noset = {"env_vars": {model_base.NOSET_CUDA_VISIBLE_DEVICES: "1"}}
    results = ray.get([index.options(runtime_env=noset).remote() for _ in range(2)])
    assert sorted(int(gpu_ids[0]) for gpu_ids, _ in results) == [0, 1]
    for gpu_ids, cuda_index in results:
        assert cuda_index == int(gpu_ids[0])
