"""Where the step verifier runs in a training job, decided once before Ray starts and said in one line.

``fspo.verifier.placement``:

- ``auto`` (default): ``colocated`` for a model backend (``hhem``, ``nli``, ``embedding``, ``minicheck``, ``factcg``) on an
  accelerator, ``local`` otherwise (model-free ``lexical``, the HTTP ``llm_judge``, and CPU runs);
- ``colocated``: one verifier server per GPU of verl's actor pool, in that GPU's placement-group
  bundle (:mod:`fspo.verifiers.ray_actor`); every GPU still trains, and rewards stream with rollout;
- ``local``: a copy inside each of verl's reward workers (CPU processes with one thread each);
- ``ray``: one verifier server asking for ``num_gpus`` of its own, outside verl's pool; the trainer starts
  and owns it, and the reward workers reach it through the colocated servers' client (deadlines, retries,
  Ray's restarts, re-discovery).

``llm_judge`` with no ``url`` uses verl's reward-model router when ``reward.reward_model.enable`` is
set (verl then serves the judge model on its own replicas): ``url: reward_router``.
"""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig, open_dict

from fspo.config.fspo_config import FSPOConfig
from fspo.config.vocabulary import MODEL_BACKENDS, REWARD_ROUTER


def resolve_placement(name: str, placement: str, device: str) -> str:
    """The concrete placement for ``placement`` (``auto`` resolved) of backend ``name`` on ``device``."""
    if placement != "auto":
        return placement
    return "colocated" if name in MODEL_BACKENDS and device != "cpu" else "local"


def colocate_count() -> int:
    """How many processes verl lets share one GPU bundle; a colocated server asks for 1 / this of its GPU."""
    from verl.single_controller.ray.base import ResourcePoolManager

    return int(ResourcePoolManager.max_colocate_count)


def describe_placement(
    name: str,
    placement: str,
    *,
    device: str,
    nnodes: int,
    n_gpus_per_node: int,
    reward_workers: int,
    verifier_device: str | None = None,
    num_gpus: float = 1,
    url: str | None = None,
) -> tuple[str, list[str]]:
    """The ``fspo: verifier ...`` line for a resolved placement, and the warnings it deserves.

    ``device`` is the trainer's (``trainer.device``); ``verifier_device`` the ``fspo.verifier.device``
    option (``None``/``auto`` = the process's own device).
    """
    warnings: list[str] = []
    accelerator = device != "cpu"
    explicit_cpu = str(verifier_device or "auto") == "cpu"
    if name == "llm_judge":
        if url == REWARD_ROUTER:
            where = "on GPU (verl's reward-model servers, through the reward router: reward.reward_model.*)"
        else:
            where = f"on a remote server ({url}; its device is the server's), HTTP from each reward worker"
        return f"fspo: verifier llm_judge {where}", warnings
    if name not in MODEL_BACKENDS:
        return f"fspo: verifier {name} on CPU (in each of the {reward_workers} reward workers; model-free)", warnings
    if placement == "colocated":
        copies = nnodes * n_gpus_per_node
        unit = "GPU" if accelerator else "logical GPU"
        klass = "CPU" if explicit_cpu or not accelerator else "GPU"
        line = (
            f"fspo: verifier {name} on {klass} (colocated with the actor: one copy per {unit}, {n_gpus_per_node} per "
            f"node, {copies} in all, each taking 1/{colocate_count()} of its {unit} in Ray's accounting, the "
            "share verl keeps for a colocated model)"
        )
        if accelerator and explicit_cpu:
            warnings.append(
                f"fspo: WARNING: fspo.verifier.device=cpu keeps the {name} model off the GPUs its servers were given; "
                "unset it (auto) to verify on the GPU"
            )
        return line, warnings
    if placement == "ray":
        klass = "GPU" if num_gpus and not explicit_cpu else "CPU"
        line = (
            f"fspo: verifier {name} on {klass} (its own Ray actor asking for {num_gpus:g} GPU outside verl's pool, "
            "shared by the reward workers)"
        )
        return line, warnings
    line = (
        f"fspo: verifier {name} on CPU (local: a copy in each of the {reward_workers} reward workers, "
        "one CPU thread each)"
    )
    if accelerator:
        if str(verifier_device or "auto").startswith("cuda"):
            line = line.replace("on CPU", "on GPU").replace("one CPU thread each", "on GPUs Ray did not give them")
            warnings.append(
                f"fspo: WARNING: fspo.verifier.device={verifier_device} with fspo.verifier.placement=local loads "
                f"{reward_workers} copies of {name} on GPUs outside verl's accounting, next to vLLM's memory; "
                "use fspo.verifier.placement=colocated"
            )
        else:
            warnings.append(
                f"fspo: WARNING: fspo.verifier.placement=local runs {name} on the CPU of each reward worker (one thread "
                "each: minutes of verification per training step at the recipes' scale, see "
                "benchmarks/paper_scale.py) although this run has GPUs; set fspo.verifier.placement=colocated (or auto)"
            )
    return line, warnings


def resolve_verifier_placement(config: DictConfig, settings: FSPOConfig) -> tuple[FSPOConfig, str, list[str]]:
    """Resolve ``fspo.verifier.placement: auto`` (and an ``llm_judge`` without url) in ``config``, in place.

    Runs in the driver before Ray starts, so that every reward worker and the trainer read the same
    concrete placement. ``settings`` is ``config``'s ``fspo:`` block; returns it with the placement and url
    resolved, the ``fspo: verifier ...`` line and its warnings ("" when FSPO is off).
    """
    if not settings.enable:
        return settings, "", []
    verifier = settings.verifier
    device = str(config.trainer.device)
    resolved = resolve_placement(verifier.name, verifier.placement, device)
    url = verifier.url
    if verifier.name == "llm_judge" and not url and (config.reward.get("reward_model") or {}).get("enable"):
        url = REWARD_ROUTER
    block = config.fspo
    if block.get("verifier") is None:
        with open_dict(block):
            block.verifier = {}
    with open_dict(block.verifier):
        block.verifier.placement = resolved
        block.verifier.url = url
    resolved_settings = dataclasses.replace(
        settings, verifier=dataclasses.replace(verifier, placement=resolved, url=url)
    )
    line, warnings = describe_placement(
        verifier.name,
        resolved,
        device=device,
        nnodes=int(config.trainer.nnodes),
        n_gpus_per_node=int(config.trainer.n_gpus_per_node),
        reward_workers=int(config.reward.get("num_workers") or 1),
        verifier_device=verifier.device,
        num_gpus=verifier.num_gpus,
        url=url,
    )
    return resolved_settings, line, warnings
