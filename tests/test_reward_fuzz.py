"""The real reward manager against hostile rollouts: a scorer that never returns, and a seeded fuzz.

What a policy can emit is arbitrary text; whatever it is, the reward manager must return a finite reward,
labels covering the response exactly, and the same keys for every rollout, and it must return in time.
"""

from __future__ import annotations

import asyncio
import time

from omegaconf import OmegaConf

from fspo.training.reward import FSPORewardManager
from fspo.training.reward_extra_info import decode_labels, step_metrics
from fspo_testing.fuzz import fuzz_cases, fuzz_reward_manager  # the benchmark's generator, shared with its larger run
from fspo_testing.rollouts import single_rollout

EVIDENCE = "Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell."


def manager(tokenizer, **fspo):
    block = {"enable": True, "verifier": {"name": "lexical", "threshold": 0.5}, **fspo}
    return FSPORewardManager(OmegaConf.create({"fspo": block}), tokenizer, compute_score=None)


def one_rollout(tokenizer, response: str, data_source: str, ground_truth, extra_info):
    return single_rollout(
        tokenizer, response, data_source=data_source, ground_truth=ground_truth, extra_info=extra_info
    )


def test_a_scorer_that_never_returns_scores_zero_and_is_counted(qwen_tokenizer):
    reward_manager = manager(qwen_tokenizer, scorer_timeout_s=1.0)
    tower, tower_len = one_rollout(
        qwen_tokenizer, "<think> Big. </think><answer>$9^{9^{9^{9}}}$</answer>", "math500", "3", {"evidence": EVIDENCE}
    )
    fine, _ = one_rollout(qwen_tokenizer, "<think> Easy. </think><answer>3</answer>", "math500", "3", {})

    async def both():
        return await asyncio.gather(reward_manager.run_single(tower), reward_manager.run_single(fine))

    started = time.perf_counter()
    stuck, ok = asyncio.run(both())
    assert time.perf_counter() - started < 10
    assert stuck["reward_score"] == 0.0 and ok["reward_score"] == 1.0
    assert stuck["reward_extra_info"]["fspo_scorer_timeout"] == 1.0
    assert ok["reward_extra_info"]["fspo_scorer_timeout"] == 0.0
    assert set(stuck["reward_extra_info"]) == set(ok["reward_extra_info"])  # verl stacks them
    assert len(decode_labels(stuck["reward_extra_info"]["fspo_labels"], tower_len)) == tower_len
    infos = [stuck["reward_extra_info"], ok["reward_extra_info"]]
    assert step_metrics(infos)["fspo/scorer_timeouts"] == 1.0


def test_fuzzed_rollouts_never_crash_or_mislabel(qwen_tokenizer):
    # The benchmark (benchmarks/fuzz_reward.py) runs the same generator at 20,000 rollouts with power towers.
    cases = fuzz_cases(seed=1234, count=2000, vocab_size=len(qwen_tokenizer))
    counts, examples = fuzz_reward_manager(manager(qwen_tokenizer, scorer_timeout_s=10.0), qwen_tokenizer, cases)
    assert counts["rollouts"] == 2000
    found = {kind: counts[kind] for kind in ("crashes", "bad_labels", "non_finite_rewards", "key_mismatches")}
    assert found == dict.fromkeys(found, 0), examples
