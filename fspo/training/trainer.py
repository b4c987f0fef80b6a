"""The FSPO trainer: verl's V1 PPO trainer of any ``trainer.v1.trainer_mode``, plus the step-label advantage flip.

verl 0.9.1 has one V1 trainer class per mode (``sync``, ``colocate_async``, ``separate_async``); all of
them run the same ``_compute_advantage`` / ``_update_actor`` steps. :class:`FSPOAdvantageMixin` overrides
``_compute_advantage`` (the flip) and :func:`fspo_trainer_class` puts it in front of the mode's class.
Its other hooks only hand over: the verifier servers to :mod:`fspo.verifiers.ray_actor`, batch dumps
to :mod:`fspo.training.batch_dump`.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from tensordict import TensorDict
from verl.trainer.ppo.v1 import PPOTrainerSync, get_trainer_cls
from verl.workers.utils.padding import response_to_nested

from fspo.advantage import apply_step_labels, flip_stats
from fspo.config.fspo_config import fspo_config
from fspo.config.vocabulary import TRAINER_MODES
from fspo.cpu.patches import ZERO_GRADIENT_UPDATE
from fspo.methods.fapo import refinement_groups
from fspo.training.batch_dump import dump_file_name, save_atomically
from fspo.training.reward_extra_info import (
    decode_labels,
    rollout_groups,
    rows_labels_and_stats,
    sample_info,
    update_metrics,
)
from fspo.training.verifier_loss import VerifierLossGuard
from fspo.verifiers.ray_actor import start_verifier_servers

logger = logging.getLogger(__name__)


# Printed as each validation pass starts (see FSPOAdvantageMixin.on_validate_begin).
VALIDATION_BEGINS = "fspo: validation begins"


def validation_begins_line(global_step: int) -> str:
    """The line printed as a validation pass starts: after step ``global_step``'s update, or before training at 0."""
    return f"{VALIDATION_BEGINS} (global step {global_step})"


def canonical_row_order(keys: Sequence[str], prompt_order: dict[str, int]) -> list[int]:
    """The order to put a batch's rows in: by when their prompt was drawn, then by rollout and turn.

    verl's V1 batch lists rows (keys ``<uid>_<rollout>_<turn>``) in the order their rollouts were stored,
    which timing decides, and names prompts by fresh uuids, so neither is the same in two runs of a seed;
    the order in which the prompts were drawn from the data loader (``prompt_order``: uid -> position) is.
    A prompt missing from ``prompt_order`` comes after the others, by uid."""

    def position(index: int) -> tuple:
        uid, _, rest = keys[index].partition("_")
        rollout, _, turn = rest.partition("_")
        numbers = tuple(int(part) if part.isdigit() else -1 for part in (rollout, turn))
        return (prompt_order.get(uid, math.inf), uid, *numbers, keys[index])

    return sorted(range(len(keys)), key=position)


class PromptDrawOrder:
    """Each prompt's position in the order the data loader drew them (uid -> position, what
    :func:`canonical_row_order` reads), for the prompts still waiting for their update.

    Positions only grow: in the async modes a new batch is drawn while prompts of an earlier one still wait, and
    a position given again would tie two prompts, whose order the random uids would then decide."""

    def __init__(self):
        self.positions: dict[str, int] = {}
        self._next = itertools.count()

    def draw(self, uids) -> None:
        for uid in uids:
            self.positions[uid] = next(self._next)

    def release(self, uids) -> None:
        """Forget prompts whose rows went to an update."""
        for uid in uids:
            self.positions.pop(uid, None)


# verl 0.9.1's advantage estimators that read nothing but the rewards, the response mask and the prompt groups
# (their signatures in verl/trainer/ppo/core_algos.py), so a step's advantages are known before the old-policy pass.
# GAE reads a critic's values, the optimal-token baselines the old-policy log-probs, ReMax a greedy baseline.
REWARD_ONLY_ESTIMATORS = (
    "grpo",
    "grpo_vectorized",
    "grpo_passk",
    "rloo",
    "rloo_vectorized",
    "opo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
)
# verl's policy losses that are -advantage x a function of the policy (core_algos.py: vanilla, gspo): no gradient
# where every advantage is 0.
ADVANTAGE_SCALED_LOSSES = ("vanilla", "gspo")


