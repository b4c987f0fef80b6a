"""Fold a LoRA run's adapter into its base weights, so that the merged model is the policy that was trained.

verl's merger (``verl.model_merger``) writes a LoRA checkpoint as the frozen base (bf16) and the adapter alone
(``lora_adapter/``). During training vLLM applied the adapter unmerged: ``W x + lora_alpha/r * B (A x)``. The fold
``W + lora_alpha/r * B A`` is that same function only if it is stored where it keeps the update: at a LoRA
learning rate (1e-5, a few hundred updates) ``lora_alpha/r * B A`` is mostly below half a bf16 step of ``W``, so a
fold stored in bf16 rounds most weights back to the base. The fold is therefore stored in float32
(:data:`FOLD_DTYPE`), and ``fspo evaluate`` loads a float32 model as float32 (:mod:`fspo.evaluation.generation`).

The checkpoint is checked before anything is folded (:func:`check_lora_checkpoint`): verl's merger takes
``lora_alpha`` from the actor's ``lora_train_meta.json`` and writes 0 where that file is missing, which would fold
nothing into the base and call the base the trained policy.

``python -m fspo.training.lora_fold MERGED_DIR ACTOR_DIR [--trust-remote-code]`` (``scripts/merge_checkpoint.sh``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from fspo.utils.checked_load import (
    adapter_scale_problem,
    check_model_files,
    check_safetensors_header,
    from_pretrained_checked,
)
from fspo.utils.input_files import InputFileError, read_json

# float32's 24-bit mantissa resolves lora_alpha/r * B A next to W (~2^-24 of W's size); bf16's 8 bits do not.
FOLD_DTYPE = torch.float32
# How verl's merger names adapter tensors: peft's names without the adapter name ("default").
ADAPTER_PREFIX = "base_model.model."
LORA_A, LORA_B = ".lora_A.weight", ".lora_B.weight"
# peft options that change the update away from lora_alpha/r * B A: the fold does not compute them.
UNSUPPORTED_OPTIONS = ("use_dora", "use_rslora", "rank_pattern", "alpha_pattern")
TRAIN_META = "lora_train_meta.json"


class LoraCheckpointError(ValueError):
    """A LoRA checkpoint whose adapter cannot be folded as trained (one line naming the file and the fix)."""


@dataclass(frozen=True)
class LoraAdapter:
    """An adapter's scale and the base modules it adapts."""

    rank: int
    alpha: float
    modules: tuple[str, ...]  # base module names, e.g. model.layers.0.self_attn.q_proj

    @property
    def scale(self) -> float:
        return self.alpha / self.rank


