"""The FSDP models' attention implementation (actor, reference, critic) when flash-attn is not installed.

verl loads the policy with ``attn_implementation="flash_attention_2"`` unless
``actor_rollout_ref.model.override_config.attn_implementation`` says otherwise, and fails at worker start
when the ``flash_attn`` package is missing. flash-attn has no wheel on PyPI (only a source package whose
build imports torch and compiles CUDA for a long time), so ``scripts/setup.sh`` installs a prebuilt wheel
only where one matches the machine and otherwise leaves it out. This module makes such an install run:
the actor (and the critic a GAE run trains) falls back to PyTorch's ``sdpa``, which needs no extra package.

Remove-padding is turned off with it. verl's remove-padding path packs a micro-batch into one row with
``attention_mask=None`` and restarting ``position_ids`` (``verl.workers.engine.fsdp.transformer_impl``), for
``flash_attn_varlen_func``. Under ``sdpa`` transformers rebuilds the sequence boundaries from the position
ids as a dense block-diagonal mask over the whole packed row (``masking_utils.find_packed_sequence_indices``):
correct, but quadratic in the micro-batch's total tokens, more compute and memory than the padded batch it
replaces. Ulysses sequence parallelism only exists on the flash path (verl patches
``_flash_attention_forward``), so it has no fallback. The un-padding helpers themselves
(``verl.utils.attention_utils``) already fall back to plain torch without flash-attn. Whatever the
attention, verl's log-probs (``verl.utils.torch_functional.logprobs_from_logits``) lose flash-attn's fused
Triton cross-entropy without the package and take ``logprobs_from_logits_v2``: a Python loop with one
``logsumexp`` (``log_softmax`` in bf16) per token of the micro-batch.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf

from fspo.config.environment import environment_value
from fspo.config.vocabulary import ConfigError

# verl's default for every FSDP model: actor, reference and critic (verl.workers.config.model.HFModelConfig).
VERL_DEFAULT_ATTENTION = "flash_attention_2"
FALLBACK_ATTENTION = "sdpa"
# The package each flash implementation imports in transformers.
FLASH_ATTENTION_MODULES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


@dataclass(frozen=True)
class ModelRole:
    """A model verl loads with its own ``HFModelConfig``: where its model block and Ulysses sizes are."""

    name: str
    model: str  # the config node of its HFModelConfig
    ulysses_keys: tuple[str, ...]  # the deprecated key and the engine's; the larger applies

    @property
    def attention_key(self) -> str:
        return f"{self.model}.override_config.attn_implementation"

    @property
    def remove_padding_key(self) -> str:
        return f"{self.model}.use_remove_padding"


ACTOR = ModelRole(
    "actor",
    "actor_rollout_ref.model",  # the reference policy loads the same block
    (
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
        "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size",
    ),
)
CRITIC = ModelRole(
    "critic", "critic.model", ("critic.ulysses_sequence_parallel_size", "critic.fsdp.ulysses_sequence_parallel_size")
)

ATTENTION_KEY = ACTOR.attention_key
REMOVE_PADDING_KEY = ACTOR.remove_padding_key
ULYSSES_KEY = ACTOR.ulysses_keys[0]


class AttentionUnavailable(ConfigError):
    """A flash attention implementation is required (asked for, or by sequence parallelism) but not installed."""


@dataclass(frozen=True)
class AttentionFallback:
    """Config overrides that let a model run without flash-attn, and the one line that says so."""

    overrides: dict[str, object] = field(default_factory=dict)
    warning: str = ""


def importable(module: str) -> bool:
    """Whether ``module`` imports here: a flash-attn wheel built for another torch or CUDA is found by
    the import system but fails to load its extension, so finding it is not enough."""
    try:
        importlib.import_module(module)
    except Exception:  # ImportError, or OSError/RuntimeError from a mismatched CUDA extension
        return False
    return True


# The flash-attention packages that import where the GPU workers run, comma-separated: set by fspo.training.main after
# checking on a GPU node of the cluster when this machine has none (a GPU-less head node), or by hand.
WORKER_IMPORTS_ENV = "FSPO_GPU_WORKER_IMPORTS"


def worker_importable(module: str) -> bool:
    """Whether ``module`` imports where verl's GPU workers run: :data:`WORKER_IMPORTS_ENV` when set (what a GPU
    node of the cluster answered), else this machine's install (a GPU machine launching its own workers)."""
    listed = environment_value(WORKER_IMPORTS_ENV)
    if listed is not None:
        return module in {name.strip() for name in listed.split(",") if name.strip()}
    return importable(module)


