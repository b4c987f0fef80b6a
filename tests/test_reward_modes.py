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

from fspo.config.fspo_config import fspo_config
from fspo.config.vocabulary import ConfigError
from fspo.methods.fapo import (
    fapo_reward,
    is_correct,
    is_flawed_positive,
    majority_guided_penalty,
    refinement_groups,
)
from fspo.methods.knowrl import (
    KNOWRL_REFUSAL,
    KNOWRL_RIGHT,
    KNOWRL_WRONG,
    fact_score,
    is_refusal,
    knowrl_reward,
    length_penalty,
    on_unit_scale,
)
from fspo.methods.reward_modes import added_reward, rollout_reward
from fspo.training.reward import FSPORewardManager
from fspo.training.reward_extra_info import RolloutStats, rollout_groups, step_metrics
from fspo_testing.rollouts import single_rollout

EVIDENCE = "Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell."
GOOD = " Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell.\n</think> <answer> Piobrdell </answer>"
# A right answer reached through an unsupported step: FAPO's flawed positive.
FLAWED = " Stesta Bagu works for Vigio Shipping. The moon base orbits Jupiter quickly.\n</think> <answer> Piobrdell </answer>"
BAD = " Gorlan Pex sells blue apples. The moon base orbits Jupiter quickly.\n</think> <answer> Jupiter </answer>"


# --- KnowRL -------------------------------------------------------------------------------------------------


def knowrl_released(grade: float, refusal: bool, fact: float) -> float:
    """KnowRL's released reward on its own scale, as a fact about zjunlp/KnowRL (not its code):
    ``combined_reward.py`` lines 38-39, a wrong (-1), non-refusing answer gets -1 + FActScore; a right (+2) or
    refused (+1) one keeps its grade (``correct_reward.py`` lines 81-86)."""
    return grade + fact if grade == KNOWRL_WRONG and not refusal else grade


def test_knowrl_fact_score_by_hand():
    """zjunlp/KnowRL ``train/reward_function/FActScore/factscore/factscorer.py`` lines 727-733: the mean of the
    facts' is_supported times ``exp(1 - gamma / len(facts))`` for len(facts) <= gamma, gamma = 10
    (``fact_reward.py`` line 125)."""
    assert fact_score(3, 1, gamma=10) == pytest.approx(0.75 * math.exp(-1.5))
    # More than gamma facts: no length penalty.
    assert fact_score(9, 3, gamma=10) == pytest.approx(0.75)
    assert fact_score(0, 0) == 0.0 and fact_score(2, 0, gamma=0) == 1.0


def test_knowrl_reward_by_hand_from_its_released_code():
    """zjunlp/KnowRL ``train/reward_function/combined_reward.py`` line 38-39 (``if llm_reward == -1 and not
    is_refusal: final_rewards[i] = -1 + fact_score``) with the grades of ``correct_reward.py`` lines 81-86 (+2, -1,
    +1): a wrong answer with 3 of 4 facts supported gets -1 + 0.75 e^-1.5 = -0.83265; here (r + 1) / 3 = 0.05578.
    A right answer keeps +2 -> 1 and a refusal +1 -> 2/3, whatever their facts."""
    config = fspo_config({"fspo": {"mode": "knowrl"}})
    assert config.knowrl_wrong_answers_only and config.claims_only
    # Weight 1/3 = KnowRL's weight 1 over its correctness gap (+2 right, -1 wrong), on 0-1 scores.
    assert config.knowrl_fact_weight == pytest.approx(1 / (KNOWRL_RIGHT - KNOWRL_WRONG))
    wrong = rollout_reward(config, 0.9, correct=False, supported=3, unsupported=1)
    assert knowrl_released(-1.0, False, 0.75 * math.exp(-1.5)) == pytest.approx(-0.832652, abs=1e-6)
    assert wrong == pytest.approx(0.055783, abs=1e-6) == on_unit_scale(-1 + 0.75 * math.exp(-1.5))
    assert rollout_reward(config, 1.0, correct=True, supported=3, unsupported=1) == 1.0
    assert rollout_reward(config, 0.0, correct=False, supported=3, unsupported=1, refused=True) == pytest.approx(2 / 3)
    # The case: a wrong answer at F1 0.9 with fully supported steps no longer outscores a right one.
    assert rollout_reward(config, 0.9, correct=False, supported=12, unsupported=0) == pytest.approx(1 / 3)