def check_lora_checkpoint(
    train_meta: Mapping | None,
    adapter_config: Mapping,
    adapter_shapes: Mapping[str, tuple[int, ...]],
    base_shapes: Mapping[str, tuple[int, ...]],
    actor_dir: str = "the actor checkpoint",
) -> LoraAdapter:
    """The adapter to fold, or :class:`LoraCheckpointError` naming what is missing or inconsistent.

    Args:
        train_meta: the actor checkpoint's ``lora_train_meta.json`` (rank and alpha as trained), None if absent.
        adapter_config: ``lora_adapter/adapter_config.json`` as verl's merger wrote it.
        adapter_shapes: each adapter tensor's shape, by name (``base_model.model.<module>.lora_A.weight``).
        base_shapes: each base weight's shape, by name (``<module>.weight``).
        actor_dir: where the checkpoint is, for the messages.
    """
    meta_file = f"{actor_dir}/{TRAIN_META}"
    if train_meta is None:
        raise LoraCheckpointError(
            f"{meta_file} is missing: the adapter's scale (lora_alpha) was not saved, and verl's merger would fold "
            "it in with lora_alpha=0 (the untrained base); restore the file from the run, or write "
            '{"r": R, "lora_alpha": ALPHA, "task_type": "CAUSAL_LM"} with the run\'s actor_rollout_ref.model.lora_rank '
            "and lora_alpha"
        )
    rank, alpha = train_meta.get("r"), train_meta.get("lora_alpha")
    problem = adapter_scale_problem(alpha, rank)
    if problem:
        raise LoraCheckpointError(f"lora_adapter/adapter_config.json and {meta_file}: {problem}")
    for key, trained in (("r", rank), ("lora_alpha", alpha)):
        if adapter_config.get(key) != trained:
            raise LoraCheckpointError(
                f"lora_adapter/adapter_config.json has {key}={adapter_config.get(key)!r} but the run trained with "
                f"{key}={trained!r} ({meta_file}): merge again from the checkpoint"
            )
    for option in UNSUPPORTED_OPTIONS:
        if adapter_config.get(option):
            raise LoraCheckpointError(
                f"lora_adapter/adapter_config.json sets {option}={adapter_config[option]!r}: the fold computes "
                "W + lora_alpha/r * B A only"
            )
    targets = adapter_config.get("target_modules")
    if not isinstance(targets, (list, tuple)) or not targets or not all(isinstance(t, str) for t in targets):
        raise LoraCheckpointError(
            f"lora_adapter/adapter_config.json: target_modules must be a non-empty list of module names, got {targets!r}"
        )
    modules = adapted_modules(adapter_shapes)
    if not modules:
        raise LoraCheckpointError(f"{actor_dir} has {TRAIN_META} but its weights hold no LoRA adapter (lora_A/lora_B)")
    for module in modules:
        problem = module_problem(module, adapter_shapes, base_shapes, rank, set(targets))
        if problem:
            raise LoraCheckpointError(f"lora_adapter/adapter_model.safetensors: {problem}")
    return LoraAdapter(rank=rank, alpha=alpha, modules=modules)


def adapted_modules(adapter_shapes: Mapping[str, tuple[int, ...]]) -> tuple[str, ...]:
    """The base modules that have an adapter tensor (lora_A or lora_B), sorted."""
    modules = set()
    for name in adapter_shapes:
        for suffix in (LORA_A, LORA_B):
            if name.endswith(suffix):
                modules.add(name.removeprefix(ADAPTER_PREFIX).removesuffix(suffix))
    return tuple(sorted(modules))


def module_problem(module: str, adapter_shapes: Mapping, base_shapes: Mapping, rank: int, targets: set) -> str | None:
    """What keeps ``module``'s adapter from folding into its base weight, or None."""
    a_name, b_name = f"{ADAPTER_PREFIX}{module}{LORA_A}", f"{ADAPTER_PREFIX}{module}{LORA_B}"
    if a_name not in adapter_shapes or b_name not in adapter_shapes:
        return f"{module} has only one of lora_A and lora_B"
    if module.rsplit(".", 1)[-1] not in targets:
        return f"{module} is adapted but its name is not in adapter_config.json's target_modules {sorted(targets)}"
    base = base_shapes.get(f"{module}.weight")
    if base is None or len(base) != 2:
        return f"{module} is adapted but the base model has no such linear weight"
    out_features, in_features = base
    a, b = tuple(adapter_shapes[a_name]), tuple(adapter_shapes[b_name])
    if a != (rank, in_features) or b != (out_features, rank):
        return (
            f"{module}'s lora_A {a} / lora_B {b} do not fit rank {rank} on its {out_features}x{in_features} base "
            f"weight (expected {(rank, in_features)} / {(out_features, rank)})"
        )
    return None


def folded_weights(
    base: Mapping[str, torch.Tensor], adapter: Mapping[str, torch.Tensor], lora: LoraAdapter
) -> dict[str, torch.Tensor]:
    """``W + lora_alpha/r * B A`` of every adapted module, computed and returned in :data:`FOLD_DTYPE`."""
    folded = {}
    for module in lora.modules:
        a = adapter[f"{ADAPTER_PREFIX}{module}{LORA_A}"].to(FOLD_DTYPE)
        b = adapter[f"{ADAPTER_PREFIX}{module}{LORA_B}"].to(FOLD_DTYPE)
        folded[f"{module}.weight"] = base[f"{module}.weight"].to(FOLD_DTYPE) + lora.scale * (b @ a)
    return folded


