"""The sequence-level reward each ``fspo.mode`` adds to a rollout's outcome reward from its step verdicts.

``fspo`` adds ``step_reward_weight`` x the mean step label (the paper's factuality-reward ablation; 0 by
default: FSPO's own signal is the trainer's advantage flip), ``knowrl`` KnowRL's factuality reward
(:mod:`fspo.knowrl`), ``fapo`` FAPO's flawed-positive penalty (:mod:`fspo.fapo`).
"""

from __future__ import annotations

from fspo.fapo import fapo_reward
from fspo.knowrl import knowrl_reward


def added_reward(settings, supported: int, unsupported: int, correct: bool) -> float:
    """What ``settings.mode`` (an :class:`fspo.config.fspo_config.FSPOConfig`) adds to the outcome reward of a
    rollout with these judged step counts and answer correctness."""
    if settings.mode == "knowrl":
        return knowrl_reward(
            supported,
            unsupported,
            correct,
            weight=settings.knowrl_fact_weight,
            gamma=settings.knowrl_length_gamma,
            wrong_answers_only=settings.knowrl_wrong_answers_only,
        )
    if settings.mode == "fapo":
        return fapo_reward(correct, unsupported, settings.fapo_penalty)
    judged = supported + unsupported
    return settings.step_reward_weight * (supported - unsupported) / judged if judged else 0.0