@given(
    st.sampled_from([KNOWRL_RIGHT, KNOWRL_WRONG, KNOWRL_REFUSAL]),
    st.integers(0, 30),
    st.integers(0, 30),
    st.floats(0, 1),
)
def test_knowrl_mode_is_the_released_reward_on_a_unit_scale(grade, supported, unsupported, outcome_f1):
    """Every rollout's reward in mode knowrl (defaults) is KnowRL's released reward mapped by (r + 1) / 3, whatever
    the outcome's F1; a positive affine map, so GRPO's advantages are KnowRL's."""
    refused = grade == KNOWRL_REFUSAL
    config = fspo_config({"fspo": {"mode": "knowrl"}})
    ours = rollout_reward(config, outcome_f1, grade == KNOWRL_RIGHT, supported, unsupported, refused)
    theirs = knowrl_released(grade, refused, fact_score(supported, unsupported))
    assert ours == pytest.approx(on_unit_scale(theirs), abs=1e-12)


@pytest.mark.parametrize(
    "answer, refused",
    [("I don't know.", True), ("Unknown", True), ("  i do NOT know ", True), ("Piobrdell", False), (None, False)],
)
def test_refusals_are_abstentions(answer, refused):
    assert is_refusal(answer) is refused


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


# --- no setting ranks a wrong answer above a right one -------------------------------------------------------

# One rollout of a prompt's group: outcome F1, exact match, judged steps (supported, unsupported), a refusal.
f1_rollouts = st.tuples(st.floats(0, 1), st.booleans(), st.integers(0, 25), st.integers(0, 25), st.booleans())
mode_settings = st.one_of(
    st.fixed_dictionaries(
        {
            "mode": st.just("knowrl"),
            "knowrl_fact_weight": st.floats(0, 1),
            "knowrl_length_gamma": st.floats(0, 30),
            "knowrl_wrong_answers_only": st.booleans(),
            "skip_non_claims": st.sampled_from([None, True, False]),
        }
    ),
    st.fixed_dictionaries(
        {
            "mode": st.just("fapo"),
            "fapo_penalty": st.floats(0, 1),
            "skip_non_claims": st.sampled_from([None, True, False]),
        }
    ),
)


@given(mode_settings, st.lists(f1_rollouts, min_size=2, max_size=8))
def test_no_setting_ranks_a_wrong_answer_above_a_right_one(block, group):
    """Over generated groups scored by answer F1 (a right answer is an exact match, F1 1; a wrong one any F1),
    every setting fspo_config accepts for modes knowrl and fapo keeps each wrong answer at or below each right one."""
    config = fspo_config({"fspo": block})
    right, wrong = [], []
    for f1, exact, supported, unsupported, refusal in group:
        info = {"score": 1.0 if exact else f1, "acc": float(exact), "f1": 1.0 if exact else f1}
        correct = is_correct(info, info["score"])
        reward = rollout_reward(config, info["score"], correct, supported, unsupported, refusal and not correct)
        (right if correct else wrong).append(reward)
    assume(right and wrong)
    assert max(wrong) <= min(right)


@pytest.mark.parametrize("key", ["knowrl_fact_weight", "fapo_penalty"])
def test_a_weight_above_the_right_wrong_gap_is_refused(key):
    """The bound is tight: at weight 1.5 a wrong answer with every step supported (KnowRL) would score 1.5 > 1, and
    a flawed positive (FAPO) -0.5 < 0."""
    with pytest.raises(ConfigError, match=f"^fspo.{key} must be at most 1 .*got 1.5"):
        fspo_config({"fspo": {key: 1.5}})
    assert knowrl_reward(20, 0, correct=False, weight=1.5) == 1.5 and fapo_reward(True, 1, penalty=1.5) == -1.5


