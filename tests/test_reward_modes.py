"""The reward modes beside FSPO's flip: KnowRL's factuality reward and FAPO's flawed-positive penalty.

Each against a hand-worked example from its paper's definition, property tests of the pure functions, and the
real reward manager (real tokenizer, lexical verifier) in each mode.
"""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from fspo.config.fspo_config import FSPOConfig, fspo_config
from fspo.config.vocabulary import ConfigError
from fspo.fapo import (
    fapo_reward,
    is_correct,
    is_flawed_positive,
    majority_guided_penalty,
    refinement_groups,
    rollout_groups,
)
from fspo.knowrl import fact_score, knowrl_reward, length_penalty
from fspo.reward import FSPORewardManager
from fspo.reward_extra_info import RolloutStats, step_metrics
from fspo.reward_modes import added_reward
from fspo_testing.rollouts import single_rollout

EVIDENCE = "Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell."
GOOD = " Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell.\n</think> <answer> Piobrdell </answer>"
# A right answer reached through an unsupported step: FAPO's flawed positive.
FLAWED = " Stesta Bagu works for Vigio Shipping. The moon base orbits Jupiter quickly.\n</think> <answer> Piobrdell </answer>"
BAD = " Gorlan Pex sells blue apples. The moon base orbits Jupiter quickly.\n</think> <answer> Jupiter </answer>"


# --- KnowRL -------------------------------------------------------------------------------------------------


def test_knowrl_fact_score_by_hand():
    # FActScore as KnowRL calls it (gamma=10): 3 of 4 facts supported -> 0.75 x exp(1 - 10/4).
    assert fact_score(3, 1, gamma=10) == pytest.approx(0.75 * math.exp(-1.5))
    # More than gamma facts: no length penalty.
    assert fact_score(9, 3, gamma=10) == pytest.approx(0.75)
    assert fact_score(0, 0) == 0.0 and fact_score(2, 0, gamma=0) == 1.0
    # Weight 1/3 = KnowRL's weight 1 over its correctness gap (+2 right, -1 wrong), on 0-1 outcome scores.
    assert FSPOConfig().knowrl_fact_weight == pytest.approx(1 / (2 - (-1)))
    assert knowrl_reward(9, 3, correct=True, weight=1 / 3) == pytest.approx(0.25)
    # The released code adds it to wrong answers only.
    assert knowrl_reward(9, 3, correct=True, weight=1 / 3, wrong_answers_only=True) == 0.0
    assert knowrl_reward(9, 3, correct=False, weight=1 / 3, wrong_answers_only=True) == pytest.approx(0.25)


@given(st.integers(0, 60), st.integers(0, 60), st.floats(0, 30))
def test_knowrl_fact_score_is_a_penalised_share(supported, unsupported, gamma):
    score = fact_score(supported, unsupported, gamma)
    assert 0.0 <= score <= 1.0
    if supported + unsupported:
        assert score <= supported / (supported + unsupported) + 1e-12
        # One more supported fact never lowers it.
        assert fact_score(supported + 1, unsupported, gamma) >= score - 1e-12


@given(st.integers(1, 100), st.floats(0, 50))
def test_length_penalty_grows_to_one(facts, gamma):
    assert 0.0 < length_penalty(facts, gamma) <= 1.0
    assert length_penalty(facts + 1, gamma) >= length_penalty(facts, gamma)
    assert length_penalty(facts, gamma) == 1.0 or facts <= gamma


# --- FAPO ---------------------------------------------------------------------------------------------------


def grpo_advantages(rewards: list[float]) -> list[float]:
    """verl's GRPO advantages of one group's outcome rewards."""
    scores = torch.zeros(len(rewards), 3)
    scores[:, -1] = torch.tensor(rewards)
    advantages, _ = compute_grpo_outcome_advantage(scores, torch.ones(len(rewards), 3), np.zeros(len(rewards)))
    return advantages[:, 0].tolist()


def test_fapo_majority_guided_penalty_by_hand():
    # FAPO's +-1 rewards: lambda = 1 (its recipe's FLAWED_REWARD_PENALTY); this project's 0-1 scores: 0.5.
    assert majority_guided_penalty(1.0, -1.0) == 1.0 and majority_guided_penalty() == 0.5
    assert FSPOConfig().fapo_penalty == majority_guided_penalty()
    assert fapo_reward(correct=True, unsupported_steps=1, penalty=0.5) == -0.5
    assert fapo_reward(correct=True, unsupported_steps=0) == 0.0 and fapo_reward(False, 3) == 0.0
    # Warm-up: 1 fully correct, 1 flawed, 2 failed -> rewards 1, 0.5, 0, 0: the flawed positive is still above
    # the group mean (0.375) and reinforced.
    assert grpo_advantages([1.0, 0.5, 0.0, 0.0])[1] > 0
    # Refinement: 2 fully correct, 1 flawed, 1 failed -> mean 0.625: the flawed positive is pushed down.
    assert grpo_advantages([1.0, 1.0, 0.5, 0.0])[2] < 0
    assert refinement_groups([[(True, False), (True, True), (False, False), (False, False)]]) == 0.0
    assert refinement_groups([[(True, False), (True, False), (True, True), (False, False)]]) == 1.0


