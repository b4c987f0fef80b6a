"""benchmarks/dead_steps.py's counting: which groups and steps carry a GRPO gradient, and the Wilson interval."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

_spec = importlib.util.spec_from_file_location("dead_steps", Path(__file__).parents[1] / "benchmarks" / "dead_steps.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

rewards = st.sampled_from([0.0, 0.5, 1.0])
prompt_rewards = st.lists(st.lists(rewards, min_size=8, max_size=8), max_size=20)


@settings(max_examples=30, deadline=None)
@given(st.lists(rewards, min_size=2, max_size=10))
def test_a_group_is_live_exactly_when_verls_grpo_gives_it_a_non_zero_advantage(group):
    import numpy as np
    import torch
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    token_rewards = torch.zeros(len(group), 3)
    token_rewards[:, -1] = torch.tensor(group)
    advantages, _ = compute_grpo_outcome_advantage(
        token_rewards, torch.ones(len(group), 3), np.array(["prompt"] * len(group), dtype=object)
    )
    assert bench.is_live(group) == bool(advantages.abs().max() > 0)


@given(prompt_rewards, st.integers(1, 4), st.integers(2, 8))
def test_live_counts_regroup_each_prompts_first_rollouts_into_steps(table, prompts_per_step, group):
    counts = bench.live_counts(table, prompts_per_step, group)
    steps = len(table) // prompts_per_step
    assert counts["steps"] == steps and counts["groups"] == steps * prompts_per_step
    live = [len(set(prompt[:group])) > 1 for prompt in table[: steps * prompts_per_step]]
    assert counts["live_groups"] == sum(live)
    # A step is live when any of its groups is: never more live steps than live groups, never fewer than
    # live groups spread as thinly as possible.
    assert -(-counts["live_groups"] // prompts_per_step) <= counts["live_steps"] <= min(steps, counts["live_groups"])


def test_live_counts_on_a_known_table():
    dead, live = [0.0] * 8, [0.0] * 7 + [1.0]
    table = [dead, dead, dead, live, live, dead, dead]  # the last prompt makes no whole step of 2
    assert bench.live_counts(table, 2, 8) == {"groups": 6, "live_groups": 2, "steps": 3, "live_steps": 2}
    assert bench.live_counts(table, 2, 4) == {"groups": 6, "live_groups": 0, "steps": 3, "live_steps": 0}


@given(st.integers(0, 200), st.integers(1, 200))
def test_wilson_interval_holds_the_share_and_stays_in_zero_one(successes, trials):
    successes = min(successes, trials)
    low, high = bench.wilson(successes, trials)
    assert 0.0 <= low <= successes / trials <= high <= 1.0


def test_wilson_interval_matches_the_textbook_value():
    # 8 of 12: Wilson 95% interval [0.391, 0.862] (Newcombe 1998's formula 3).
    assert bench.wilson(8, 12) == pytest.approx((0.3906, 0.8619), abs=1e-4)


@given(st.integers(1, 99), st.integers(2, 99))
def test_layouts_parse_and_bad_ones_say_what_a_layout_is(prompts, group):
    assert bench.parse_layout(f"{prompts}x{group}") == (prompts, group)
    for bad in (f"{prompts}*{group}", f"0x{group}", f"{prompts}x1", f"{prompts}x", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="PROMPTSxGROUP"):
            bench.parse_layout(bad)


@pytest.mark.parametrize(
    "response, finished, reward, kind",
    [
        (" A works for B. </think> <answer> Lima </answer>", True, 1.0, "scored"),
        (" A works for B. </think> <answer> Oslo </answer>", True, 0.0, "wrong"),
        (" A works for B.\n\nThe answer is: Lima.", True, 0.0, "no_answer"),
        (" A works for B. A works for B. A works", False, 0.0, "no_answer_cut"),
    ],
)
def test_rollout_kinds(response, finished, reward, kind):
    assert bench.rollout_kind(response, finished, reward) == kind


@given(prompt_rewards, st.integers(1, 4))
def test_the_first_live_step_is_live_and_every_step_before_it_dead(table, prompts_per_step):
    first = bench.first_live_step(table, prompts_per_step)
    steps = [table[s * prompts_per_step : (s + 1) * prompts_per_step] for s in range(len(table) // prompts_per_step)]
    live = [any(bench.is_live(group) for group in step) for step in steps]
    assert first == (live.index(True) + 1 if any(live) else None)
    assert (first is None) == (bench.live_counts(table, prompts_per_step, 8)["live_steps"] == 0)
