"""Where the verifier runs: placement resolution, the startup line, and the platform a joined cluster gets."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fspo.config.fspo_config import fspo_config
from fspo.config.verifier import verifier_config
from fspo.config.vocabulary import REWARD_ROUTER
from fspo.verifiers import build_verifier
from fspo.verifiers.placement import describe_placement, resolve_placement, resolve_verifier_placement
from fspo_testing.warm_python import warm_python

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("name", "placement", "device", "expected"),
    [
        ("hhem", "auto", "cuda", "colocated"),
        ("nli", "auto", "npu", "colocated"),
        ("embedding", "auto", "cuda", "colocated"),
        ("hhem", "auto", "cpu", "local"),
        ("lexical", "auto", "cuda", "local"),
        ("llm_judge", "auto", "cuda", "local"),
        ("hhem", "local", "cuda", "local"),
        ("lexical", "colocated", "cpu", "colocated"),
        ("hhem", "ray", "cuda", "ray"),
    ],
)
def test_auto_placement_puts_model_backends_on_the_run_s_gpus(name, placement, device, expected):
    assert resolve_placement(name, placement, device) == expected


def resolve(config) -> tuple[str, list[str]]:
    """The placement line and warnings, the block resolved in ``config`` as the driver's validate does."""
    _, line, warnings = resolve_verifier_placement(config, fspo_config(config))
    return line, warnings


def _config(**verifier) -> OmegaConf:
    return OmegaConf.create(
        {
            "trainer": {"device": "cuda", "nnodes": 2, "n_gpus_per_node": 8},
            "reward": {"num_workers": 8, "reward_model": {"enable": False}},
            "fspo": {"enable": True, "verifier": {"name": "hhem", "placement": "auto", **verifier}},
        }
    )


def test_resolution_is_written_back_and_said_in_one_line():
    config = _config()
    line, warnings = resolve(config)
    assert config.fspo.verifier.placement == "colocated"
    assert line.startswith(
        "fspo: verifier hhem on GPU (colocated with the actor: one copy per GPU, 8 per node, 16 in all"
    )
    assert warnings == []


def test_a_model_verifier_on_reward_worker_cpus_of_a_gpu_run_warns_naming_the_setting():
    line, warnings = resolve(_config(placement="local"))
    assert line == "fspo: verifier hhem on CPU (local: a copy in each of the 8 reward workers, one CPU thread each)"
    assert len(warnings) == 1 and "fspo.verifier.placement=local" in warnings[0] and "WARNING" in warnings[0]


def test_an_explicit_cpu_device_on_colocated_servers_warns():
    line, warnings = resolve(_config(device="cpu"))
    assert " on CPU (colocated" in line
    assert "fspo.verifier.device=cpu" in warnings[0]


def test_local_cuda_device_warns_about_memory_outside_verl_s_accounting():
    line, warnings = resolve(_config(placement="local", device="cuda"))
    assert " on GPU (local" in line
    assert "outside verl's accounting" in warnings[0]


def test_cpu_runs_keep_model_verifiers_local_without_warning():
    config = _config()
    config.trainer.device = "cpu"
    line, warnings = resolve(config)
    assert config.fspo.verifier.placement == "local" and " on CPU (local" in line and warnings == []


def test_llm_judge_without_url_uses_verl_s_reward_model_router():
    config = _config(name="llm_judge")
    config.reward.reward_model.enable = True
    line, _ = resolve(config)
    assert config.fspo.verifier.url == REWARD_ROUTER
    assert line == (
        "fspo: verifier llm_judge on GPU (verl's reward-model servers, through the reward router: reward.reward_model.*)"
    )
    judge, _ = resolve(_config(name="llm_judge", url="http://judge:8000"))
    assert "remote server (http://judge:8000" in judge


def test_lexical_and_disabled_fspo():
    line, _ = resolve(_config(name="lexical"))
    assert line == "fspo: verifier lexical on CPU (in each of the 8 reward workers; model-free)"
    config = _config()
    config.fspo.enable = False
    assert resolve(config) == ("", [])


def test_unknown_placement_is_a_clear_error():
    with pytest.raises(ValueError, match="placement must be one of auto, local, colocated, ray"):
        resolve(_config(placement="gpu"))


def test_ray_placement_line():
    line, _ = describe_placement(
        "hhem", "ray", device="cuda", nnodes=1, n_gpus_per_node=8, reward_workers=8, num_gpus=1
    )
    assert line.startswith("fspo: verifier hhem on GPU (its own Ray actor asking for 1 GPU outside verl's pool")


def test_colocated_client_without_servers_is_a_clear_error():
    import asyncio

    ray = pytest.importorskip("ray")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        verifier = build_verifier(verifier_config({"name": "embedding", "placement": "colocated"}))
        verifier.discover_timeout_s = 0
        with pytest.raises(RuntimeError, match="no verifier server is running"):
            asyncio.run(verifier.ascore([("evidence", "claim")]))
    finally:
        ray.shutdown()


def test_router_url_is_verl_s_reward_router_address():
    from fspo.training.reward import _load_verifier

    verifier = _load_verifier(
        verifier_config({"name": "llm_judge", "url": REWARD_ROUTER}), "10.0.0.1:4000", "Qwen/Judge"
    )
    assert verifier.url == "http://10.0.0.1:4000/v1/chat/completions" and verifier.model == "Qwen/Judge"
    with pytest.raises(ValueError, match="reward.reward_model.enable=true"):
        _load_verifier(verifier_config({"name": "llm_judge", "url": REWARD_ROUTER}), None, None)


