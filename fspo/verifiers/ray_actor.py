"""Verifiers that live in Ray actors of their own, shared by verl's reward workers.

verl's reward workers are Ray actors that request no GPU (and Ray 2.60 leaves ``CUDA_VISIBLE_DEVICES``
set in them, so a model loaded there would silently take GPU memory next to vLLM, or run on one CPU
thread). A model verifier therefore runs in :class:`VerifierServer` actors, placed one of two ways:

- ``colocated`` (the GPU recipes' default): one server per GPU of verl's actor/rollout resource pool,
  scheduled into that GPU's placement-group bundle with ``1 / max_colocate_count`` of its GPU — the
  share verl keeps free in every bundle for a colocated reward model. Ray sets each server's
  ``CUDA_VISIBLE_DEVICES`` to its bundle's GPU, and every GPU of the run still trains.
- ``ray``: one server that asks Ray for ``num_gpus`` of its own, outside verl's pool (for a cluster that
  keeps a GPU out of verl's pool).

Either way the trainer starts the servers (:func:`start_verifier_servers`), owns them, and names
them after the Ray job (:func:`colocated_server_name`, so two jobs sharing a namespace never find each
other's); reward workers find them by name through one client, :class:`ColocatedVerifier`. A week-long run
meets dead and hung servers, so the client gives every request one deadline across its retries
(``fspo.verifier.request_deadline_s``) and each attempt its own (``request_timeout_s``); a server that dies,
restarts, times out or keeps failing is set aside (back-off 30 s, doubling to 10 minutes) and the request is
retried on another one, or, when every server has been tried (one server: the one-GPU recipe), on the first
one due back from its back-off, while the deadline allows. A request the client gives up on is cancelled
and its server drops it before computing it. Ray restarts a server whose process died (``max_restarts``;
Ray does not retry its tasks, the client does), a server whose device broke exits so that Ray restarts it,
and the client looks the servers up again while any is missing. A server empties its CUDA cache when it
goes idle, not after every request. When servers stay lost for good, the rollouts go unlabelled and
:mod:`fspo.training.verifier_loss` stops the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fspo.config.fspo_config import FSPOConfig
from fspo.config.verifier import VerifierConfig
from fspo.verifiers.backends import build_local_verifier
from fspo.verifiers.base import Pair, ScoredPairs, Verifier, check_pairs
from fspo.verifiers.batching import device_broken

logger = logging.getLogger(__name__)

# Named actors of the colocated placement: f"{COLOCATED_PREFIX}{job id}_{rank}" (colocated_server_name).
COLOCATED_PREFIX = "fspo_verifier_colocated_"
# Ray restarts a colocated server whose process died this many times (in its bundle, model reloaded).
SERVER_RESTARTS = 4
# A server idle this long empties its CUDA cache (the GPU is shared with vLLM and the FSDP actor).
IDLE_EMPTY_CACHE_S = 2.0
# Back-off of a set-aside server: first, and most.
SET_ASIDE_S, SET_ASIDE_MAX_S = 30.0, 600.0
# Request errors raised by the backend (not a dead or late server) in a row before a server is set aside.
ERRORS_BEFORE_SET_ASIDE = 3
# While a server is missing, the client lists Ray's named actors again at most this often.
REDISCOVER_S = 10.0


def colocated_server_name(job_id: str, rank: int) -> str:
    """The Ray name of colocated server ``rank`` of job ``job_id``."""
    return f"{COLOCATED_PREFIX}{job_id}_{rank}"


def colocated_server_rank(name: str, job_id: str) -> int | None:
    """The rank in ``name`` if it names a colocated server of job ``job_id``, else ``None``."""
    head = f"{COLOCATED_PREFIX}{job_id}_"
    rank = name.removeprefix(head)
    return int(rank) if name.startswith(head) and rank.isdigit() else None


def choose_server(in_flight: Sequence[int], available: Sequence[bool], turn: int) -> int | None:
    """The available server with the fewest requests in flight; ties rotate with ``turn``. ``None`` if none."""
    count = len(in_flight)
    candidates = [i for i in range(count) if available[i]]
    if not candidates:
        return None
    return min(candidates, key=lambda i: (in_flight[i], (i - turn) % count))


def current_job_id() -> str:
    import ray

    return ray.get_runtime_context().get_job_id()


class VerifierServer:
    """A local verifier inside a Ray actor; an async actor, so concurrent requests merge into batches."""

    def __init__(self, settings: VerifierConfig):
        self.started = time.perf_counter()
        self.verifier = self.build(local_copy(settings))
        self.load_seconds = time.perf_counter() - self.started
        self.requests = 0
        self._active = 0
        self._idle_task: asyncio.Task | None = None
        self.cache_emptied = 0
        print(f"fspo: verifier server {self._summary()}", flush=True)

    def build(self, settings: VerifierConfig) -> Verifier:
        """The verifier this server runs (a test server overrides it)."""
        return build_local_verifier(settings)

    async def score(self, pairs: list[Pair]) -> ScoredPairs:
        """The scores of ``pairs`` and the pairs that failed on their own (their clients count them)."""
        self.requests += 1
        self._active += 1
        try:
            return await self.verifier.ascore_with_failures(pairs)
        except Exception as error:
            if device_broken(error):
                self._exit_for_restart(error)
            raise
        finally:
            self._active -= 1
            if not self._active and (self._idle_task is None or self._idle_task.done()):
                self._idle_task = asyncio.create_task(self._empty_cache_when_idle())

    def _exit_for_restart(self, error: BaseException) -> None:
        """End this process so Ray starts a fresh one (``max_restarts``): a broken CUDA context fails every later
        call, and a server that only raised would be set aside by its clients forever, its GPU share held."""
        print(
            f"fspo: verifier server pid {os.getpid()} exits for Ray to restart it: its device failed: {error!r}",
            flush=True,
        )
        os._exit(1)  # not ray.actor.exit_actor(): Ray does not restart an actor that exits on purpose

    async def _empty_cache_when_idle(self) -> None:
        """Return the CUDA cache to the GPU's other tenants once no request has come for a while.

        Per request it would sync the device and churn the allocator while the next batch runs.
        """
        while True:
            seen = self.requests
            await asyncio.sleep(IDLE_EMPTY_CACHE_S)
            if self._active:
                return  # the request that is running schedules the next check when it ends
            if self.requests == seen:
                break
        if getattr(getattr(self.verifier, "device", None), "type", "") == "cuda":
            import torch

            await asyncio.to_thread(torch.cuda.empty_cache)
            self.cache_emptied += 1

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
            "node_id": ray.get_runtime_context().get_node_id(),
            "ray_gpu_ids": [str(i) for i in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "device": str(getattr(self.verifier, "device", "cpu")),
            "requests": self.requests,
            "model_calls": coalescer.calls if coalescer else 0,
            "busy_seconds": coalescer.busy_seconds if coalescer else 0.0,
            "failed_pairs": coalescer.failed_items if coalescer else 0,
            # Pairs handed to the model, and requests dropped because their client cancelled them first.
            "computed_pairs": coalescer.computed_items if coalescer else 0,
            "dropped_requests": coalescer.dropped_submissions if coalescer else 0,
        }

    async def describe(self) -> dict:
        return self._info()


def local_copy(settings: VerifierConfig) -> VerifierConfig:
    """``settings`` with ``placement: local``: a verifier server builds the model in its own process.

    The dataclass crosses to Ray actors as it is.
    """
    return dataclasses.replace(settings, placement="local")


def _server_options(server_class=None, **options):
    import ray

    return ray.remote(server_class or VerifierServer).options(**options)


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
    settings: VerifierConfig,
    gpu_fraction: float,
    num_cpus: float = 1,
    start_timeout_s: float = 600.0,
    server_class: type | None = None,
    job_id: str | None = None,
) -> tuple[list, list[dict]]:
    """Start one verifier server in every bundle of ``placement_groups`` (verl's actor pool).

    Args:
        placement_groups: the pool's Ray placement groups; each bundle holds one GPU.
        settings: the ``fspo.verifier`` block (its ``placement`` is ignored inside the servers).
        gpu_fraction: the share of its bundle's GPU each server asks for
            (``1 / max_colocate_count``: the slot verl leaves for a colocated reward model).
        num_cpus: CPUs each server asks for from its bundle.
        start_timeout_s: how long the servers may take to load their model.
        server_class: :class:`VerifierServer` or a subclass (tests inject faults through one).
        job_id: the job the servers serve (their names' scope); default: this process's Ray job.

    Returns:
        The server handles (named :func:`colocated_server_name` of this job) and what each reported
        when ready. Ray restarts a server whose process dies (``SERVER_RESTARTS`` times); it does not
        retry the requests that were on it: :class:`ColocatedVerifier` sends them elsewhere.
    """
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    from verl.utils.device import get_platform

    handles = []
    settings = local_copy(settings)
    job_id = job_id or current_job_id()
    bundles = [(pg, index) for pg in placement_groups for index in range(pg.bundle_count)]
    for rank, (pg, index) in enumerate(bundles):
        handles.append(
            _server_options(
                server_class,
                name=colocated_server_name(job_id, rank),
                num_cpus=num_cpus,
                max_restarts=SERVER_RESTARTS,
                max_task_retries=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=pg, placement_group_bundle_index=index
                ),
                **get_platform().ray_resource_options(gpu_fraction),
            ).remote(settings)
        )
    infos = _ready_or_raise(
        handles,
        start_timeout_s,
        "colocated verifier servers",
        "their bundles lack the free GPU share or CPU they ask for (another colocated model may hold it), or the "
        "model is still downloading (raise fspo.verifier.start_timeout_s)",
    )
    return handles, infos


def start_dedicated_server(
    settings: VerifierConfig, server_class: type | None = None, job_id: str | None = None
) -> tuple[list, list[dict]]:
    """Start the one server of ``placement: ray``: ``num_gpus`` of its own, outside verl's pool.

    Named as colocated server 0 of the job, so the reward workers reach it through the same client
    (:class:`ColocatedVerifier`: deadlines, retries, re-discovery) and Ray restarts it as it does them.
    """
    job_id = job_id or current_job_id()
    handle = _server_options(
        server_class,
        name=colocated_server_name(job_id, 0),
        num_gpus=settings.num_gpus,
        num_cpus=settings.num_cpus,
        max_restarts=SERVER_RESTARTS,
        max_task_retries=0,
    ).remote(local_copy(settings))
    infos = _ready_or_raise(
        [handle],
        settings.start_timeout_s,
        f"verifier server (placement=ray, num_gpus={settings.num_gpus:g}, num_cpus={settings.num_cpus:g})",
        "Ray probably has no free GPU for it. Leave one out of verl's pool (trainer.n_gpus_per_node), use "
        "fspo.verifier.placement=colocated, or raise fspo.verifier.start_timeout_s if the model is still downloading",
    )
    return [handle], infos


def start_verifier_servers(settings: FSPOConfig, resource_pool_manager, device: str) -> list:
    """Start the verifier servers of ``fspo.verifier.placement: colocated`` or ``ray``; none for the others.

    Called by the trainer once verl has placed its workers (the pool's placement groups exist then).
    ``colocated``: each GPU bundle of the pool gets one server asking for ``1 / max_colocate_count`` of its
    GPU, the share verl leaves for a colocated reward model. ``ray``: one server with ``num_gpus`` of its own
    (:func:`start_dedicated_server`). Returns the handles (kept by the trainer, which owns the actors) and
    prints where each one landed. ``device`` is ``trainer.device``.
    """
    verifier = settings.verifier
    if not settings.enable or verifier.placement not in ("colocated", "ray"):
        return []
    if verifier.placement == "ray":
        handles, infos = start_dedicated_server(verifier)
        kind = "dedicated (placement=ray)"
    else:
        # verl's actor/rollout (and ref, critic) pool.
        pool = resource_pool_manager.resource_pool_dict["global_pool"]
        handles, infos = start_colocated_servers(
            pool.get_placement_groups(device_name=device),
            verifier,
            gpu_fraction=1.0 / pool.max_colocate_count,
            num_cpus=verifier.num_cpus,
            start_timeout_s=verifier.start_timeout_s,
        )
        kind = "colocated"
    gpus = sorted({(info["node_ip"], gpu) for info in infos for gpu in info["ray_gpu_ids"]})
    print(
        f"fspo: {len(handles)} {kind} verifier server(s) of {verifier.name} on {len(gpus)} Ray GPU(s) "
        f"of {len({info['node_ip'] for info in infos})} node(s), devices {sorted({info['device'] for info in infos})}",
        flush=True,
    )
    return handles


@dataclass
class _Server:
    """One colocated server as a client sees it."""

    name: str
    handle: Any
    info: dict
    in_flight: int = 0
    dead: bool = False  # gone for good (killed, out of restarts): dropped until found again by name
    errors_in_a_row: int = 0
    set_asides_in_a_row: int = 0
    aside_until: float = 0.0  # time.monotonic() before which no request is sent to it


class ServerFailure(RuntimeError):
    """Every server a request was tried on failed it."""


class ColocatedVerifier(Verifier):
    """The reward workers' side of ``placement: colocated`` (and ``ray``): sends each request to the least busy server.

    The servers are found by name on first use, so the client can be built before the trainer has
    started them (verl builds reward managers while it sets up its workers). A request that a server
    fails (its process died or is restarting, it passed its attempt's deadline, or the backend raised) is
    retried on another server; the failed server is set aside for a back-off (a backend error only after
    ``ERRORS_BEFORE_SET_ASIDE`` in a row: one bad request must not exclude a sound server). When every live
    server has been tried (always, with one server), the request waits for the first one due back from its
    back-off and tries it again, so a server that recovers (a long stall, a restart) still answers it. All of
    it within one deadline per request, ``request_deadline_s``: each attempt gets ``request_timeout_s`` or what
    is left, whichever is less. A dead server is dropped and the servers are looked up again while any is
    missing. ``counts`` says what happened.

    Args:
        name: the backend's name (for logs and ``describe``).
        threshold: ``fspo.verifier.threshold``.
        request_timeout_s: the deadline of one attempt on one server.
        request_deadline_s: the deadline of a request, all its attempts and waits included.
        discover_timeout_s: how long the first lookup waits for the trainer to start the servers.
        job_id: the Ray job whose servers to use; default: this process's.
    """

    def __init__(
        self,
        name: str,
        threshold: float = 0.5,
        request_timeout_s: float = 300.0,
        request_deadline_s: float = 600.0,
        discover_timeout_s: float = 600.0,
        job_id: str | None = None,
    ):
        self.name = name
        self.threshold = threshold
        self.request_timeout_s = request_timeout_s
        self.request_deadline_s = request_deadline_s
        self.discover_timeout_s = discover_timeout_s
        self.job_id = job_id
        self._servers: list[_Server] = []
        self._discovery: asyncio.Task | None = None  # one lookup shared by the rollouts that arrive first
        self._rediscovery: asyncio.Task | None = None
        self._last_lookup = 0.0
        self._unreached = 0
        self._turn = itertools.count()
        # requests, retries, timeouts, died, unavailable, errors, waits (for a server's back-off), failed
        self.counts: Counter = Counter()

    @property
    def server_infos(self) -> list[dict]:
        return [server.info for server in self._servers if not server.dead]

    @property
    def ray_gpu_assigned(self) -> bool:
        """Whether every server this client uses holds a GPU that Ray assigned it."""
        infos = self.server_infos
        return bool(infos) and all(info["ray_gpu_ids"] for info in infos)

    def in_flight(self, name: str) -> int:
        """Requests this client has on server ``name`` now."""
        return sum(server.in_flight for server in self._servers if server.name == name)

    def _names(self) -> list[str]:
        import ray

        job_id = self.job_id or current_job_id()
        ranks = {name: colocated_server_rank(name, job_id) for name in ray.util.list_named_actors()}
        return sorted((name for name, rank in ranks.items() if rank is not None), key=ranks.get)

    async def _discover(self) -> None:
        deadline = time.monotonic() + self.discover_timeout_s
        while True:
            names = await asyncio.to_thread(self._names)
            if names or time.monotonic() > deadline:
                break
            await asyncio.sleep(1.0)
        if not names:
            raise RuntimeError(
                "fspo.verifier.placement=colocated (or ray) but no verifier server is running in this Ray job: FSPO's "
                "trainer starts them (fspo.training.trainer.FSPOTrainer); launch with fspo-train / python -m fspo.training.main"
            )
        await self._adopt(names)

    async def _adopt(self, names: list[str]) -> None:
        """Take the servers ``names`` that are new or replace dead ones (a server re-created under its name)."""
        import ray

        self._last_lookup = time.monotonic()
        known = {server.name: server for server in self._servers}
        wanted = [name for name in names if name not in known or known[name].dead]

        async def look_up(name: str) -> _Server | None:
            try:
                handle = await asyncio.to_thread(ray.get_actor, name)
                info = await asyncio.wait_for(asyncio.wrap_future(handle.describe.remote().future()), 30.0)
            except Exception:  # noqa: BLE001 - it died again or is still loading: the next lookup retries
                return None
            return _Server(name, handle, info)

        found = [server for server in await asyncio.gather(*map(look_up, wanted)) if server is not None]
        self._unreached = len(wanted) - len(found)  # named but not answering yet: looked up again later
        for server in found:
            if server.name in known:
                self._servers[self._servers.index(known[server.name])] = server
            else:
                self._servers.append(server)
        if found and self._discovery is not None and self._discovery.done():
            logger.warning("fspo: verifier servers found again: %s", ", ".join(server.name for server in found))

    async def _rediscover(self) -> None:
        await self._adopt(await asyncio.to_thread(self._names))

    def _maybe_rediscover(self) -> None:
        """Look the servers up again in the background while one is dead or unreached, at most every ``REDISCOVER_S``."""
        if not self._unreached and not any(server.dead for server in self._servers):
            return
        if time.monotonic() - self._last_lookup < REDISCOVER_S:
            return
        if self._rediscovery is None or self._rediscovery.done():
            self._last_lookup = time.monotonic()
            self._rediscovery = asyncio.ensure_future(self._rediscover())

    def _set_aside(self, server: _Server, why: str, error: BaseException | None) -> None:
        if server.aside_until > time.monotonic():
            return  # another request in flight on it when it failed: the same failure, one back-off
        back_off = min(SET_ASIDE_S * 2**server.set_asides_in_a_row, SET_ASIDE_MAX_S)
        server.set_asides_in_a_row += 1
        server.aside_until = time.monotonic() + back_off
        logger.warning("fspo: verifier server %s %s; set aside for %.0f s: %r", server.name, why, back_off, error)

    def _pick(self, tried: set[str]) -> _Server | None:
        now = time.monotonic()
        live = [server for server in self._servers if not server.dead and server.name not in tried]
        chosen = choose_server(
            [server.in_flight for server in live], [server.aside_until <= now for server in live], next(self._turn)
        )
        if chosen is not None:
            return live[chosen]
        if not tried and live:
            # Every server is set aside: probe the one due back first rather than fail the request unasked.
            return min(live, key=lambda server: server.aside_until)
        return None

    async def _request(self, server: _Server, pairs: list[Pair], timeout_s: float) -> ScoredPairs:
        import ray

        ref = server.handle.score.remote(pairs)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout_s)
        except asyncio.TimeoutError:
            try:
                ray.cancel(ref)  # the server drops it unless its batch already runs (coalesce.Coalescer)
            except Exception:  # noqa: BLE001 - best effort: the server may be gone already
                pass
            raise

    async def _due_back(self, deadline: float) -> _Server | None:
        """Every live server has been tried: wait for the first one due back from its back-off, if that comes
        before ``deadline``, and return it (the one-server case: retry it once it may have recovered)."""
        live = [server for server in self._servers if not server.dead]
        if not live:
            return None
        server = min(live, key=lambda server: server.aside_until)
        wait = server.aside_until - time.monotonic()
        if server.aside_until >= deadline:
            return None
        if wait > 0:
            self.counts["waits"] += 1
            await asyncio.sleep(wait)
        self._maybe_rediscover()
        return None if server.dead else server

    async def ascore_with_failures(self, pairs: Sequence[Pair]) -> ScoredPairs:
        from ray.exceptions import ActorDiedError, RayActorError

        pairs = check_pairs(pairs)
        if not pairs:
            return ScoredPairs([])
        if not self._servers:
            if self._discovery is None or self._discovery.done():
                self._discovery = asyncio.ensure_future(self._discover())
            await asyncio.shield(self._discovery)
        self._maybe_rediscover()
        self.counts["requests"] += 1
        deadline = time.monotonic() + self.request_deadline_s
        tried: set[str] = set()
        attempts = 0
        last_error: BaseException | None = None
        backend_errors = 0
        while True:
            server = self._pick(tried)
            if server is None:
                server = await self._due_back(deadline)
            left = deadline - time.monotonic()
            if server is None or left <= 0:
                break
            if attempts:
                self.counts["retries"] += 1
            attempts += 1
            tried.add(server.name)
            server.in_flight += 1
            timeout_s = min(self.request_timeout_s, left)
            try:
                scores = await self._request(server, pairs, timeout_s)
            except asyncio.TimeoutError as error:
                self.counts["timeouts"] += 1
                self._set_aside(server, f"gave no answer within {timeout_s:g} s", error)
                last_error = error
            except ActorDiedError as error:
                self.counts["died"] += 1
                server.dead = True
                logger.warning("fspo: verifier server %s died; its requests go to the others: %r", server.name, error)
                last_error = error
            except RayActorError as error:  # unavailable: restarting, or its node is unreachable
                self.counts["unavailable"] += 1
                self._set_aside(server, "is unavailable", error)
                last_error = error
            except Exception as error:  # noqa: BLE001 - the backend raised on every pair of this request
                self.counts["errors"] += 1
                server.errors_in_a_row += 1
                if server.errors_in_a_row >= ERRORS_BEFORE_SET_ASIDE:
                    self._set_aside(server, f"failed {server.errors_in_a_row} requests in a row", error)
                last_error = error
                backend_errors += 1
                if backend_errors >= 2:
                    break  # two attempts failed on the same pairs: the pairs are at fault, not the servers
            else:
                server.errors_in_a_row = server.set_asides_in_a_row = 0
                return scores
            finally:
                server.in_flight -= 1
        self.counts["failed"] += 1
        self._maybe_rediscover()
        live = sum(not server.dead for server in self._servers)
        raise ServerFailure(
            f"no verifier server could score this request ({attempts} attempt(s) on {len(tried)} server(s), {live} "
            f"still live; deadline {self.request_deadline_s:g} s): {last_error!r}"
        ) from last_error

    def score(self, pairs: Sequence[Pair]) -> list[float]:
        return asyncio.run(self.ascore(pairs))
