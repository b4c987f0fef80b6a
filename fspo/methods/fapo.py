"""FAPO's flawed-positive penalty (Ding et al., arXiv 2510.22543; verl-recipe ``fapo/``) on this project's verifier.

FAPO's reward (verl-recipe ``fapo/reward_fn_reasoning.py``, ``compute_score_fapo``) is +1 for a right answer
(exact match of the boxed answer, line 110), -1 for a wrong one, and ``FLAWED_REWARD_PENALTY = 1.0`` (line 74) less
for a flawed positive (line 147): a right answer in which its generative reward model (FAPO-GenRM, a trained 4B
model) names a first wrong step, ``\boxed{k}`` with ``k != -1`` (line 142; an unparsable reply counts as no error).
Only right training rollouts are judged (line 114).

Here the step verifier plays the GenRM: a right rollout with at least one unsupported step (verdict -1) is a
flawed positive; the ``llm_judge`` verifier can instead ask a chat model for FAPO-GenRM's first-error index
(``fspo.verifier.reply_format=first_error``). The reward is on 0-1 scores, FAPO's mapped by ``(r + 1) / 2``: right 1,
wrong 0, a flawed positive ``1 - lambda`` with ``lambda = 0.5`` (FAPO's 1.0 over its gap of 2). "Right" is the
outcome scorer's ``acc`` (exact match for spans), not its F1 score: a partly right answer is wrong, as in FAPO.

Its activation needs no schedule: under GRPO a flawed positive's advantage is its reward minus the group mean,
which with ``a`` fully correct and ``b`` failed rollouts in a group has the sign of ``b * (1 - lambda) - a * lambda``
(any number of flawed positives). At ``lambda = 0.5`` (:func:`majority_guided_penalty`) the penalty pushes a flawed
positive down exactly when fully correct rollouts outnumber failed ones (the refinement stage) and it is still
reinforced while failed ones outnumber them (the warm-up stage). This holds for this mode's binary rewards only:
on graded failures (F1 between 0 and 1) the group mean moves with the failures' scores.

Held-out rows (``extra_info["split"] == "test"``, as ``fspo data`` and FAPO's ``prepare_fapo_data.py`` line 48 write
them) score by correctness alone, as FAPO's reward function returns them before its GenRM (line 114): validation
rewards are then comparable across modes. The split is what tells them apart: verl 0.9.1 does not pass the
trainer's ``validate`` flag to the reward manager (``trainer/ppo/v1/agent_loop_tq.py`` lines 61-62 drop it; the
manager gets the row's columns, ``experimental/agent_loop/agent_loop.py`` lines 1013-1019).

FAPO's recipe also sets DAPO's overlong penalty (``run_fapo_7b.sh`` lines 18-21, 128-133) through verl's
``reward.reward_kwargs``, which verl's ``dapo`` reward manager reads (``experimental/reward_loop/reward_manager/
dapo.py`` lines 33-35); :class:`OverlongBuffer` reads the same keys for this project's reward manager, which
leaves held-out rows without it too (verl's dapo manager applies it to every row, dapo.py line 108).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

from fspo.config.numeric_options import COUNT, REWARD_TERM, NumberError
from fspo.config.vocabulary import ConfigError

# A right answer's and a wrong answer's outcome score in this project's scorers (fspo.training.outcome).
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


# The split of the rows FAPO's reward function scores without its GenRM (reward_fn_reasoning.py line 114).
HELD_OUT_SPLIT = "test"


def is_held_out(extra_info: Mapping) -> bool:
    """Whether a row is held out for evaluation: its ``extra_info["split"]`` is ``"test"``."""
    return isinstance(extra_info, Mapping) and extra_info.get("split") == HELD_OUT_SPLIT


def fapo_reward(correct: bool, unsupported_steps: int, penalty: float = FAPO_PENALTY, held_out: bool = False) -> float:
    """What FAPO adds to a rollout's outcome reward: ``-penalty`` for a flawed positive of a training row, else 0."""
    return -penalty if is_flawed_positive(correct, unsupported_steps) and not held_out else 0.0


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


@dataclass(frozen=True)
class OverlongBuffer:
    """DAPO's overlong penalty: a response longer than ``max_length - length`` tokens loses ``factor`` x its excess
    over ``length``, reaching ``factor`` at ``max_length`` (verl's ``dapo`` reward manager, dapo.py lines 108-114).

    ``log``: report each rollout's ``overlong_reward`` and ``overlong`` (dapo.py lines 115-117).
    """

    max_length: int
    length: int
    factor: float
    log: bool = False

    def penalty(self, response_length: int) -> float:
        """What a response of ``response_length`` tokens adds to its reward (<= 0)."""
        excess = response_length - (self.max_length - self.length)
        return min(-excess / self.length * self.factor, 0.0)


# Where verl's dapo reward manager reads the overlong penalty (dapo.py lines 33-35).
REWARD_KWARGS = "reward.reward_kwargs"
OVERLONG_CFG = f"{REWARD_KWARGS}.overlong_buffer_cfg"


def _overlong_setting(number, key: str, value):
    """``value`` of ``key`` checked as ``number``; ConfigError (one line naming the key) if unset or out of range."""
    if value is None:
        raise ConfigError(f"{key} is not set: {OVERLONG_CFG}.enable=true needs it")
    try:
        return number.check(key, value)
    except NumberError as error:
        raise ConfigError(str(error)) from None


def overlong_buffer(config: Optional[Mapping]) -> Optional[OverlongBuffer]:
    """The overlong penalty a run's ``config`` sets in ``reward.reward_kwargs`` (None: off).

    Raises:
        ConfigError: one line naming the key: ``max_resp_len`` or ``overlong_buffer_cfg.len`` unset or not a
            positive integer, a buffer longer than ``max_resp_len``, a ``penalty_factor`` that is not a number >= 0,
            a ``max_resp_len`` below ``data.max_response_length`` (the penalty would pass ``penalty_factor``).
    """
    reward = (config.get("reward") if config is not None else None) or {}
    kwargs = reward.get("reward_kwargs") or {}
    buffer = kwargs.get("overlong_buffer_cfg") or {}
    if not buffer.get("enable"):
        return None
    max_length = _overlong_setting(COUNT, f"{REWARD_KWARGS}.max_resp_len", kwargs.get("max_resp_len"))
    length = _overlong_setting(COUNT, f"{OVERLONG_CFG}.len", buffer.get("len"))
    factor = _overlong_setting(REWARD_TERM, f"{OVERLONG_CFG}.penalty_factor", buffer.get("penalty_factor"))
    if length > max_length:
        raise ConfigError(
            f"{OVERLONG_CFG}.len={length} must be at most {REWARD_KWARGS}.max_resp_len={max_length}: the buffer is "
            "the last part of the response limit"
        )
    response_limit = ((config.get("data") if config is not None else None) or {}).get("max_response_length")
    if isinstance(response_limit, int) and max_length < response_limit:  # verl's dapo manager sets no floor either
        raise ConfigError(
            f"{REWARD_KWARGS}.max_resp_len={max_length} is below data.max_response_length={response_limit}: a longer "
            f"response would lose more than penalty_factor; set {REWARD_KWARGS}.max_resp_len='${{data.max_response_length}}'"
        )
    return OverlongBuffer(int(max_length), int(length), float(factor), bool(buffer.get("log", False)))
