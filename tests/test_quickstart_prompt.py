"""The quickstart's prompt: the worked example as a chat turn before each question (issue 42's dead steps).

The untrained SmolLM2-135M follows the example's format far more often as a turn than inside the system
message (benchmarks/dead_steps.py); these tests pin what the prompt must hold for that to be a demonstration
of the rewarded format and nothing else.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.config.verifier import verifier_config
from fspo.quickstart.cli import (
    EXAMPLE_ANSWER,
    EXAMPLE_QUESTION,
    INSTRUCTION,
    PROMPT_FORMAT,
    TASK,
    VERIFIER,
    quickstart_rows,
)
from fspo.steps import reasoning_steps
from fspo.training.outcome import compute_score
from fspo.training.prompt_formats import render_prompt
from fspo.verifiers import build_verifier


def test_the_worked_example_earns_the_full_reward_with_steps_the_training_verifier_supports():
    # The response a rollout writes after the generation prompt's "<think>".
    response = EXAMPLE_ANSWER.removeprefix("<think>")
    assert compute_score("synthetic_multihop", response, "Lima")["score"] == 1.0
    evidence = EXAMPLE_QUESTION.removeprefix("Context:\n").split("\n\n")[0]
    steps = [step.text for step in reasoning_steps(response)]
    assert len(steps) == 2
    verifier = build_verifier(verifier_config(VERIFIER))
    assert all(score >= VERIFIER["threshold"] for score in verifier.score([(evidence, step) for step in steps]))


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from(["train", "test"]))
def test_each_question_follows_the_example_turn_and_the_response_opens_think(seed, split):
    (row,) = quickstart_rows(1, seed, split)
    text = render_prompt(list(row["prompt"]), PROMPT_FORMAT)
    example_at = text.index(EXAMPLE_ANSWER)
    question_at = text.index("Context:\n" + row["extra_info"]["evidence"])
    assert text.index(TASK) < text.index(EXAMPLE_QUESTION) < example_at < question_at
    assert text.endswith("<|im_start|>assistant\n<think>")
    assert text.count(EXAMPLE_ANSWER) == 1 and INSTRUCTION not in text


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**16))
def test_the_example_inside_the_system_message_is_the_prompt_before(seed):
    (turn,) = quickstart_rows(1, seed, "train")
    (system,) = quickstart_rows(1, seed, "train", example_turn=False)
    assert system["prompt"] == [{"role": "system", "content": INSTRUCTION}, turn["prompt"][-1]]
    assert {k: v for k, v in system.items() if k != "prompt"} == {k: v for k, v in turn.items() if k != "prompt"}