# --- FAPO ---------------------------------------------------------------------------------------------------


def grpo_advantages(rewards: list[float]) -> list[float]:
    """verl's GRPO advantages of one group's outcome rewards."""
    scores = torch.zeros(len(rewards), 3)
    scores[:, -1] = torch.tensor(rewards)
    advantages, _ = compute_grpo_outcome_advantage(scores, torch.ones(len(rewards), 3), np.zeros(len(rewards)))
    return advantages[:, 0].tolist()


def test_fapo_reward_by_hand_from_its_recipe():
    """verl-recipe ``fapo/reward_fn_reasoning.py``: +1 right / -1 wrong (line 110), a flawed positive (GenRM's
    ``\\boxed{k}``, k != -1, line 142) loses ``FLAWED_REWARD_PENALTY = 1.0`` (lines 74, 147): 1, 0, -1, here
    (r + 1) / 2 = 1, 0.5, 0."""
    assert majority_guided_penalty(1.0, -1.0) == 1.0 and majority_guided_penalty() == 0.5
    config = fspo_config({"fspo": {"mode": "fapo"}})
    assert config.fapo_penalty == majority_guided_penalty() and config.claims_only
    rewards = [rollout_reward(config, f1, c, 2, u) for f1, c, u in [(1.0, True, 0), (1.0, True, 1), (0.6, False, 1)]]
    assert rewards == [(1 + 1) / 2, (1 - 1 + 1) / 2, (-1 + 1) / 2]
    assert fapo_reward(correct=True, unsupported_steps=0) == 0.0 and fapo_reward(False, 3) == 0.0
    # The group scored by F1: 1 right, 1 flawed, 2 failed at F1 0.6. On F1 rewards (1, 0.5, 0.6, 0.6) the
    # flawed positive is already pushed down while failed rollouts outnumber right ones; on FAPO's binary
    # rewards (1, 0.5, 0, 0) it is still reinforced (the warm-up stage).
    assert grpo_advantages([1.0, 0.5, 0.6, 0.6])[1] < 0
    group = [(1.0, True, 0), (1.0, True, 1), (0.6, False, 0), (0.6, False, 0)]
    assert grpo_advantages([rollout_reward(config, f1, c, 2, u) for f1, c, u in group])[1] > 0
    # Refinement: 2 fully correct, 1 flawed, 1 failed -> mean 0.625: the flawed positive is pushed down.
    assert grpo_advantages([1.0, 1.0, 0.5, 0.0])[2] < 0
    assert refinement_groups([[(True, False), (True, True), (False, False), (False, False)]]) == 0.0
    assert refinement_groups([[(True, False), (True, False), (True, True), (False, False)]]) == 1.0


@settings(deadline=None, max_examples=60)
@given(
    st.integers(0, 6),
    st.integers(1, 3),
    st.lists(st.floats(0, 0.99), max_size=6),
    st.sampled_from([0.25, 0.5, 0.75, 1.0]),
)
def test_fapo_penalty_switches_on_when_correct_outnumber_failed(fully_correct, flawed, failed_f1, penalty):
    """Under verl's GRPO, on groups whose failed rollouts carry any F1, a flawed positive's advantage has the sign
    of b (1 - lambda) - a lambda (a fully correct, b failed): at FAPO's lambda = 0.5 negative exactly when fully
    correct rollouts outnumber failed ones (its activation), positive when fewer, 0 when as many."""
    failed = len(failed_f1)
    assume(fully_correct + flawed + failed >= 2)  # verl's GRPO gives a lone rollout no baseline
    config = fspo_config({"fspo": {"mode": "fapo", "fapo_penalty": penalty}})
    group = [(1.0, True, 0)] * fully_correct + [(1.0, True, 1)] * flawed + [(f1, False, 1) for f1 in failed_f1]
    rewards = [rollout_reward(config, f1, correct, 3, unsupported) for f1, correct, unsupported in group]
    advantage = grpo_advantages(rewards)[fully_correct]
    sign = failed * (1 - penalty) - fully_correct * penalty
    if sign > 0:
        assert advantage > 0
    elif sign < 0:
        assert advantage < 0
    else:
        assert advantage == pytest.approx(0.0, abs=1e-5)
    if penalty == 0.5:
        assert (advantage < -1e-6) == (fully_correct > failed)
        flags = [(True, False)] * fully_correct + [(True, True)] * flawed + [(False, False)] * failed
        assert refinement_groups([flags]) == float(fully_correct > failed)


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


