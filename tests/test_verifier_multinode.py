"""Colocated verifier servers on two nodes, found by reward workers on both (``ray.cluster_utils.Cluster``).

Two simulated nodes of four logical GPUs each, verl's pool as one placement group per node, one server
per GPU bundle; a reward worker pinned to each node looks the servers up by name and spreads requests
over all eight. One test, kept so (eight servers and a second raylet: ~95 s on two busy cores).
"""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

GPUS_PER_NODE = 4


@pytest.mark.multinode
def test_reward_workers_on_both_nodes_find_the_servers_on_both(monkeypatch):
    import asyncio
    import tempfile

    from ray.cluster_utils import Cluster
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from fspo.config.verifier import verifier_config
    from fspo.verifiers.ray_actor import start_colocated_servers

    @ray.remote(num_cpus=0)
    class RewardWorker:  # where verl's reward loop builds FSPO's reward manager and its verifier client
        def verify(self, rollouts: int) -> dict:
            from fspo.config.verifier import verifier_config
            from fspo.verifiers import build_verifier

            client = build_verifier(verifier_config({"name": "lexical", "placement": "colocated"}))
            pairs = [("Paris is the capital of France.", "Paris is the capital.")]

            async def stream():
                return await asyncio.gather(*(client.ascore(pairs) for _ in range(rollouts)))

            scores = asyncio.run(stream())
            return {
                "node": ray.get_runtime_context().get_node_id(),
                "server_nodes": sorted(info["node_id"] for info in client.server_infos),
                "scores": scores,
            }

    # Cluster writes its address where a bare ray.init() looks: a folder of this test's own keeps a failed
    # shutdown from leaving this worker's later tests an address to join.
    monkeypatch.setenv("RAY_TMPDIR", tempfile.mkdtemp(prefix="ray-multinode-"))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "num_gpus": GPUS_PER_NODE})
    cluster.add_node(num_cpus=2, num_gpus=GPUS_PER_NODE)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        cluster.wait_for_nodes()
        nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
        assert len(nodes) == 2
        # verl's pool on two nodes: one placement group per node, one GPU per bundle.
        groups = [placement_group([{"GPU": 1}] * GPUS_PER_NODE, strategy="STRICT_PACK") for _ in nodes]
        ray.get([group.ready() for group in groups], timeout=120)
        handles, infos = start_colocated_servers(
            groups, verifier_config({"name": "lexical"}), gpu_fraction=1 / 3, num_cpus=0, start_timeout_s=180
        )
        assert sorted({info["node_id"] for info in infos}) == sorted(nodes)  # servers on both nodes
        workers = [
            RewardWorker.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
            for node in nodes
        ]
        seen = ray.get([worker.verify.remote(32) for worker in workers], timeout=180)
        assert sorted(report["node"] for report in seen) == sorted(nodes)  # a reward worker on each node
        for report in seen:
            assert len(report["server_nodes"]) == 2 * GPUS_PER_NODE  # all eight servers ...
            assert set(report["server_nodes"]) == set(nodes)  # ... on both nodes
            assert report["scores"] == [[1.0]] * 32
        served = [info["requests"] for info in ray.get([handle.describe.remote() for handle in handles])]
        assert sum(served) == 64 and sum(map(bool, served)) >= GPUS_PER_NODE  # requests spread over the servers
    finally:
        ray.shutdown()
        cluster.shutdown()
