"""The FSPO trainer: verl's V1 PPO trainer of any ``trainer.v1.trainer_mode``, plus the step-label advantage flip.

verl 0.9.1 has one V1 trainer class per mode (``sync``, ``colocate_async``, ``separate_async``); all of
them run the same ``_compute_advantage`` / ``_update_actor`` steps. :class:`FSPOAdvantageMixin` holds
FSPO's override of those two steps and :func:`fspo_trainer_class` puts it in front of the mode's class.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import torch
import transfer_queue as tq
from tensordict import TensorDict
from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls
from verl.workers.utils.padding import response_to_nested

from fspo.advantage import apply_step_labels, flip_stats
from fspo.config import fspo_config
from fspo.label_codec import decode_labels
from fspo.reward import LABELS_KEY, OUTPUT_SEPARATOR

logger = logging.getLogger(__name__)


def reward_extra_info(extra_field: Any) -> Mapping:
    """The reward manager's ``reward_extra_info`` of one sample ({} when absent)."""
    if isinstance(extra_field, Mapping):
        info = extra_field.get("reward_extra_info", {})
        return info if isinstance(info, Mapping) else {}
    return {}


def output_index(key: str) -> Optional[int]:
    """Which output of its agent run a row is, from its TransferQueue key ``{uid}_{session_id}_{index}``.

    ``None`` when the key has another form (a custom agent-loop manager): the row is then taken to be
    the run's last output, the one verl scores.
    """
    tail = str(key).rsplit("_", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else None


def rows_labels_and_stats(
    infos: Sequence[Mapping], keys: Sequence[str], padding: Sequence[bool]
) -> tuple[list[str], list[Mapping], int]:
    """Each row's own run-length labels, the infos whose FSPO numbers count, and the rows rejected.

    verl copies the reward manager's one ``reward_extra_info`` of an agent run to every output of the
    run, so the labels string holds one part per output (joined by ``OUTPUT_SEPARATOR``) and a row
    takes the part of its own output index. The run's numbers are counted once, on its last output.
    Rows that verl added to pad the batch (tag ``is_padding``, a copy of sample 0's fields) get no
    labels and count nowhere, as in verl's own metrics. A row whose index has no part is rejected.
    """
    texts: list[str] = []
    counted: list[Mapping] = []
    rejects = 0
    for row, (info, key, is_pad) in enumerate(zip(infos, keys, padding)):
        if is_pad:
            texts.append("")
            continue
        parts = str(info.get(LABELS_KEY, "") or "").split(OUTPUT_SEPARATOR)
        index = output_index(key)
        index = len(parts) - 1 if index is None else index
        if index >= len(parts):
            rejects += 1
            logger.warning(
                "fspo: ignoring the step labels of sample %d: output %d of a run with %d labelled outputs",
                row, index, len(parts),
            )
            texts.append("")
            continue
        texts.append(parts[index])
        if index == len(parts) - 1:
            counted.append(info)
    return texts, counted, rejects


# Printed as each validation pass starts (see FSPOAdvantageMixin.on_validate_begin).
VALIDATION_BEGINS = "fspo: validation begins"


def dump_file_name(global_step: int, parameter_sync_step: int, local_step: int) -> str:
    """``step_<N>.pt``, or ``step_<N>_<k>.pt`` for the k-th of ``parameter_sync_step`` actor updates of step N."""
    return f"step_{global_step}.pt" if parameter_sync_step == 1 else f"step_{global_step}_{local_step}.pt"


def labels_tensor(encoded: Sequence[str], lengths: Sequence[int]) -> tuple[torch.Tensor, int]:
    """Decode each sample's run-length labels into a ``(batch, max(lengths))`` int tensor.

    A sample whose labels are missing, malformed or of the wrong length (they must cover its
    response exactly) gets all-zero labels -- plain outcome RL for it -- and is counted in the
    returned number of rejects, so one bad rollout never stops a run.
    """
    width = max(lengths, default=0)
    labels = torch.zeros((len(lengths), width), dtype=torch.int8)
    rejects = 0
    for row, (text, length) in enumerate(zip(encoded, lengths)):
        if not text:
            continue
        try:
            labels[row, :length] = torch.tensor(decode_labels(text, length), dtype=torch.int8)
        except (ValueError, TypeError) as error:
            rejects += 1
            logger.warning("fspo: ignoring the step labels of sample %d: %s", row, error)
    return labels, rejects


def save_atomically(record: Any, path: str) -> None:
    """``torch.save`` to ``path`` through a temporary file beside it, so a run killed mid-write leaves the
    previous dump or none, never a truncated ``step_<N>.pt`` that a reader would take for a whole one."""
    partial = f"{path}.partial"
    try:
        torch.save(record, partial)
        os.replace(partial, path)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def step_metrics(infos: Sequence[Mapping]) -> dict[str, float]:
    """Aggregate the reward manager's per-rollout FSPO numbers into ``fspo/*`` metrics."""

    def total(key: str) -> float:
        return float(sum(float(info.get(key, 0.0) or 0.0) for info in infos))

    rollouts = len(infos)
    with_evidence = total("fspo_has_evidence")
    judged = total("fspo_supported") + total("fspo_unsupported")
    steps = total("fspo_steps")
    verified = total("fspo_verified")
    metrics = {
        # The rollouts these numbers are over (pad rows and earlier outputs of an agent run excluded).
        "fspo/rollouts": float(rollouts),
        "fspo/evidence_rollout_frac": with_evidence / rollouts if rollouts else 0.0,
        "fspo/steps_per_response": steps / with_evidence if with_evidence else 0.0,
        "fspo/supported_step_rate": total("fspo_supported") / judged if judged else 0.0,
        "fspo/unverifiable_step_rate": total("fspo_unverifiable") / steps if steps else 0.0,
        # Rollouts with evidence that got no labels: no closed <think>, no steps, or a verifier failure.
        "fspo/unverifiable_rollout_rate": (with_evidence - total("fspo_labelled")) / with_evidence
        if with_evidence
        else 0.0,
        "fspo/verifier_failures": total("fspo_verifier_failed"),
        # Mean time a rollout's reward waited on the (batched) verifier.
        "fspo/verifier_seconds": total("fspo_verifier_seconds") / with_evidence if with_evidence else 0.0,
        "fspo/step_reward_mean": total("fspo_step_reward") / rollouts if rollouts else 0.0,
        # Rollouts whose outcome scorer passed fspo.scorer_timeout_s (scored 0).
        "fspo/scorer_timeouts": total("fspo_scorer_timeout"),
    }
    if verified:
        # Share of verified rollouts whose verifier ran in a process Ray gave a GPU (colocated / ray placement).
        # Absent when nothing was verified: verl averages the actor updates of a step, and a 0.0 there would
        # halve a true 1.0.
        metrics["fspo/verifier_ray_gpu_frac"] = total("fspo_verifier_ray_gpu") / verified
    return metrics


def start_verifier_servers(config, settings, resource_pool_manager) -> list:
    """Start the colocated verifier servers in verl's actor pool (``fspo.verifier.placement: colocated``).

    ``settings`` is the run's :class:`fspo.config.FSPOConfig`. Each GPU bundle of the pool gets one server
    asking for ``1 / max_colocate_count`` of its GPU, the share verl leaves for a colocated reward model;
    returns the handles (kept by the trainer, which owns the actors) and prints where each one landed.
    """
    from fspo.verifiers.ray_actor import start_colocated_servers

    verifier = settings.verifier
    if not settings.enable or verifier.placement != "colocated":
        return []
    # verl's actor/rollout (and ref, critic) pool; its placement groups exist once the workers are placed.
    pool = resource_pool_manager.resource_pool_dict["global_pool"]
    handles, infos = start_colocated_servers(
        pool.get_placement_groups(device_name=config.trainer.device),
        verifier,
        gpu_fraction=1.0 / pool.max_colocate_count,
        num_cpus=verifier.num_cpus,
        start_timeout_s=verifier.start_timeout_s,
    )
    gpus = sorted({(info["node_ip"], gpu) for info in infos for gpu in info["ray_gpu_ids"]})
    print(
        f"fspo: {len(handles)} colocated verifier server(s) of {verifier.name} on {len(gpus)} Ray GPU(s) "
        f"of {len({info['node_ip'] for info in infos})} node(s), devices {sorted({info['device'] for info in infos})}",
        flush=True,
    )
    return handles


class FSPOAdvantageMixin:
    """FSPO's override of a V1 PPO trainer: advantages reshaped by per-token step labels.

    The advantage estimator (any of verl's: grpo, rloo, reinforce_plus_plus, gae...) runs first,
    unchanged; then each token that the verifier labelled takes its label's sign
    (:func:`fspo.advantage.apply_step_labels`). Labels travel from the reward manager
    (:mod:`fspo.reward`) to here as a run-length string in each sample's ``reward_extra_info``.
    Every trainer mode runs these steps once per actor update, so the mixin works in front of any
    of verl's trainer classes (:func:`fspo_trainer_class`).

    With ``fspo.verifier.placement: colocated`` it also starts the verifier servers, one in each GPU
    bundle of verl's actor pool, once verl has placed its own workers (:meth:`_setup`).

    ``fspo.dump_dir`` (default off) saves, for every actor update, the tensors the actor is updated
    with: advantages before and after the flip, the labels, the response mask and which rows verl
    added as padding (``step_<N>.pt``; ``step_<N>_<k>.pt`` when a step makes ``parameter_sync_step``
    updates).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The fspo block, converted in this process (the task runner's) from the config verl hands it.
        self.fspo = fspo_config(self.config)
        self.fspo_dump_dir: Optional[Path] = Path(self.fspo.dump_dir) if self.fspo.dump_dir else None
        self._fspo_step_record: Optional[dict[str, torch.Tensor]] = None

    def _setup(self):
        super()._setup()
        self.fspo_verifier_servers = start_verifier_servers(self.config, self.fspo, self.resource_pool_manager)

    def on_validate_begin(self):
        # verl's V1 trainers validate silently for minutes on a CPU; this line in the log is what
        # `fspo quickstart` announces the validation pass by.
        print(f"{VALIDATION_BEGINS} (global step {self.global_steps})", flush=True)
        super().on_validate_begin()

    def _compute_advantage(self, batch, metrics: dict):
        batch = super()._compute_advantage(batch, metrics=metrics)
        if not self.fspo.enable:
            return batch
        data = tq.kv_batch_get(
            keys=batch.keys,
            partition_id=batch.partition_id,
            select_fields=["advantages", "response_mask", "extra_fields"],
        )
        response_mask_nested = data["response_mask"]
        infos = [reward_extra_info(field) for field in data.pop("extra_fields").tolist()]
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        texts, counted, missing = rows_labels_and_stats(infos, batch.keys, padding)
        lengths = response_mask_nested.offsets().diff().tolist()
        labels, rejects = labels_tensor(texts, lengths)

        padded = data.to_padded_tensor()
        advantages, response_mask = padded["advantages"], padded["response_mask"]
        shaped = apply_step_labels(advantages, labels, response_mask) if self.fspo.flip else advantages

        metrics.update(step_metrics(counted))
        metrics.update({f"fspo/{k}": v for k, v in flip_stats(advantages, shaped, labels, response_mask).items()})
        metrics["fspo/rejected_label_rows"] = float(rejects + missing)
        if self.fspo_dump_dir is not None:
            self._fspo_step_record = {
                "advantages_before": advantages.clone(),
                "labels": labels.clone(),
                "response_mask": response_mask.clone(),
                "is_padding": torch.tensor(padding, dtype=torch.bool),
            }
        if self.fspo.flip:
            output = TensorDict(
                {"advantages": response_to_nested(shaped, response_mask_nested)}, batch_size=len(batch)
            )
            batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=output)
        return batch

    def _update_actor(self, batch, metrics: dict):
        if self.fspo_dump_dir is not None and self._fspo_step_record is not None:
            # Read back exactly what the actor is about to train on.
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["advantages"])
            record = {**self._fspo_step_record, "advantages": data.to_padded_tensor()["advantages"]}
            self.fspo_dump_dir.mkdir(parents=True, exist_ok=True)
            name = dump_file_name(self.global_steps, self.parameter_sync_step, self.local_trigger_step)
            save_atomically(record, os.path.join(self.fspo_dump_dir, name))
            self._fspo_step_record = None
        return super()._update_actor(batch, metrics=metrics)


class FSPOTrainer(FSPOAdvantageMixin, PPOTrainerSync):
    """verl's ``PPOTrainerSync`` (``trainer.v1.trainer_mode=sync``) with FSPO's advantage step."""


# Modes whose trainer FSPO can run: every V1 mode of verl 0.9.1 shares the advantage and actor steps.
TRAINER_MODES = ("sync", "colocate_async", "separate_async")


def fspo_trainer_class(trainer_mode: str) -> type:
    """The FSPO trainer for ``trainer.v1.trainer_mode``: :class:`FSPOAdvantageMixin` over verl's class for it.

    Raises:
        ValueError: for a mode FSPO does not know (naming the setting and the modes it supports).
    """
    if trainer_mode not in TRAINER_MODES:
        raise ValueError(
            f"trainer.v1.trainer_mode={trainer_mode!r} is not supported by FSPO; use one of {', '.join(TRAINER_MODES)}"
        )
    if trainer_mode == "sync":
        return FSPOTrainer
    if trainer_mode not in _TRAINER_CLASSES:
        base = get_trainer_cls(trainer_mode)
        doc = f"verl's ``{base.__name__}`` (``trainer.v1.trainer_mode={trainer_mode}``) with FSPO's advantage step."
        _TRAINER_CLASSES[trainer_mode] = type(f"FSPO{base.__name__}", (FSPOAdvantageMixin, base), {"__doc__": doc})
    return _TRAINER_CLASSES[trainer_mode]


_TRAINER_CLASSES: dict[str, type] = {}