@settings(deadline=None, max_examples=60)
@given(st.integers(0, 6), st.integers(1, 3), st.integers(0, 6))
def test_fapo_penalty_switches_on_when_correct_outnumber_failed(fully_correct, flawed, failed):
    """Under GRPO, with the majority-guided penalty, a flawed positive's advantage is negative exactly when
    fully correct rollouts outnumber failed ones (FAPO's activation), positive when fewer, 0 when as many."""
    assume(fully_correct + flawed + failed >= 2)  # verl's GRPO gives a lone rollout no baseline
    right, wrong = 1.0, 0.0
    rewards = [right] * fully_correct + [right + fapo_reward(True, 1)] * flawed + [wrong] * failed
    advantage = grpo_advantages(rewards)[fully_correct]
    if fully_correct > failed:
        assert advantage < 0
    elif fully_correct < failed:
        assert advantage > 0
    else:
        assert advantage == pytest.approx(0.0, abs=1e-5)
    group = [(True, False)] * fully_correct + [(True, True)] * flawed + [(False, False)] * failed
    assert refinement_groups([group]) == float(fully_correct > failed)


def test_correctness_and_flawed_positives():
    assert is_correct({"acc": 1.0, "score": 0.2}, 0.2) and not is_correct({"acc": 0.0}, 1.0)
    assert is_correct({"score": 0.7}, 0.7) and not is_correct({}, 0.1)
    assert is_flawed_positive(True, 2) and not is_flawed_positive(True, 0) and not is_flawed_positive(False, 2)


def test_rollout_groups_count_each_run_once_and_skip_padding():
    right = RolloutStats(correct=1.0).as_info()
    flawed = RolloutStats(correct=1.0, flawed_positive=1.0).as_info()
    wrong = RolloutStats().as_info()
    keys = ["a_0_0", "a_0_1", "a_1_0", "b_0_0", "b_1_0"]
    groups = rollout_groups(keys, [right, right, flawed, wrong, wrong], [False, False, False, False, True])
    assert sorted(map(sorted, groups)) == [[(False, False)], [(True, False), (True, True)]]


def test_flawed_positive_rate_is_among_right_answers():
    infos = [
        RolloutStats(correct=1.0, flawed_positive=1.0).as_info(),
        RolloutStats(correct=1.0).as_info(),
        RolloutStats().as_info(),
    ]
    assert step_metrics(infos)["fspo/flawed_positive_rate"] == 0.5
    assert step_metrics([RolloutStats().as_info()])["fspo/flawed_positive_rate"] == 0.0


# --- config and the reward manager in each mode --------------------------------------------------------------


@pytest.mark.parametrize(
    "block, message",
    [
        ({"mode": "dpo"}, "fspo.mode must be one of fspo, knowrl, fapo, got 'dpo'"),
        ({"mode": "knowrl", "step_reward_weight": 0.5}, "fspo.step_reward_weight is the fspo mode's ablation"),
        ({"fapo_penalty": -1.0}, "fspo.fapo_penalty must be a finite number >= 0, got -1.0"),
        ({"knowrl_length_gamma": float("nan")}, "fspo.knowrl_length_gamma must be a finite number >= 0"),
    ],
)
def test_bad_mode_settings_are_named(block, message):
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        fspo_config({"fspo": block})


def test_only_the_fspo_mode_flips():
    assert fspo_config({"fspo": {}}).flips
    assert not fspo_config({"fspo": {"mode": "knowrl"}}).flips and not fspo_config({"fspo": {"mode": "fapo"}}).flips
    assert not fspo_config({"fspo": {"flip": False}}).flips


@given(st.integers(0, 20), st.integers(0, 20), st.booleans(), st.sampled_from(["fspo", "knowrl", "fapo"]))
def test_added_reward_is_bounded_by_its_weight(supported, unsupported, correct, mode):
    config = fspo_config({"fspo": {"mode": mode, "step_reward_weight": 0.5 if mode == "fspo" else 0.0}})
    added = added_reward(config, supported, unsupported, correct)
    if mode == "knowrl":
        assert 0.0 <= added <= config.knowrl_fact_weight
    elif mode == "fapo":
        assert added in (0.0, -config.fapo_penalty)
        assert (added < 0) == (correct and unsupported > 0)
    else:
        assert -0.5 <= added <= 0.5


def run_manager(tokenizer, response: str, **fspo) -> dict:
    config = OmegaConf.create({"fspo": {"enable": True, "verifier": {"name": "lexical"}, **fspo}})
    ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    data, _ = single_rollout(
        tokenizer,
        ids,
        data_source="synthetic_multihop",
        ground_truth="Piobrdell",
        extra_info={"index": 7, "split": "train", "evidence": EVIDENCE},
        padding=4,
    )
    return asyncio.run(FSPORewardManager(config, tokenizer, compute_score=None).run_single(data))


def test_knowrl_mode_adds_the_factuality_reward(qwen_tokenizer):
    good = run_manager(qwen_tokenizer, GOOD, mode="knowrl")
    # 2 supported steps of 2: share 1 x exp(1 - 10/2), weight 1/3, on the right answer's 1.0.
    assert good["reward_score"] == pytest.approx(1.0 + math.exp(-4) / 3)
    flawed = run_manager(qwen_tokenizer, FLAWED, mode="knowrl", knowrl_length_gamma=0.0)
    assert flawed["reward_score"] == pytest.approx(1.0 + 0.5 / 3)
    assert flawed["reward_extra_info"]["fspo_step_reward"] == pytest.approx(0.5 / 3)


def test_fapo_mode_penalises_a_flawed_positive_only(qwen_tokenizer):
    flawed = run_manager(qwen_tokenizer, FLAWED, mode="fapo")
    assert flawed["reward_score"] == pytest.approx(0.5)
    assert flawed["reward_extra_info"]["fspo_flawed_positive"] == 1.0
    assert run_manager(qwen_tokenizer, GOOD, mode="fapo")["reward_score"] == pytest.approx(1.0)
    bad = run_manager(qwen_tokenizer, BAD, mode="fapo")
    assert bad["reward_score"] == 0.0 and bad["reward_extra_info"]["fspo_flawed_positive"] == 0.0
