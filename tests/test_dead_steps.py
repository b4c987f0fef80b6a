"""fspo.skip_dead_steps: a step whose every advantage is 0 after the flip skips the passes only its update needs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, compute_rloo_outcome_advantage

from fspo.advantage import apply_step_labels
from fspo.training.trainer import FSPOAdvantageMixin, advantages_all_zero, dead_step_blocker


@st.composite
def reward_batches(draw):
    """Groups of 2-4 rollouts (a prompt each), few distinct rewards so that constant groups are common, random
    response lengths and step labels (+1/-1/0) on the response tokens."""
    sizes = draw(st.lists(st.integers(2, 4), min_size=1, max_size=4))
    rewards = [draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=n, max_size=n)) for n in sizes]
    rows = sum(sizes)
    width = 6
    lengths = draw(st.lists(st.integers(1, width), min_size=rows, max_size=rows))
    mask = torch.tensor([[1.0 if t < length else 0.0 for t in range(width)] for length in lengths])
    labels = torch.tensor(draw(st.lists(st.sampled_from([-1, 0, 1]), min_size=rows * width, max_size=rows * width)))
    scores = torch.zeros(rows, width)
    flat = [reward for group in rewards for reward in group]
    for row, (length, reward) in enumerate(zip(lengths, flat)):
        scores[row, length - 1] = reward  # verl's reward manager puts the score on the last response token
    index = np.array([f"p{g}" for g, n in enumerate(sizes) for _ in range(n)], dtype=object)
    return rewards, scores, mask, labels.view(rows, width) * mask.long(), index


@settings(max_examples=200, deadline=None)
@given(reward_batches(), st.sampled_from(["grpo", "rloo"]))
def test_an_update_is_dead_iff_every_advantage_after_the_flip_is_zero_iff_every_group_is_constant(batch, estimator):
    # verl's own estimators (verl/trainer/ppo/core_algos.py:268 grpo, :588 rloo), then FSPO's flip.
    rewards, scores, mask, labels, index = batch
    estimate = compute_grpo_outcome_advantage if estimator == "grpo" else compute_rloo_outcome_advantage
    advantages, _ = estimate(token_level_rewards=scores, response_mask=mask, index=index)
    shaped = apply_step_labels(advantages, labels, mask)
    dead = advantages_all_zero(shaped, mask)
    assert dead == bool((shaped.abs() * mask == 0).all())
    assert dead == all(len(set(group)) == 1 for group in rewards)
    assert dead == advantages_all_zero(advantages, mask)  # the flip keeps |A|: it neither kills nor revives a step


def test_a_nan_advantage_is_no_dead_update():
    mask = torch.ones(1, 2)
    assert not advantages_all_zero(torch.tensor([[0.0, float("nan")]]), mask)
    assert advantages_all_zero(torch.tensor([[0.0, -0.0]]), mask)
    assert advantages_all_zero(torch.tensor([[0.0, 5.0]]), torch.tensor([[1.0, 0.0]]))  # off the response: no loss


def _config(**overrides):
    base = {
        "algorithm": {"adv_estimator": "grpo", "use_kl_in_reward": False, "rollout_correction": {"bypass_mode": False}},
        "actor_rollout_ref": {
            "actor": {"use_kl_loss": False, "entropy_coeff": 0.0, "policy_loss": {"loss_mode": "vanilla"}},
            "rollout": {"calculate_log_probs": False},
        },
        "fspo": {"skip_dead_steps": True},
    }
    config = OmegaConf.create(base)
    for key, value in overrides.items():
        OmegaConf.update(config, key, value)
    return config


@pytest.mark.parametrize(
    ("overrides", "use_critic", "blocker"),
    [
        ({}, False, None),
        ({"algorithm.adv_estimator": "reinforce_plus_plus"}, False, None),
        ({"algorithm.adv_estimator": "gae"}, True, "algorithm.adv_estimator=gae"),
        ({}, True, "a critic is trained"),
        ({"algorithm.use_kl_in_reward": True}, False, "algorithm.use_kl_in_reward=true"),
        ({"actor_rollout_ref.actor.use_kl_loss": True}, False, "use_kl_loss=true"),
        ({"actor_rollout_ref.actor.entropy_coeff": 0.001}, False, "entropy_coeff != 0"),
        ({"actor_rollout_ref.actor.policy_loss.loss_mode": "kl_cov"}, False, "loss_mode=kl_cov"),
        ({"actor_rollout_ref.rollout.calculate_log_probs": True}, False, "rollout correction"),
        (
            {"actor_rollout_ref.rollout.calculate_log_probs": True, "algorithm.rollout_correction.bypass_mode": True},
            False,
            None,
        ),
    ],
)
def test_dead_step_blocker_names_what_gives_a_zero_advantage_step_a_gradient(overrides, use_critic, blocker):
    reason = dead_step_blocker(_config(**overrides), use_critic)
    assert reason is None if blocker is None else blocker in reason


class _VerlStep:
    """The calls of verl's ``_step_once`` after the reward stage (verl/trainer/ppo/v1/trainer_base.py:584-611:
    old log-probs, reference, advantage, update), each recorded."""

    def __init__(self, config):
        self.config, self.use_critic, self.use_reference_policy = config, False, True
        self.global_steps, self.calls = 1, []

    def _compute_old_log_prob(self, batch, metrics):
        self.calls.append("old_log_prob")
        return batch

    def _compute_ref_log_prob(self, batch, metrics):
        self.calls.append("ref")
        return batch

    def _compute_advantage(self, batch, metrics):
        self.calls.append("advantage")
        return batch

    def _update_actor(self, batch, metrics):
        self.calls.append("update")
        return batch

    def step_once(self) -> dict:
        metrics, batch = {}, _Batch()
        batch = self._compute_old_log_prob(batch, metrics)
        if self.use_reference_policy:
            batch = self._compute_ref_log_prob(batch, metrics)
        batch = self._compute_advantage(batch, metrics)
        self._update_actor(batch, metrics)
        return metrics


class _Batch:
    keys, partition_id, tags = ["k_0_0"], "train", [{}]


class _Trainer(FSPOAdvantageMixin, _VerlStep):
    dead = False

    def _shape_advantages(self, batch, metrics):  # the flip's transfer-queue reads, replaced by the verdict
        self._fspo_dead_update = self.dead
        return batch


@pytest.fixture(autouse=True)
def _metadata_refresh(monkeypatch):
    """The transfer queue's put of tags only, which hands back the batch's meta with every field stored."""
    import transfer_queue

    monkeypatch.setattr(transfer_queue, "kv_batch_put", lambda keys, partition_id, tags: _Batch())


@pytest.mark.parametrize("skip", [True, False])
def test_a_dead_update_skips_the_old_policy_and_reference_passes_and_the_update(skip):
    trainer = _Trainer(_config(**{"fspo.skip_dead_steps": skip}))
    trainer.dead = True
    metrics = trainer.step_once()
    if skip:
        assert trainer.calls == ["advantage"] and metrics == {"fspo/step_skipped": 1.0}
    else:  # verl's order, untouched
        assert trainer.calls == ["old_log_prob", "ref", "advantage", "update"] and metrics == {}
    # The next update is live: everything runs, the advantage once.
    trainer.dead, trainer.calls = False, []
    metrics = trainer.step_once()
    expected = (
        ["advantage", "old_log_prob", "ref", "update"] if skip else ["old_log_prob", "ref", "advantage", "update"]
    )
    assert trainer.calls == expected
    assert metrics == ({"fspo/step_skipped": 0.0} if skip else {})


def test_skip_dead_steps_stays_off_where_a_zero_advantage_step_has_a_gradient():
    trainer = _Trainer(_config(**{"actor_rollout_ref.actor.use_kl_loss": True}))
    trainer.dead = True
    trainer.step_once()
    assert trainer.calls == ["old_log_prob", "ref", "advantage", "update"]


def test_a_zero_gradient_adamw_step_still_moves_the_weights():
    """What a skip changes (fspo.skip_dead_steps' help): AdamW at verl's defaults (weight decay 0.01, betas
    0.9/0.999) and the quickstart's lr 2e-5. On a first, dead step only weight decay moves a weight (by lr x 0.01 of
    it); after one live step the momentum moves every weight by 0.67 lr, two thirds of the live step's lr."""
    lr = 2e-5

    def step_sizes(live_steps: int) -> torch.Tensor:
        torch.manual_seed(0)
        weight = torch.nn.Parameter(torch.randn(4096) * 0.02)
        optimizer = torch.optim.AdamW([weight], lr=lr, weight_decay=0.01)
        for _ in range(live_steps):
            weight.grad = torch.randn(4096) * 1e-3
            optimizer.step()
        before = weight.detach().clone()
        weight.grad = torch.zeros(4096)
        optimizer.step()
        return (weight.detach() - before).abs(), before.abs()

    moved, size = step_sizes(0)
    ulp = torch.finfo(torch.float32).eps * size  # the decay, lr x 0.01 = 2e-7 of a weight, is a few float32 ulps
    assert ((moved - size * lr * 0.01).abs() <= ulp).all() and (moved > 0).float().mean() > 0.99
    moved, _ = step_sizes(1)
    assert moved.mean() / lr == pytest.approx(0.67, abs=0.01)
