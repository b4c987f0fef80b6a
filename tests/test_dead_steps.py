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
from fspo.cpu.patches import ZERO_GRADIENT_UPDATE
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
        "trainer": {"device": "cpu"},
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
        # Only the CPU platform's FSDP engine takes a zero-gradient update without its passes.
        ({"trainer.device": "cuda"}, False, "trainer.device=cuda"),
        ({"actor_rollout_ref.actor.strategy": "megatron"}, False, "not FSDP"),
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
        self.calls.append("update" + (" on zero gradients" if batch.extra_info.get(ZERO_GRADIENT_UPDATE) else ""))
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

    def __init__(self):
        self.extra_info = {}


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
def test_a_dead_update_skips_the_old_policy_and_reference_passes_and_updates_on_zero_gradients(skip):
    trainer = _Trainer(_config(**{"fspo.skip_dead_steps": skip}))
    trainer.dead = True
    metrics = trainer.step_once()
    if skip:
        assert trainer.calls == ["advantage", "update on zero gradients"] and metrics == {"fspo/step_skipped": 1.0}
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


def _tiny_llama(seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, attn_implementation="sdpa")  # fmt: skip
    return LlamaForCausalLM(config)


def _response_log_probs(model, ids: torch.Tensor, prompt: int) -> torch.Tensor:
    logits = model(input_ids=ids).logits[:, prompt - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, ids[:, prompt:, None]).squeeze(-1)


def test_a_zero_gradient_update_gives_the_weights_of_verls_full_computation():
    """fspo.cpu.patches.patch_zero_gradient_updates against verl's own computation of a dead update: the vanilla
    clipped loss (verl/trainer/ppo/core_algos.py:1286) at zero advantages, off-policy (ratio != 1), its backward, the
    engine's clipping and AdamW at verl's defaults (weight decay 0.01), after a live step that left momentum. The
    full computation's gradient is exactly 0, and both models end bit for bit equal; AdamW did move them."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.utils import tensordict_utils as tu
    from verl.workers.engine.fsdp import transformer_impl

    from fspo.cpu import patches

    loss_config = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28,
                                    "clip_ratio_c": 3.0, "global_batch_info": {}})  # fmt: skip
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 300, (4, 12), generator=generator)
    mask = (torch.rand(4, 8, generator=generator) > 0.2).float()
    mask[:, 0] = 1.0
    models = [_tiny_llama(0), _tiny_llama(0)]
    optimizers = [torch.optim.AdamW(m.parameters(), lr=2e-5, weight_decay=0.01) for m in models]

    def full_step(model, optimizer, advantages, old):
        optimizer.zero_grad()
        log_prob = _response_log_probs(model, ids, 4)
        loss, _ = compute_policy_loss_vanilla(old, log_prob, advantages, mask, "token-mean", loss_config)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()

    live = torch.randn(4, 8, generator=generator)
    for model, optimizer in zip(models, optimizers):
        with torch.no_grad():
            old = _response_log_probs(model, ids, 4) + 0.05
        full_step(model, optimizer, live, old)
    start = {name: p.detach().clone() for name, p in models[0].named_parameters()}

    with torch.no_grad():
        old = _response_log_probs(models[0], ids, 4) + 0.1 * torch.randn(4, 8, generator=generator)
    full_step(models[0], optimizers[0], torch.zeros(4, 8), old)
    assert all(torch.equal(p.grad, torch.zeros_like(p)) for p in models[0].parameters())

    engine = object.__new__(transformer_impl.FSDPEngine)
    engine.module = models[1]
    patches.patch_zero_gradient_updates(transformer_impl)
    optimizers[1].zero_grad()
    data = tu.get_tensordict({"input_ids": ids}, non_tensor_dict={patches.ZERO_GRADIENT_UPDATE: True})
    output = transformer_impl.FSDPEngine.forward_backward_batch(engine, data, loss_function=None)
    assert output == {"model_output": {}, "loss": [0.0], "metrics": {}}
    torch.nn.utils.clip_grad_norm_(models[1].parameters(), max_norm=1.0)
    optimizers[1].step()

    for (name, full), (_, shortcut) in zip(models[0].named_parameters(), models[1].named_parameters()):
        assert torch.equal(full, shortcut), name
    assert any(not torch.equal(p, start[name]) for name, p in models[0].named_parameters())


def test_the_zero_gradient_shortcut_is_taken_only_where_zeros_are_the_exact_gradient():
    """Experts, a vision tower or dropout: verl's pass would leave some gradients None (AdamW then skips those
    weights) or draw random numbers, so the engine runs the full pass there."""
    from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

    from fspo.cpu.patches import zero_gradient_is_exact

    tiny = {"vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
            "num_attention_heads": 2, "num_key_value_heads": 1}  # fmt: skip
    assert zero_gradient_is_exact(LlamaForCausalLM(LlamaConfig(**tiny)))
    assert not zero_gradient_is_exact(LlamaForCausalLM(LlamaConfig(**tiny, attention_dropout=0.1)))
    assert not zero_gradient_is_exact(MixtralForCausalLM(MixtralConfig(**tiny, num_local_experts=2)))
    assert not zero_gradient_is_exact(torch.nn.Linear(2, 2))  # no model config: the full pass
