"""A rollout's reward in each ``fspo.mode`` from its outcome score, correctness and step verdicts.

``fspo`` keeps the outcome scorer's score and adds ``step_reward_weight`` x the mean step label (the paper's
factuality-reward ablation; 0 by default: FSPO's own signal is the trainer's advantage flip). ``knowrl`` and
``fapo`` reward as their authors' code does, on binary correctness (the scorer's ``acc``: exact match for spans,
as their graders' "correct" is), not on the scorer's F1: KnowRL's correctness and factuality rewards
(:mod:`fspo.methods.knowrl`), FAPO's +-1 outcome minus its flawed-positive penalty (:mod:`fspo.methods.fapo`), each mapped onto
0-1 by a positive affine map. GRPO's advantages do not change under it with verl's default
``algorithm.norm_adv_by_std_in_grpo=true`` (core_algos.py line 326); without the std they scale by the map's factor.
Within the ranges ``fspo_config`` allows
(``knowrl_fact_weight`` and ``fapo_penalty`` at most the right-wrong gap of 1), no wrong answer can score above a
right one on the same prompt.
"""

from __future__ import annotations

from fspo.methods.fapo import RIGHT_SCORE, WRONG_SCORE, fapo_reward
from fspo.methods.knowrl import correctness_reward, distinct_statements, knowrl_reward
from fspo.steps import Step, reasoning_steps


def judged_steps(settings, response: str) -> list[Step]:
    """The steps of ``response`` the verifier judges in ``settings.mode``: its reasoning steps (claims only with
    ``settings.claims_only``), in mode knowrl each statement once, as FActScore counts facts."""
    steps = reasoning_steps(response, claims_only=settings.claims_only)
    return distinct_statements(steps) if settings.mode == "knowrl" else steps


def base_reward(settings, outcome_score: float, correct: bool, refused: bool = False) -> float:
    """The reward before the step verdicts: the scorer's score in mode ``fspo``, binary correctness otherwise
    (KnowRL's refusal between wrong and right)."""
    if settings.mode == "knowrl":
        return correctness_reward(correct, refused)
    if settings.mode == "fapo":
        return RIGHT_SCORE if correct else WRONG_SCORE
    return outcome_score


def added_reward(
    settings, supported: int, unsupported: int, correct: bool, refused: bool = False, held_out: bool = False
) -> float:
    """What ``settings.mode`` (an :class:`fspo.config.fspo_config.FSPOConfig`) adds to :func:`base_reward` for a
    rollout with these judged step counts, answer correctness, refusal (mode knowrl only) and whether its row is
    held out (:func:`fspo.methods.fapo.is_held_out`). A held-out row gets no flawed-positive penalty (mode fapo) and
    no factuality reward (mode fspo), so validation scores the outcome as a GRPO run does; KnowRL's reward is its
    whole reward, held out or not."""
    if settings.mode == "knowrl":
        return knowrl_reward(
            supported,
            unsupported,
            correct,
            weight=settings.knowrl_fact_weight,
            gamma=settings.knowrl_length_gamma,
            wrong_answers_only=settings.knowrl_wrong_answers_only,
            refused=refused,
        )
    if settings.mode == "fapo":
        return fapo_reward(correct, unsupported, settings.fapo_penalty, held_out)
    judged = supported + unsupported
    if held_out or not judged:
        return 0.0
    return settings.step_reward_weight * (supported - unsupported) / judged


def rollout_reward(
    settings, outcome_score: float, correct: bool, supported: int, unsupported: int, refused: bool = False
) -> float:
    """A rollout's reward in ``settings.mode``: :func:`base_reward` + :func:`added_reward`."""
    return base_reward(settings, outcome_score, correct, refused) + added_reward(
        settings, supported, unsupported, correct, refused
    )