def read_train_meta(actor_dir: Path) -> dict | None:

    path = actor_dir / TRAIN_META
    if not path.exists():
        return None
    try:
        meta = read_json(path)
    except InputFileError as error:
        raise LoraCheckpointError(str(error)) from None
    if not isinstance(meta, dict):
        raise LoraCheckpointError(f"{path}: expected a JSON object with r and lora_alpha")
    return meta


def stored_shapes(model_dir: Path) -> dict[str, tuple[int, ...]]:
    """Each weight's shape in a folder's safetensors files, read from their headers (no tensor is loaded)."""
    from safetensors import safe_open

    shapes = {}
    for file in sorted(model_dir.glob("*.safetensors")):
        with safe_open(file, framework="pt") as weights:
            shapes.update({name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()})
    return shapes


def fold_merged_model(merged_dir: Path, actor_dir: Path, trust_remote_code: bool = False) -> str:
    """Fold ``merged_dir/lora_adapter`` into the base model verl's merger wrote there, in place, stored in
    :data:`FOLD_DTYPE`; returns the line that says what was folded. Checks first (:func:`check_lora_checkpoint`)."""
    from safetensors.torch import load_file

    adapter_dir = merged_dir / "lora_adapter"
    if not (adapter_dir / "adapter_config.json").is_file():
        raise LoraCheckpointError(f"{actor_dir} has {TRAIN_META} but its weights hold no LoRA adapter (lora_A/lora_B)")
    try:
        adapter_config = read_json(adapter_dir / "adapter_config.json")
    except InputFileError as error:
        raise LoraCheckpointError(str(error)) from None
    check_model_files(str(merged_dir))  # the base's headers, read next for their shapes
    check_safetensors_header(adapter_dir / "adapter_model.safetensors")
    adapter = load_file(adapter_dir / "adapter_model.safetensors")
    lora = check_lora_checkpoint(
        read_train_meta(actor_dir),
        adapter_config,
        {name: tuple(tensor.shape) for name, tensor in adapter.items()},
        stored_shapes(merged_dir),
        str(actor_dir),
    )
    from transformers import AutoModelForCausalLM  # seconds: after the checks

    model = from_pretrained_checked(
        AutoModelForCausalLM, str(merged_dir), trust_remote_code=trust_remote_code, dtype=FOLD_DTYPE, device_map="cpu"
    )
    base = model.state_dict()
    with torch.no_grad():
        for name, weight in folded_weights(base, adapter, lora).items():
            if not torch.isfinite(weight).all():  # a finite scale on large adapter weights can still overflow
                raise LoraCheckpointError(
                    f"lora_adapter/adapter_model.safetensors: folding {name} gives non-finite weights "
                    f"(lora_alpha/r={lora.scale:g} times B A overflows {FOLD_DTYPE}); nothing was written"
                )
            base[name].copy_(weight)
    for stale in [*merged_dir.glob("*.safetensors"), *merged_dir.glob("*.safetensors.index.json")]:
        stale.unlink()
    model.save_pretrained(merged_dir)
    return (
        f"folded the LoRA adapter (r={lora.rank}, lora_alpha={lora.alpha}, {len(lora.modules)} modules: "
        f"{', '.join(sorted(adapter_config['target_modules']))}) into the base weights: the model is the trained "
        f"policy, stored as {FOLD_DTYPE} (bf16 would round most of a LoRA update away; serve it as float32, or serve "
        "the base with lora_adapter/)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fspo.training.lora_fold", description=__doc__.split("\n\n")[0])
    parser.add_argument("merged_dir", type=Path)
    parser.add_argument("actor_dir", type=Path)
    parser.add_argument("--trust-remote-code", action="store_true")
    args = parser.parse_args(argv)
    try:
        print(fold_merged_model(args.merged_dir, args.actor_dir, args.trust_remote_code))
    except ValueError as error:  # LoraCheckpointError, or fspo.utils.checked_load's refusal of the merged model
        print(error, file=sys.stderr)  # merge_checkpoint.sh prefixes what failed
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