def importable_on_a_gpu_node(modules: tuple[str, ...], timeout_s: float) -> list[str]:
    """The ``modules`` that import in a Ray task on a GPU node of the cluster this process is connected to (a
    sliver of one GPU, so that it runs beside whatever holds the rest); ``ray.exceptions.GetTimeoutError`` after
    ``timeout_s``."""
    import ray

    probe = ray.remote(num_gpus=0.01, num_cpus=0)(lambda names: [name for name in names if importable(name)])
    return ray.get(probe.remote(list(modules)), timeout=timeout_s)


def attention_fallback(
    requested: str | None,
    use_remove_padding: bool,
    ulysses_sp_size: int,
    device: str,
    is_importable: Callable[[str], bool] = worker_importable,
    role: ModelRole = ACTOR,
) -> AttentionFallback | None:
    """Decide whether ``role``'s model must leave flash attention, and how.

    Args:
        requested: its ``override_config.attn_implementation`` as the user set it, ``None`` for verl's default.
        use_remove_padding: its ``use_remove_padding``.
        ulysses_sp_size: its Ulysses sequence-parallel size.
        device: ``trainer.device`` (only CUDA uses flash-attn; the CPU preset already asks for sdpa).
        is_importable: tells whether a package imports on the GPU workers (:func:`worker_importable`; injected
            so the decision is testable anywhere).
        role: the model (the actor, whose block the reference shares, or the critic).

    Returns:
        ``None`` when the configured implementation can run; otherwise the overrides to apply.

    Raises:
        AttentionUnavailable: flash attention was asked for by name, or sequence parallelism needs it.
    """
    if device != "cuda":
        return None
    implementation = requested or VERL_DEFAULT_ATTENTION
    module = FLASH_ATTENTION_MODULES.get(implementation)
    if module is None or is_importable(module):
        return None
    if requested is not None:
        raise AttentionUnavailable(
            f"{role.attention_key}={requested} needs the `{module}` package, which does not import here; "
            f"install its wheel for this torch/CUDA/Python, or set {role.attention_key}={FALLBACK_ATTENTION}"
        )
    if ulysses_sp_size > 1:
        raise AttentionUnavailable(
            f"{role.name}'s Ulysses sequence parallelism ({' / '.join(role.ulysses_keys)}={ulysses_sp_size}) needs "
            "flash-attn (verl's sequence parallelism patches flash attention only), which is not installed; "
            "install a flash-attn wheel or set it to 1"
        )
    overrides: dict[str, object] = {role.attention_key: FALLBACK_ATTENTION}
    padding_note = ""
    if use_remove_padding:
        overrides[role.remove_padding_key] = False
        padding_note = f" and {role.remove_padding_key}=false (packed rows under sdpa need a dense mask)"
    return AttentionFallback(
        overrides=overrides,
        warning=(
            f"fspo: flash-attn is not installed, so the {role.name} falls back to {role.attention_key}="
            f"{FALLBACK_ATTENTION}{padding_note}; slower, most at long responses (docs/install.md, 'Without flash-attn'; "
            "scripts/setup.sh names the flash-attn wheel for this machine)"
        ),
    )


def apply_attention_fallback(config: DictConfig, with_critic: bool = False) -> None:
    """Apply :func:`attention_fallback` to the actor's model (and, ``with_critic``, the critic's: GAE or
    ``critic.enable``) of a trainer config in place, printing one warning per model that changes.

    Call it before ``OmegaConf.resolve``: verl's ``actor.use_remove_padding`` interpolates the model's.

    Runs on the driver for the GPU workers (:func:`worker_importable`): a driver without a GPU that joins a GPU
    cluster has a GPU node answer for it (fspo.training.main); a GPU driver checks its own install, which its workers
    share (one image or virtualenv across nodes, as verl's own setup assumes).
    """
    device = str(OmegaConf.select(config, "trainer.device", default="cuda"))
    for role in (ACTOR, CRITIC) if with_critic else (ACTOR,):
        fallback = attention_fallback(
            requested=OmegaConf.select(config, role.attention_key),
            use_remove_padding=bool(OmegaConf.select(config, role.remove_padding_key, default=False)),
            ulysses_sp_size=max(int(OmegaConf.select(config, key, default=1) or 1) for key in role.ulysses_keys),
            device=device,
            role=role,
        )
        if fallback is None:
            continue
        for key, value in fallback.overrides.items():
            OmegaConf.update(config, key, value, force_add=True)
        print(fallback.warning, file=sys.stderr, flush=True)