def dead_step_blocker(config, use_critic: bool) -> Optional[str]:
    """Why a step whose advantages are all 0 may still change the policy, or cannot be known dead before the
    old-policy pass (the setting to change, as a phrase); None when neither holds: such a step can be skipped."""

    def setting(key: str, default=None):
        value = OmegaConf.select(config, key, default=default)
        return default if value is None else value

    estimator = str(setting("algorithm.adv_estimator"))
    bypass = bool(setting("algorithm.rollout_correction.bypass_mode", False))
    device = str(setting("trainer.device", "cuda"))
    if device != "cpu":
        return (
            f"trainer.device={device}: only the CPU platform's engine takes a zero-gradient update without its passes"
        )
    if setting("actor_rollout_ref.actor.strategy", "fsdp2") not in ("fsdp", "fsdp2"):
        return "actor_rollout_ref.actor.strategy is not FSDP: only the FSDP engine takes a zero-gradient update"
    if estimator not in REWARD_ONLY_ESTIMATORS:
        return f"algorithm.adv_estimator={estimator} reads more than the rewards"
    if use_critic:
        return "a critic is trained"
    if setting("algorithm.use_kl_in_reward", False):
        return "algorithm.use_kl_in_reward=true: the rewards read the reference pass"
    if setting("actor_rollout_ref.actor.use_kl_loss", False):
        return "actor_rollout_ref.actor.use_kl_loss=true: the KL loss has a gradient"
    if float(setting("actor_rollout_ref.actor.entropy_coeff", 0.0)) != 0.0:
        return "actor_rollout_ref.actor.entropy_coeff != 0: the entropy bonus has a gradient"
    loss_mode = setting("actor_rollout_ref.actor.policy_loss.loss_mode", "vanilla")
    if loss_mode not in ADVANTAGE_SCALED_LOSSES:
        return f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode} is not -advantage x ratio"
    if setting("distillation.enabled", False):
        return "distillation.enabled=true: the distillation loss has a gradient"
    if setting("actor_rollout_ref.rollout.calculate_log_probs", False) and not bypass:
        return "the rollout correction (rollout.calculate_log_probs=true, no bypass_mode) reads the old-policy pass"
    return None


def advantages_all_zero(advantages: torch.Tensor, response_mask: torch.Tensor) -> bool:
    """Whether every response token's advantage is exactly 0 (a NaN is not): the update would have no gradient."""
    return bool((advantages[response_mask.bool()] == 0).all())


class DrawnBatches:
    """A data loader that remembers the batch it last handed out (a dict, which its reader may add to)."""

    def __init__(self, loader):
        self.loader = loader
        self.last: Optional[dict] = None

    def __iter__(self):
        for batch in self.loader:
            self.last = batch
            yield batch

    def __len__(self):
        return len(self.loader)

    def prompt_order(self) -> dict[str, int]:
        """uid -> position in the last batch, once its reader has named its prompts (``batch["uid"]``)."""
        uids = [] if self.last is None else self.last.get("uid", [])
        return {uid: position for position, uid in enumerate(uids)}


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


