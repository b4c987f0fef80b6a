"""The FSDP actor's attention implementation when flash-attn is not installed.

verl loads the policy with ``attn_implementation="flash_attention_2"`` unless
``actor_rollout_ref.model.override_config.attn_implementation`` says otherwise, and fails at worker start
when the ``flash_attn`` package is missing. flash-attn has no wheel on PyPI (only a source package whose
build imports torch and compiles CUDA for a long time), so ``scripts/setup.sh`` installs a prebuilt wheel
only where one matches the machine and otherwise leaves it out. This module makes such an install run:
the actor falls back to PyTorch's ``sdpa``, which needs no extra package.

Remove-padding is turned off with it. verl's remove-padding path packs a micro-batch into one row with
``attention_mask=None`` and restarting ``position_ids`` (``verl.workers.engine.fsdp.transformer_impl``), for
``flash_attn_varlen_func``. Under ``sdpa`` transformers rebuilds the sequence boundaries from the position
ids as a dense block-diagonal mask over the whole packed row (``masking_utils.find_packed_sequence_indices``):
correct, but quadratic in the micro-batch's total tokens, more compute and memory than the padded batch it
replaces. Ulysses sequence parallelism only exists on the flash path (verl patches
``_flash_attention_forward``), so it has no fallback. The un-padding helpers themselves
(``verl.utils.attention_utils``) already fall back to plain torch without flash-attn.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf

from fspo.config.vocabulary import ConfigError

# verl's default for the FSDP actor and reference (verl.workers.config.model.HFModelConfig).
VERL_DEFAULT_ATTENTION = "flash_attention_2"
FALLBACK_ATTENTION = "sdpa"
# The package each flash implementation imports in transformers.
FLASH_ATTENTION_MODULES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}

ATTENTION_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
REMOVE_PADDING_KEY = "actor_rollout_ref.model.use_remove_padding"
ULYSSES_KEY = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"


class AttentionUnavailable(ConfigError):
    """A flash attention implementation is required (asked for, or by sequence parallelism) but not installed."""


@dataclass(frozen=True)
class AttentionFallback:
    """Config overrides that let the actor run without flash-attn, and the one line that says so."""

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


def attention_fallback(
    requested: str | None,
    use_remove_padding: bool,
    ulysses_sp_size: int,
    device: str,
    is_importable: Callable[[str], bool] = importable,
) -> AttentionFallback | None:
    """Decide whether the actor must leave flash attention, and how.

    Args:
        requested: ``override_config.attn_implementation`` as the user set it, ``None`` for verl's default.
        use_remove_padding: ``actor_rollout_ref.model.use_remove_padding``.
        ulysses_sp_size: the actor's Ulysses sequence-parallel size.
        device: ``trainer.device`` (only CUDA uses flash-attn; the CPU preset already asks for sdpa).
        is_importable: tells whether a package imports (injected so the decision is testable anywhere).

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
            f"{ATTENTION_KEY}={requested} needs the `{module}` package, which does not import here; "
            f"install its wheel for this torch/CUDA/Python, or set {ATTENTION_KEY}={FALLBACK_ATTENTION}"
        )
    if ulysses_sp_size > 1:
        raise AttentionUnavailable(
            f"{ULYSSES_KEY}={ulysses_sp_size} needs flash-attn (verl's sequence parallelism patches "
            f"flash attention only), which is not installed; install a flash-attn wheel or set it to 1"
        )
    overrides: dict[str, object] = {ATTENTION_KEY: FALLBACK_ATTENTION}
    padding_note = ""
    if use_remove_padding:
        overrides[REMOVE_PADDING_KEY] = False
        padding_note = f" and {REMOVE_PADDING_KEY}=false (packed rows under sdpa need a dense mask)"
    return AttentionFallback(
        overrides=overrides,
        warning=(
            f"fspo: flash-attn is not installed, so the actor falls back to {ATTENTION_KEY}={FALLBACK_ATTENTION}"
            f"{padding_note}; slower at long responses (scripts/setup.sh names the flash-attn wheel for this machine)"
        ),
    )


def apply_attention_fallback(config: DictConfig) -> None:
    """Apply :func:`attention_fallback` to a trainer config in place, printing its warning.

    Call it before ``OmegaConf.resolve``: verl's ``actor.use_remove_padding`` interpolates the model's.

    Runs on the driver, which checks its own install: the Ray workers are assumed to share it (one image
    or one virtualenv across nodes), as verl's own setup assumes.
    """
    fallback = attention_fallback(
        requested=OmegaConf.select(config, ATTENTION_KEY),
        use_remove_padding=bool(OmegaConf.select(config, REMOVE_PADDING_KEY, default=False)),
        ulysses_sp_size=int(OmegaConf.select(config, ULYSSES_KEY, default=1) or 1),
        device=str(OmegaConf.select(config, "trainer.device", default="cuda")),
    )
    if fallback is None:
        return
    for key, value in fallback.overrides.items():
        OmegaConf.update(config, key, value, force_add=True)
    print(fallback.warning, file=sys.stderr, flush=True)
