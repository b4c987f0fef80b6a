"""KnowRL's reward (Ren et al., arXiv 2506.19807; zjunlp/KnowRL ``train/reward_function/``) on this project's steps
and verifier.

KnowRL's released reward (``combined_reward.py``, lines 38-39 of its October 2025 version) is a correctness reward
from an LLM grader, +2 right, -1 wrong, +1 for a refusal (``correct_reward.py`` lines 81-86), and to a wrong,
non-refusing answer it adds the factuality reward: -1 + FActScore of the ``<think>`` text. FActScore
(``FActScore/factscore/factscorer.py`` lines 727-733) is the share of supported atomic facts times the length
penalty ``exp(1 - gamma / n)`` for ``n <= gamma`` facts, with ``gamma=10`` (``fact_reward.py`` line 125). A right
answer and a refusal get no factuality reward, so a wrong answer tops out at 0 against a right answer's +2. Its
first version (June 2025, commit e6d2e88) grades a refusal -1 like a wrong answer and adds the factuality reward to
every answer graded -1.

Here, on 0-1 outcome scores, the reward is KnowRL's mapped by ``(r + 1) / 3``: right 1, wrong 0, refusal 2/3, and
a wrong non-refusing answer gains ``weight * fact_score`` with ``weight = 1/3``. GRPO's advantage (reward minus the
group mean, over the group's standard deviation) is the same for any positive affine map of the rewards, so these
are KnowRL's advantages. "Right" is the outcome scorer's ``acc`` (exact match for spans), as KnowRL's grader is
binary; the F1 score does not enter. KnowRL's format reward (+1/-1) is not added: the outcome scorers here parse
the answer themselves.

What replaces what:

- atomic facts -> the reasoning steps of :func:`fspo.steps.reasoning_steps` (FActScore asks an LLM to split the
  text into atomic facts), each statement once (:func:`distinct_statements`): FActScore's parser keeps a fact
  once, compared lowercased (``atomic_fact_generator.py`` lines 290-294), so repeating one supported step ten
  times does not earn the whole length penalty. ``n`` counts the distinct steps the verifier judged (verdict +1
  or -1), not atomic facts, so ``gamma = 10`` means 10 judged steps. At the quickstart's lengths a step states
  one fact: 272 of the 277 judged steps of ``tests/data/judged_quickstart_steps.jsonl`` are one clause
  (:func:`fspo.verifiers.clauses.split_clauses`), so cutting steps into clauses would raise ``n`` by 2%.
  With ``fspo.skip_non_claims`` (on in this mode) steps that state nothing ("Let me think.", questions) are
  dropped first, as FActScore's fact generator drops ``NON_FACTUAL`` lines (``factscorer.py`` lines 672-675);
- FActScore's retrieval from a Wikipedia database + NLI check -> the step verifier against the row's evidence;
  unverifiable steps (verdict 0) count in neither the share nor ``n``;
- the grader's NOT_ATTEMPTED -> :func:`is_refusal`, a fixed list of abstentions matched against the answer.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from fspo.steps import Step

# FActScore's length penalty constant as KnowRL passes it (factscorer.get_score(gamma=10)).
KNOWRL_LENGTH_GAMMA = 10.0

# KnowRL's correctness rewards and their map onto this project's 0-1 scale, (r + 1) / 3.
KNOWRL_RIGHT, KNOWRL_WRONG, KNOWRL_REFUSAL = 2.0, -1.0, 1.0


def on_unit_scale(knowrl_reward: float) -> float:
    """A KnowRL reward on 0-1 outcome scores: the affine map taking wrong (-1) to 0 and right (+2) to 1."""
    return (knowrl_reward - KNOWRL_WRONG) / (KNOWRL_RIGHT - KNOWRL_WRONG)


# Answers that decline to answer (KnowRL's grader: "I don't know", "I need more context"), normalised as
# fspo.training.outcome.normalize_answer does, without the apostrophe.
_REFUSALS = frozenset(
    {
        "i dont know",
        "i do not know",
        "unknown",
        "not sure",
        "im not sure",
        "i am not sure",
        "no answer",
        "i have no comment",
        "no comment",
        "i cannot answer",
        "i cant answer",
        "cannot be determined",
        "cannot determine",
        "not enough information",
        "insufficient information",
        "i need more context",
        "the evidence does not say",
    }
)


def is_refusal(answer: str | None) -> bool:
    """Whether an extracted answer declines to answer (a fixed list, case and punctuation ignored); None (no
    answer block) is not a refusal: KnowRL's grader scores a missing answer -1 without the refusal flag."""
    if answer is None:
        return False
    normalized = " ".join(re.sub(r"[^\w\s]", "", answer.lower()).split())
    return normalized in _REFUSALS


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


def correctness_reward(correct: bool, refused: bool) -> float:
    """KnowRL's correctness reward on 0-1 scores: right 1, refusal 2/3, wrong 0."""
    if correct:
        return on_unit_scale(KNOWRL_RIGHT)
    return on_unit_scale(KNOWRL_REFUSAL if refused else KNOWRL_WRONG)


def knowrl_reward(
    supported: int,
    unsupported: int,
    correct: bool,
    weight: float,
    gamma: float = KNOWRL_LENGTH_GAMMA,
    wrong_answers_only: bool = True,
    refused: bool = False,
) -> float:
    """What KnowRL adds to the correctness reward: ``weight * fact_score`` for a wrong, non-refusing answer (its
    released code); with ``wrong_answers_only`` off, for every non-refusing answer (no released version does)."""
    if refused or (wrong_answers_only and correct):
        return 0.0
    return weight * fact_score(supported, unsupported, gamma)


def statement_key(text: str) -> str:
    """What two steps share when they state the same thing: the text lowercased, as FActScore compares facts,
    with runs of whitespace and a final ``.``/``!`` ignored (its LLM writes each fact as one clean sentence)."""
    return " ".join(text.lower().split()).rstrip(".! ")


def distinct_statements(steps: Sequence[Step]) -> list[Step]:
    """``steps`` with each statement (:func:`statement_key`) at its first occurrence only, in order."""
    seen: set[str] = set()
    kept = []
    for step in steps:
        key = statement_key(step.text)
        if key not in seen:
            seen.add(key)
            kept.append(step)
    return kept
