"""Verifiers that live in Ray actors of their own, shared by verl's reward workers.

verl's reward workers are Ray actors that request no GPU (and Ray 2.60 leaves ``CUDA_VISIBLE_DEVICES``
set in them, so a model loaded there would silently take GPU memory next to vLLM, or run on one CPU
thread). A model verifier therefore runs in :class:`VerifierServer` actors, placed one of two ways:

- ``colocated`` (the GPU recipes' default): one server per GPU of verl's actor/rollout resource pool,
  scheduled into that GPU's placement-group bundle with ``1 / max_colocate_count`` of its GPU — the
  share verl keeps free in every bundle for a colocated reward model. Ray sets each server's
  ``CUDA_VISIBLE_DEVICES`` to its bundle's GPU, and every GPU of the run still trains. The trainer
  starts them (:func:`start_colocated_servers`); reward workers find them by name
  (:class:`ColocatedVerifier`) and spread their requests over them.
- ``ray``: one named actor that asks Ray for ``num_gpus`` of its own (:class:`RayVerifier`), for a
  cluster that keeps a GPU out of verl's pool.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from collections.abc import Mapping, Sequence

from fspo.verifiers.base import Pair, Verifier, check_pairs

# Named actors of the colocated placement: f"{COLOCATED_PREFIX}{rank}".
COLOCATED_PREFIX = "fspo_verifier_colocated_"


class VerifierServer:
    """A local verifier inside a Ray actor; an async actor, so concurrent requests merge into batches."""

    def __init__(self, config):
        from fspo.verifiers import build_verifier

        self.started = time.perf_counter()
        self.verifier = build_verifier(local_copy(config))
        self.load_seconds = time.perf_counter() - self.started
        self.requests = 0
        print(f"fspo: verifier server {self._summary()}", flush=True)

    async def score(self, pairs: list[Pair]) -> list[float]:
        self.requests += 1
        try:
            return await self.verifier.ascore(pairs)
        finally:
            if getattr(getattr(self.verifier, "device", None), "type", "") == "cuda":
                import torch

                # The GPU is shared with vLLM and the FSDP actor: keep no idle cache between batches.
                torch.cuda.empty_cache()

    def _summary(self) -> str:
        info = self._info()
        return (
            f"{info['name']} ready in pid {info['pid']} on node {info['node_ip']}: Ray GPU ids "
            f"{info['ray_gpu_ids']}, torch device {info['device']}, loaded in {self.load_seconds:.1f} s"
        )

    def _info(self) -> dict:
        import ray

        coalescer = getattr(self.verifier, "_coalescer", None)
        return {
            "name": self.verifier.name,
            "pid": os.getpid(),
            "node_ip": ray.util.get_node_ip_address(),
            "ray_gpu_ids": [str(i) for i in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device": str(getattr(self.verifier, "device", "cpu")),
            "requests": self.requests,
            "model_calls": coalescer.calls if coalescer else 0,
            "busy_seconds": coalescer.busy_seconds if coalescer else 0.0,
        }

    async def describe(self) -> dict:
        return self._info()


def local_copy(config):
    """The :class:`~fspo.config.VerifierConfig` of ``config`` (a block or mapping) with ``placement: local``.

    A verifier server builds the model in its own process; the dataclass crosses to Ray actors as it is.
    """
    import dataclasses

    from fspo.config.verifier import verifier_config

    return dataclasses.replace(verifier_config(config), placement="local")


def _server_options(**options):
    import ray

    return ray.remote(VerifierServer).options(**options)


def _ready_or_raise(handles: list, timeout_s: float, what: str, fix: str, kill: bool = True) -> list[dict]:
    """Wait for every server to load its model; on a timeout (kill those that did not, if ours) and raise."""
    import ray

    refs = [handle.describe.remote() for handle in handles]
    _, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
    if pending:
        for handle, ref in zip(handles, refs):
            if kill and ref in pending:
                ray.kill(handle)  # a pending actor would hold its resource request forever
        raise RuntimeError(f"{len(pending)} of {len(refs)} {what} did not start within {timeout_s:g} s: {fix}")
    return ray.get(refs)


def start_colocated_servers(
    placement_groups: Sequence,
    config: Mapping,
    gpu_fraction: float,
    num_cpus: float = 1,
    start_timeout_s: float = 600.0,
) -> tuple[list, list[dict]]:
    """Start one verifier server in every bundle of ``placement_groups`` (verl's actor pool).

    Args:
        placement_groups: the pool's Ray placement groups; each bundle holds one GPU.
        config: the ``fspo.verifier`` block, a :class:`~fspo.config.VerifierConfig` or a mapping of its
            fields (its ``placement`` is ignored inside the servers).
        gpu_fraction: the share of its bundle's GPU each server asks for
            (``1 / max_colocate_count``: the slot verl leaves for a colocated reward model).
        num_cpus: CPUs each server asks for from its bundle.
        start_timeout_s: how long the servers may take to load their model.

    Returns:
        The server handles (named ``COLOCATED_PREFIX + rank``) and what each reported when ready.
    """
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    from verl.utils.device import get_platform

    handles = []
    config = local_copy(config)
    bundles = [(pg, index) for pg in placement_groups for index in range(pg.bundle_count)]
    for rank, (pg, index) in enumerate(bundles):
        handles.append(
            _server_options(
                name=f"{COLOCATED_PREFIX}{rank}",
                num_cpus=num_cpus,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=index
                ),
                **get_platform().ray_resource_options(gpu_fraction),
            ).remote(config)
        )
    infos = _ready_or_raise(
        handles,
        start_timeout_s,
        "colocated verifier servers",
        "their bundles lack the free GPU share or CPU they ask for (another colocated model may hold it), or the "
        "model is still downloading (raise fspo.verifier.start_timeout_s)",
    )
    return handles, infos


class ColocatedVerifier(Verifier):
    """The reward workers' side of ``placement: colocated``: sends each request to the least busy server.

    The servers are found by name on first use, so the client can be built before the trainer has
    started them (verl builds reward managers while it sets up its workers).
    """

    def __init__(self, name: str, threshold: float = 0.5, discover_timeout_s: float = 600.0):
        self.name = name
        self.threshold = threshold
        self.discover_timeout_s = discover_timeout_s
        self._servers: list = []
        self._discovery: asyncio.Task | None = None  # one lookup shared by the rollouts that arrive first
        self._in_flight: list[int] = []
        self._turn = itertools.count()
        self.server_infos: list[dict] = []

    @property
    def ray_gpu_assigned(self) -> bool:
        """Whether every server this client uses holds a GPU that Ray assigned it."""
        return bool(self.server_infos) and all(info["ray_gpu_ids"] for info in self.server_infos)

    async def _discover(self) -> None:
        import ray

        deadline = time.monotonic() + self.discover_timeout_s
        while True:
            names = sorted(
                (n for n in ray.util.list_named_actors() if n.startswith(COLOCATED_PREFIX)),
                key=lambda n: int(n.removeprefix(COLOCATED_PREFIX)),
            )
            if names or time.monotonic() > deadline:
                break
            await asyncio.sleep(1.0)
        if not names:
            raise RuntimeError(
                "fspo.verifier.placement=colocated but no verifier server is running: FSPO's trainer starts them "
                "(fspo.trainer.FSPOTrainer); launch with fspo-train / python -m fspo.main"
            )
        servers = [ray.get_actor(name) for name in names]
        self.server_infos = list(await asyncio.gather(*(s.describe.remote() for s in servers)))
        self._servers, self._in_flight = servers, [0] * len(servers)

    async def ascore(self, pairs: Sequence[Pair]) -> list[float]:
        pairs = check_pairs(pairs)
        if not pairs:
            return []
        if not self._servers:
            if self._discovery is None or self._discovery.done():
                self._discovery = asyncio.ensure_future(self._discover())
            await asyncio.shield(self._discovery)
        # Least in-flight requests first; ties rotate so that idle servers share the load.
        start = next(self._turn)
        order = sorted(range(len(self._servers)), key=lambda i: (self._in_flight[i], (i - start) % len(self._servers)))
        chosen = order[0]
        self._in_flight[chosen] += 1
        try:
            return await self._servers[chosen].score.remote(pairs)
        finally:
            self._in_flight[chosen] -= 1

    def score(self, pairs: Sequence[Pair]) -> list[float]:
        return asyncio.run(self.ascore(pairs))


class RayVerifier(Verifier):
    """``placement: ray``: forwards [`score`] to one named verifier actor, creating it on first use.

    Args:
        config: the :class:`~fspo.config.VerifierConfig`; the actor asks Ray for its ``num_gpus`` and
            ``num_cpus``, is named ``actor_name`` (workers with the same name share one model) and may
            take ``start_timeout_s`` to start and load its model before this raises: an actor asking
            for a GPU that verl's resource pool already holds would wait forever.
    """

    def __init__(self, config):
        import ray

        if not ray.is_initialized():
            raise RuntimeError("placement=ray needs a running Ray (inside verl it is); call ray.init() first")
        config = local_copy(config)
        num_gpus, num_cpus, actor_name = config.num_gpus, config.num_cpus, config.actor_name
        start_timeout_s = config.start_timeout_s
        self.name = config.name
        self.threshold = config.threshold
        # Another reward worker may have created the actor and still be loading its model: only the
        # worker that created it kills it on a timeout.
        created_here = actor_name not in ray.util.list_named_actors()
        self.actor = _server_options(
            name=actor_name, get_if_exists=True, num_gpus=num_gpus, num_cpus=num_cpus
        ).remote(config)
        (self.info,) = _ready_or_raise(
            [self.actor],
            start_timeout_s,
            f"verifier actor {actor_name!r} (num_gpus={num_gpus}, num_cpus={num_cpus})",
            "Ray probably has no free GPU for it. Leave one out of verl's pool (trainer.n_gpus_per_node), use "
            "fspo.verifier.placement=colocated, or raise fspo.verifier.start_timeout_s if the model is still downloading",
            kill=created_here,
        )

    @property
    def ray_gpu_assigned(self) -> bool:
        return bool(self.info["ray_gpu_ids"])

    def score(self, pairs: Sequence[Pair]) -> list[float]:
        import ray

        return ray.get(self.actor.score.remote(check_pairs(pairs)))

    async def ascore(self, pairs: Sequence[Pair]) -> list[float]:
        return await self.actor.score.remote(check_pairs(pairs))