# --- The platform follows the cluster, not the driver ----------------------------------------------------

HEAD = """
import ray, sys
ray.init(num_cpus=4, num_gpus=int(sys.argv[1]), include_dashboard=False)
print("ADDRESS", ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # stays up until the test closes stdin
"""


@pytest.fixture
def ray_head(request):
    """Start a Ray head with ``request.param`` logical GPUs in another process; yield its address."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    process = subprocess.Popen(
        [sys.executable, "-c", HEAD, str(request.param)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        for line in process.stdout:
            if line.startswith("ADDRESS "):
                yield line.split()[1]
                break
        else:
            pytest.fail("the Ray head did not start")
    finally:
        process.stdin.close()
        process.wait(timeout=60)


def _dry_run(address: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VERL_PLATFORM"}
    # FSPO_PREFLIGHT=0: the preset is under test here, not the weights (tests/test_preflight.py)
    env.update(FSPO_DRY_RUN="1", RAY_ADDRESS=address, RAY_AUTH_MODE="disabled", FSPO_PREFLIGHT="0")
    return subprocess.run(
        [warm_python(), "-m", "fspo.training.main", "actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


@pytest.mark.parametrize("ray_head", [2], indirect=True)
def test_a_driver_without_accelerator_joining_a_gpu_cluster_keeps_the_gpu_preset(ray_head):
    process = _dry_run(ray_head)
    assert process.returncode == 0, process.stderr[-3000:]
    assert "the Ray cluster at" in process.stderr and "using the GPU preset" in process.stderr
    assert "CPU preset" not in process.stderr
    assert re.search(r"^  device: cuda$", process.stdout, re.M)  # trainer.device
    assert re.search(r"^ +VERL_PLATFORM: nvidia$", process.stdout, re.M)  # every Ray process stays on CUDA
    assert "fspo: verifier hhem on GPU (colocated" in process.stderr


@pytest.mark.parametrize("ray_head", [0], indirect=True)
def test_a_cpu_only_cluster_gets_the_cpu_preset(ray_head):
    process = _dry_run(ray_head)
    assert process.returncode == 0, process.stderr[-3000:]
    assert "using the CPU preset (platform=cpu)" in process.stderr
    assert re.search(r"^  device: cpu$", process.stdout, re.M)


@pytest.fixture
def verl_pool():
    """A Ray cluster with two logical GPUs and verl's actor pool on it (one bundle per GPU, colocate count 3);
    yields ``(placement_groups, occupy)``, where ``occupy(bundle, gpu)`` places an actor holding ``gpu`` of
    that bundle's GPU and returns the GPU ids Ray gave it."""
    ray = pytest.importorskip("ray")
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    from verl.single_controller.ray.base import RayResourcePool

    @ray.remote
    class Occupant:  # stands in for verl's FSDP worker, or anything else in the bundle
        def gpu(self):
            return [str(i) for i in ray.get_gpu_ids()]

    ray.init(num_cpus=8, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        pgs = RayResourcePool(
            process_on_nodes=[2], max_colocate_count=3, name_prefix="test_pool"
        ).get_placement_groups()
        occupants = []

        def occupy(bundle: int, gpu: float) -> list[str]:
            strategy = PlacementGroupSchedulingStrategy(placement_group=pgs[0], placement_group_bundle_index=bundle)
            occupants.append(Occupant.options(num_gpus=gpu, scheduling_strategy=strategy).remote())
            return ray.get(occupants[-1].gpu.remote())

        yield pgs, occupy
    finally:
        ray.shutdown()


def test_colocated_servers_take_the_free_share_of_every_gpu_bundle_of_verl_s_pool(verl_pool):
    """verl's pool with its workers in place (1/3 GPU each), then FSPO's servers: one per bundle, on that GPU."""
    import asyncio

    import ray

    from fspo.verifiers.ray_actor import ColocatedVerifier, start_colocated_servers

    pgs, occupy = verl_pool
    worker_gpus = [occupy(bundle, 1 / 3) for bundle in range(2)]
    handles, infos = start_colocated_servers(
        pgs, verifier_config({"name": "lexical"}), gpu_fraction=1 / 3, start_timeout_s=120
    )
    assert len(handles) == 2
    # Each server shares its bundle's GPU with the worker there.
    assert sorted(info["ray_gpu_ids"] for info in infos) == sorted(worker_gpus)

    client = ColocatedVerifier("lexical")
    pairs = [("Paris is the capital of France.", "Paris is the capital."), ("Paris is big.", "Rome is big.")]

    async def rollouts():
        return await asyncio.gather(*(client.ascore(pairs) for _ in range(6)))

    assert asyncio.run(rollouts()) == [build_verifier(verifier_config({"name": "lexical"})).score(pairs)] * 6
    assert client.ray_gpu_assigned
    served = [info["requests"] for info in ray.get([h.describe.remote() for h in handles])]
    assert sum(served) == 6 and all(served), served  # both servers took requests


def test_colocated_servers_that_cannot_be_placed_fail_clearly(verl_pool):
    import ray

    from fspo.verifiers.ray_actor import start_colocated_servers

    pgs, occupy = verl_pool
    for bundle in range(2):
        occupy(bundle, 1.0)  # something else already holds every bundle's whole GPU
    with pytest.raises(RuntimeError, match="2 of 2 colocated verifier servers did not start within 3 s"):
        start_colocated_servers(pgs, verifier_config({"name": "lexical"}), gpu_fraction=1 / 3, start_timeout_s=3)
    assert not [n for n in ray.util.list_named_actors() if n.startswith("fspo_verifier")]  # killed, not left pending
