"""KnowRL's factuality reward (Ren et al., arXiv 2506.19807) on this project's steps and verifier.

KnowRL adds to GRPO's format and correctness rewards a factuality reward over the thinking: FActScore
(Min et al.) of the ``<think>`` text, i.e. the share of its atomic facts that the knowledge supports,
times FActScore's length penalty ``exp(1 - gamma / n)`` for ``n <= gamma`` facts (KnowRL calls FActScore
with ``gamma=10``), so that saying little does not score high. Here

- the facts are the reasoning steps of :func:`fspo.steps.reasoning_steps` (FActScore asks an LLM to split the
  text into atomic facts; the ``llm_judge`` verifier can serve as that judge over an OpenAI-compatible server),
- "supported" is the step verifier's verdict against the row's evidence (FActScore's retrieval + NLI/LLM check),
  and unverifiable steps (verdict 0) count in neither the share nor ``n``;
- the reward is sequence level: one number added to the rollout's outcome reward, no advantage flip.

KnowRL's correctness reward is +2 right, -1 wrong (+1 for a refusal) and its factuality reward has weight 1,
so the factuality reward spans a third of the right-wrong gap; on this project's outcome scores (0 wrong to
1 right) the same ratio is a weight of 1/3 (``fspo.knowrl_fact_weight``). KnowRL's paper adds the factuality
reward to every rollout; its released code (``combined_reward.py``) adds it only to wrong, non-refusing
answers (``fspo.knowrl_wrong_answers_only=true``).
"""

from __future__ import annotations

import math

# FActScore's length penalty constant as KnowRL passes it (factscorer.get_score(gamma=10)).
KNOWRL_LENGTH_GAMMA = 10.0


def length_penalty(facts: int, gamma: float) -> float:
    """FActScore's length penalty: 1 for more than ``gamma`` facts, else ``exp(1 - gamma / facts)``; 1 when gamma is 0."""
    if facts <= 0:
        return 0.0
    if not gamma or facts > gamma:
        return 1.0
    return math.exp(1.0 - gamma / facts)


def fact_score(supported: int, unsupported: int, gamma: float = KNOWRL_LENGTH_GAMMA) -> float:
    """The share of supported facts times the length penalty over the ``supported + unsupported`` judged facts.

    0 when no fact was judged (FActScore scores a response without facts 0).
    """
    if supported < 0 or unsupported < 0:
        raise ValueError(f"fact counts must be >= 0, got supported={supported}, unsupported={unsupported}")
    facts = supported + unsupported
    if facts == 0:
        return 0.0
    return supported / facts * length_penalty(facts, gamma)


def knowrl_reward(
    supported: int,
    unsupported: int,
    correct: bool,
    weight: float,
    gamma: float = KNOWRL_LENGTH_GAMMA,
    wrong_answers_only: bool = False,
) -> float:
    """What KnowRL adds to a rollout's outcome reward: ``weight * fact_score`` (0 for a right answer when
    ``wrong_answers_only``, as KnowRL's released code)."""
    if wrong_answers_only and correct:
        return 0.0
    return weight * fact_score(supported, unsupported, gamma)