class FSPOAdvantageMixin:
    """FSPO's override of a V1 PPO trainer: advantages reshaped by per-token step labels.

    The advantage estimator (any of verl's: grpo, rloo, reinforce_plus_plus, gae...) runs first,
    unchanged; then each token that the verifier labelled takes its label's sign
    (:func:`fspo.advantage.apply_step_labels`). Labels travel from the reward manager
    (:mod:`fspo.training.reward`) to here in each sample's ``reward_extra_info`` (:mod:`fspo.training.reward_extra_info`).
    Every trainer mode runs these steps once per actor update, so the mixin works in front of any
    of verl's trainer classes (:func:`fspo_trainer_class`).

    With ``fspo.verifier.placement: colocated`` it also starts the verifier servers, one in each GPU
    bundle of verl's actor pool, once verl has placed its own workers (:meth:`_setup`); with ``ray``, one
    server with GPUs of its own. It stops the run when the verifier keeps failing
    (:mod:`fspo.training.verifier_loss`).

    ``fspo.dump_dir`` (default off) saves, for every actor update, the tensors the actor is updated
    with (:mod:`fspo.training.batch_dump`).

    ``fspo.skip_dead_steps``, where :func:`dead_step_blocker` allows it: the advantage runs before the old-policy
    pass, and an update whose every advantage is 0 skips that pass and the reference pass, and takes its optimizer
    step on zero gradients without the forward and backward (the same weights as verl's full update).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # The fspo block, converted in this process (the task runner's) from the config verl hands it.
        self.fspo = fspo_config(self.config)
        self.fspo_dump_dir: Optional[Path] = Path(self.fspo.dump_dir) if self.fspo.dump_dir else None
        self._fspo_step_record: Optional[dict[str, torch.Tensor]] = None
        self._fspo_prompt_order = PromptDrawOrder()
        verifier = self.fspo.verifier
        self.fspo_verifier_loss = VerifierLossGuard(verifier.max_failed_share, verifier.max_failed_steps)
        # fspo.skip_dead_steps: the advantage runs before the old-policy pass, and a dead update is skipped.
        self._fspo_early_advantage = False
        self._fspo_advantage_done = False  # this update's advantage already ran (early)
        self._fspo_dead_update = False  # this update's advantages are all 0 (set by _compute_advantage)
        blocker = dead_step_blocker(self.config, self.use_critic) if self.fspo.skip_dead_steps else None
        if self.fspo.skip_dead_steps and self.fspo.enable:
            self._fspo_early_advantage = blocker is None
            print(f"fspo: skip_dead_steps {'on' if blocker is None else f'off: {blocker}'}", flush=True)

    def _build_replay_buffer(self):
        # verl's base __init__ builds the buffer before this class's __init__ has read the fspo block.
        buffer = super()._build_replay_buffer()
        buffer.poll_interval = fspo_config(self.config).rollout_poll_s
        return buffer

    def _setup(self):
        super()._setup()
        # After verl placed its workers: the servers go into the actor pool's placement groups.
        self.fspo_verifier_servers = start_verifier_servers(
            self.fspo, self.resource_pool_manager, self.config.trainer.device
        )

    def _fetch_one_gen_batch(self):
        batch = super()._fetch_one_gen_batch()
        self._fspo_prompt_order.draw(list(batch["uid"]))
        return batch

    def _balance_batch(self, batch, metrics, *args, **kwargs):
        # Same seed, same run: the rows go to the actor in the order their prompts were drawn, not in the
        # order their rollouts happened to be stored (which changes the sums of log-probs and gradients).
        batch.reorder(canonical_row_order(batch.keys, self._fspo_prompt_order.positions))
        self._fspo_prompt_order.release({key.partition("_")[0] for key in batch.keys})
        return super()._balance_batch(batch, metrics, *args, **kwargs)

    def _validate(self, *args, **kwargs):
        # Same seed, same run, for the val-* metrics too: verl draws each validation batch, names its prompts by
        # fresh uuids ("uid") and reads their rollouts back from the replay buffer in the order they were stored,
        # which timing decides; its metrics are float sums in that order. While it validates, every batch the
        # buffer hands out is put in the order its prompts were drawn (canonical_row_order).
        loader, buffer = self.val_dataloader, self.replay_buffer
        drawn = DrawnBatches(loader)
        sample = buffer.sample

        def sample_in_draw_order(*sample_args, **sample_kwargs):
            batch, metrics = sample(*sample_args, **sample_kwargs)
            batch.reorder(canonical_row_order(batch.keys, drawn.prompt_order()))
            return batch, metrics

        self.val_dataloader, buffer.sample = drawn, sample_in_draw_order
        try:
            return super()._validate(*args, **kwargs)
        finally:
            self.val_dataloader, buffer.sample = loader, sample

    def on_validate_begin(self):
        # verl's V1 trainers validate silently for minutes on a CPU; this line in the log is what
        # `fspo quickstart` announces the validation pass by.
        print(validation_begins_line(self.global_steps), flush=True)
        super().on_validate_begin()

    def _compute_old_log_prob(self, batch, metrics: dict):
        # fspo.skip_dead_steps: the advantages (rewards and labels only) decide whether the update has a gradient
        # before the passes that only the update needs; verl's loop then finds them done (_compute_advantage).
        if self._fspo_early_advantage:
            batch = self._compute_advantage(batch, metrics=metrics)
            self._fspo_advantage_done = True
            if self._fspo_dead_update:
                return batch
        return super()._compute_old_log_prob(batch, metrics=metrics)

    def _compute_ref_log_prob(self, batch, metrics: dict):
        if self._fspo_early_advantage and self._fspo_dead_update:
            return batch
        return super()._compute_ref_log_prob(batch, metrics=metrics)

    def _compute_advantage(self, batch, metrics: dict):
        if self._fspo_advantage_done:
            self._fspo_advantage_done = False
            # The update reads the fields its batch's meta lists, and verl's bypass copy of the old log-probs does not
            # return its meta (v1/trainer_base.py:1647-1649): the advantage step's put did, after it. Same here.
            return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, tags=batch.tags)
        batch = super()._compute_advantage(batch, metrics=metrics)
        return self._shape_advantages(batch, metrics) if self.fspo.enable else batch

    def _shape_advantages(self, batch, metrics: dict):
        """The flip of verl's advantages by the step labels, its metrics, and whether the update is dead."""
        data = tq.kv_batch_get(
            keys=batch.keys,
            partition_id=batch.partition_id,
            select_fields=["advantages", "response_mask", "extra_fields"],
        )
        response_mask_nested = data["response_mask"]
        infos = [sample_info(field) for field in data.pop("extra_fields").tolist()]
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        texts, counted, missing = rows_labels_and_stats(infos, batch.keys, padding)
        lengths = response_mask_nested.offsets().diff().tolist()
        labels, rejects = labels_tensor(texts, lengths)

        padded = data.to_padded_tensor()
        advantages, response_mask = padded["advantages"], padded["response_mask"]
        shaped = apply_step_labels(advantages, labels, response_mask) if self.fspo.flips else advantages

        self._fspo_dead_update = advantages_all_zero(shaped, response_mask)
        update = update_metrics(counted, flip_stats(advantages, shaped, labels, response_mask), rejects + missing)
        metrics.update(update)
        # FAPO's stage: the share of prompts whose fully correct rollouts outnumber the failed ones.
        metrics["fspo/fapo_refinement_group_frac"] = refinement_groups(rollout_groups(batch.keys, infos, padding))
        # Before the update: a run whose verifier is gone stops here rather than train another step as GRPO.
        self.fspo_verifier_loss.observe_metrics(update, self.global_steps)
        if self.fspo_dump_dir is not None:
            self._fspo_step_record = {
                "advantages_before": advantages.clone(),
                "labels": labels.clone(),
                "response_mask": response_mask.clone(),
                "is_padding": torch.tensor(padding, dtype=torch.bool),
            }
        if self.fspo.flips:
            output = TensorDict({"advantages": response_to_nested(shaped, response_mask_nested)}, batch_size=len(batch))
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
        if self._fspo_early_advantage:
            dead, self._fspo_dead_update = self._fspo_dead_update, False
            metrics["fspo/step_skipped"] = float(dead)
            if dead:
                # The gradient is 0: the engine sets it so without the forward and backward, and AdamW and the LR
                # schedule step as after the full computation (fspo.cpu.patches.patch_zero_gradient_updates).
                batch.extra_info[ZERO_GRADIENT_UPDATE] = True
                try:
                    return super()._update_actor(batch, metrics=metrics)
                finally:
                    batch.extra_info.pop(ZERO_GRADIENT_UPDATE, None)
        return super()._update_actor(batch, metrics=metrics)


class FSPOTrainer(FSPOAdvantageMixin, PPOTrainerSync):
    """verl's ``PPOTrainerSync`` (``trainer.v1.trainer_mode=sync``) with FSPO's advantage step."""


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