@given(st.integers(0, 20), st.integers(0, 20), st.booleans(), st.booleans(), st.sampled_from(["fspo", "fapo"]))
def test_a_held_out_row_scores_its_outcome_alone(supported, unsupported, correct, refused, mode):
    """Validation rewards compare with a GRPO run's: FAPO's penalty and the factuality-reward ablation shape
    training rows only (FAPO's reward function, fspo/methods/fapo.py's module doc)."""
    config = fspo_config({"fspo": {"mode": mode, "step_reward_weight": 0.5 if mode == "fspo" else 0.0}})
    assert added_reward(config, supported, unsupported, correct, refused, held_out=True) == 0.0


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


# A wrong answer by exact match that token F1 scores 2/3, reached through supported steps only.
PARTLY_RIGHT = " Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell.\n</think> <answer> Piobrdell city </answer>"
REFUSAL = " Let me think. Stesta Bagu works for Vigio Shipping.\n</think> <answer> I don't know </answer>"


def test_knowrl_mode_rewards_as_its_released_code(qwen_tokenizer):
    # A right answer: KnowRL's +2 -> 1, no factuality reward (combined_reward.py line 38).
    assert run_manager(qwen_tokenizer, GOOD, mode="knowrl")["reward_score"] == pytest.approx(1.0)
    assert run_manager(qwen_tokenizer, FLAWED, mode="knowrl")["reward_score"] == pytest.approx(1.0)
    # Wrong by exact match (F1 2/3 does not enter): 2 supported steps of 2, share 1 x exp(1 - 10/2), weight 1/3.
    partly = run_manager(qwen_tokenizer, PARTLY_RIGHT, mode="knowrl")
    assert partly["reward_extra_info"]["f1"] == pytest.approx(2 / 3)
    assert partly["reward_score"] == pytest.approx(math.exp(-4) / 3)
    assert partly["reward_extra_info"]["fspo_step_reward"] == pytest.approx(math.exp(-4) / 3)
    # A refusal: KnowRL's +1 -> 2/3 and no factuality reward; "Let me think." is no claim and goes unjudged.
    refusal = run_manager(qwen_tokenizer, REFUSAL, mode="knowrl")
    assert refusal["reward_score"] == pytest.approx(2 / 3) and refusal["reward_extra_info"]["fspo_steps"] == 1.0
    # The variant off the released code: every non-refusing answer gains it.
    every = run_manager(qwen_tokenizer, GOOD, mode="knowrl", knowrl_wrong_answers_only=False)
    assert every["reward_score"] == pytest.approx(1.0 + math.exp(-4) / 3)
    # FSPO's mode keeps the F1 score and judges every step.
    fspo = run_manager(qwen_tokenizer, REFUSAL)
    assert fspo["reward_score"] == 0.0 and fspo["reward_extra_info"]["fspo_steps"] == 2.0


def test_fapo_mode_penalises_a_flawed_positive_only(qwen_tokenizer):
    flawed = run_manager(qwen_tokenizer, FLAWED, mode="fapo")
    assert flawed["reward_score"] == pytest.approx(0.5)
    assert flawed["reward_extra_info"]["fspo_flawed_positive"] == 1.0
    assert run_manager(qwen_tokenizer, GOOD, mode="fapo")["reward_score"] == pytest.approx(1.0)
    bad = run_manager(qwen_tokenizer, BAD, mode="fapo")
    assert bad["reward_score"] == 0.0 and bad["reward_extra_info"]["fspo_flawed_positive"] == 0.0
    # Wrong by exact match: 0, not its F1 of 2/3.
    assert run_manager(qwen_tokenizer, PARTLY_RIGHT, mode="fapo")["reward_score"] == 0.0
