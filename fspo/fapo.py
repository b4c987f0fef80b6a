"""FAPO's flawed-positive penalty (Ding et al., arXiv 2510.22543; verl-recipe ``fapo/``) on this project's verifier.

A flawed positive is a rollout whose answer is right but whose reasoning is not: FAPO's generative reward
model (GenRM) names the first wrong step of a correct rollout, and any such step makes it a flawed positive.
Here the step verifier plays the GenRM: a correct rollout with at least one unsupported step (verdict -1)
is a flawed positive (the ``llm_judge`` verifier can serve as a GenRM over an OpenAI-compatible server).

FAPO's reward is the outcome reward minus ``lambda`` for a flawed positive. It needs no schedule of its own:
under a group-relative advantage (GRPO) a flawed positive's advantage is its reward minus the group mean,
which is positive while failed rollouts outnumber the fully correct ones (the warm-up stage: the shortcut
still helps) and turns negative once fully correct rollouts outnumber failed ones (the refinement stage).
With rewards ``r_right``/``r_wrong`` and shares alpha (fully correct), beta (failed) in a group, the
sign changes at ``alpha / beta = (g - lambda) / lambda`` for the gap ``g = r_right - r_wrong``; FAPO's
majority rule puts the switch at ``alpha = beta``, so ``lambda = g / 2``: 1 on FAPO's +-1 rewards (its
recipe's ``FLAWED_REWARD_PENALTY = 1.0``), 0.5 on this project's 0-1 outcome scores
(:func:`majority_guided_penalty`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fspo.reward_extra_info import RolloutStats

# A right answer's and a wrong answer's outcome score in this project's scorers (fspo.outcome).
RIGHT_SCORE, WRONG_SCORE = 1.0, 0.0


def majority_guided_penalty(right: float = RIGHT_SCORE, wrong: float = WRONG_SCORE) -> float:
    """FAPO's lambda: half the gap between a right and a wrong answer's reward (see the module doc)."""
    if not right > wrong:
        raise ValueError(f"a right answer must score above a wrong one, got right={right}, wrong={wrong}")
    return (right - wrong) / 2.0


FAPO_PENALTY = majority_guided_penalty()


def is_correct(outcome_info: Mapping, score: float) -> bool:
    """Whether a rollout's answer is right: the scorer's ``acc`` when it gives one, else its score, at >= 0.5."""
    value = outcome_info.get("acc", score)
    try:
        return float(value) >= 0.5
    except (TypeError, ValueError):
        return False


def is_flawed_positive(correct: bool, unsupported_steps: int) -> bool:
    """A right answer reached through at least one unsupported step."""
    return bool(correct) and unsupported_steps > 0


def fapo_reward(correct: bool, unsupported_steps: int, penalty: float = FAPO_PENALTY) -> float:
    """What FAPO adds to a rollout's outcome reward: ``-penalty`` for a flawed positive, else 0."""
    return -penalty if is_flawed_positive(correct, unsupported_steps) else 0.0


def refinement_groups(groups: Sequence[Sequence[tuple[bool, bool]]]) -> float:
    """The share of prompt groups in FAPO's refinement stage (fully correct rollouts outnumber failed ones).

    Each group is its rollouts' ``(correct, flawed_positive)``; a group whose penalty pushes flawed
    positives below the group mean counts. 0.0 for no groups.
    """
    if not groups:
        return 0.0
    refining = 0
    for group in groups:
        fully_correct = sum(1 for correct, flawed in group if correct and not flawed)
        failed = sum(1 for correct, _ in group if not correct)
        refining += fully_correct > failed
    return refining / len(groups)


def rollout_groups(
    keys: Sequence[str], infos: Sequence[Mapping], padding: Sequence[bool]
) -> list[list[tuple[bool, bool]]]:
    """Each prompt's rollouts as ``(correct, flawed_positive)``, from a V1 batch's row keys and ``reward_extra_info``.

    Rows are keyed ``<uid>_<rollout>_<output>``; the outputs of one agent run share its numbers and count once,
    verl's pad rows not at all.
    """
    groups: dict[str, dict[str, tuple[bool, bool]]] = {}
    for key, info, is_pad in zip(keys, infos, padding):
        if is_pad:
            continue
        uid, _, rest = str(key).partition("_")
        run = rest.rsplit("_", 1)[0]
        stats = RolloutStats.from_info(info)
        groups.setdefault(uid, {})[run] = (bool(stats.correct), bool(stats.flawed_positive))
    return [list(runs.values()) for runs in groups.values()]
