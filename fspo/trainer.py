"""The FSPO trainer: verl's synchronous V1 PPO trainer plus the step-label advantage flip."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import torch
import transfer_queue as tq
from tensordict import TensorDict
from verl.trainer.ppo.v1 import PPOTrainerSync
from verl.workers.utils.padding import response_to_nested

from fspo.advantage import apply_step_labels, flip_stats
from fspo.labels import decode_labels
from fspo.reward import LABELS_KEY

logger = logging.getLogger(__name__)


def reward_extra_info(extra_field: Any) -> Mapping:
    """The reward manager's ``reward_extra_info`` of one sample ({} when absent)."""
    if isinstance(extra_field, Mapping):
        info = extra_field.get("reward_extra_info", {})
        return info if isinstance(info, Mapping) else {}
    return {}


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


def step_metrics(infos: Sequence[Mapping]) -> dict[str, float]:
    """Aggregate the reward manager's per-rollout FSPO numbers into ``fspo/*`` metrics."""

    def total(key: str) -> float:
        return float(sum(float(info.get(key, 0.0) or 0.0) for info in infos))

    rollouts = len(infos)
    with_evidence = total("fspo_has_evidence")
    judged = total("fspo_supported") + total("fspo_unsupported")
    steps = total("fspo_steps")
    return {
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


class FSPOTrainer(PPOTrainerSync):
    """``PPOTrainerSync`` whose advantages are reshaped by FSPO's per-token step labels.

    The advantage estimator (any of verl's: grpo, rloo, reinforce_plus_plus, gae...) runs first,
    unchanged; then each token that the verifier labelled takes its label's sign
    (:func:`fspo.advantage.apply_step_labels`). Labels travel from the reward manager
    (:mod:`fspo.reward`) to here as a run-length string in each sample's ``reward_extra_info``.

    ``fspo.dump_dir`` (default off) saves, for every step, the tensors the actor is updated with:
    advantages before and after the flip, the labels and the response mask (``step_<N>.pt``).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        block = self.config.get("fspo") or {}
        self.fspo_enable = bool(block.get("enable", True))
        self.fspo_flip = bool(block.get("flip", True))
        dump_dir = block.get("dump_dir")
        self.fspo_dump_dir: Optional[Path] = Path(dump_dir) if dump_dir else None
        self._fspo_step_record: Optional[dict[str, torch.Tensor]] = None

    def _compute_advantage(self, batch, metrics: dict):
        batch = super()._compute_advantage(batch, metrics=metrics)
        if not self.fspo_enable:
            return batch
        data = tq.kv_batch_get(
            keys=batch.keys,
            partition_id=batch.partition_id,
            select_fields=["advantages", "response_mask", "extra_fields"],
        )
        response_mask_nested = data["response_mask"]
        infos = [reward_extra_info(field) for field in data.pop("extra_fields").tolist()]
        lengths = response_mask_nested.offsets().diff().tolist()
        labels, rejects = labels_tensor([str(info.get(LABELS_KEY, "") or "") for info in infos], lengths)

        padded = data.to_padded_tensor()
        advantages, response_mask = padded["advantages"], padded["response_mask"]
        shaped = apply_step_labels(advantages, labels, response_mask) if self.fspo_flip else advantages

        metrics.update(step_metrics(infos))
        metrics.update({f"fspo/{k}": v for k, v in flip_stats(advantages, shaped, labels, response_mask).items()})
        metrics["fspo/rejected_label_rows"] = float(rejects)
        if self.fspo_dump_dir is not None:
            self._fspo_step_record = {
                "advantages_before": advantages.clone(),
                "labels": labels.clone(),
                "response_mask": response_mask.clone(),
            }
        if self.fspo_flip:
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
            torch.save(record, os.path.join(self.fspo_dump_dir, f"step_{self.global_steps}.pt"))
            self._fspo_step_record = None
        return super()._update_actor(batch, metrics=metrics)
