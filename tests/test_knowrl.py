"""KnowRL's count of facts: each statement once, as FActScore's parser keeps each atomic fact once.

zjunlp/KnowRL at f75b0bb, ``train/reward_function/FActScore/factscore/atomic_fact_generator.py`` lines 290-294
(unchanged since its first release): a parsed fact is kept only when ``fact.lower()`` is not among the facts
already kept, so a thinking that states one fact twice has one fact, and the length penalty exp(1 - 10/n) of
``factscorer.py`` lines 729-733 sees n = 1.
"""

from __future__ import annotations

import asyncio
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from fspo.config.fspo_config import fspo_config
from fspo.methods.knowrl import distinct_statements, statement_key
from fspo.methods.reward_modes import judged_steps
from fspo.steps import Step
from fspo.training.reward import FSPORewardManager
from fspo_testing.rollouts import single_rollout

EVIDENCE = "Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell."
# A wrong answer whose one supported step is repeated (case and final period aside), as SmolLM2 writes them.
REPEATED = (
    " Stesta Bagu works for Vigio Shipping. STESTA BAGU works for  Vigio Shipping\n"
    "Stesta Bagu works for Vigio Shipping.\n</think> <answer> Lima </answer>"
)


def knowrl_reward_of(tokenizer, response: str, **fspo) -> dict:
    config = OmegaConf.create({"fspo": {"enable": True, "verifier": {"name": "lexical"}, "mode": "knowrl", **fspo}})
    ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    data, _ = single_rollout(
        tokenizer,
        ids,
        data_source="synthetic_multihop",
        ground_truth="Piobrdell",
        extra_info={"index": 3, "split": "train", "evidence": EVIDENCE},
    )
    return asyncio.run(FSPORewardManager(config, tokenizer, compute_score=None).run_single(data))


def test_a_repeated_step_counts_once_as_factscore_counts_a_fact(qwen_tokenizer):
    result = knowrl_reward_of(qwen_tokenizer, REPEATED)
    # One fact, supported: share 1 x exp(1 - 10/1), weight 1/3. Counting the three copies would give exp(1 - 10/3)/3.
    assert result["reward_extra_info"]["fspo_steps"] == 1.0
    assert result["reward_score"] == pytest.approx(math.exp(-9) / 3)


def test_only_mode_knowrl_drops_repeats():
    assert len(judged_steps(fspo_config({"fspo": {"mode": "knowrl"}}), REPEATED)) == 1
    for mode in ("fspo", "fapo"):
        assert len(judged_steps(fspo_config({"fspo": {"mode": mode}}), REPEATED)) == 3


_WORDS = st.sampled_from(["Nora", "nora", "works", "for", "Bolt", "Mills", "Lima", "1992"])
_TEXTS = (
    st.lists(_WORDS, min_size=1, max_size=4)
    .map(" ".join)
    .flatmap(lambda text: st.sampled_from([text, text + ".", text.upper(), "  " + text.replace(" ", "   ") + "!"]))
)


@given(st.lists(_TEXTS, max_size=12))
def test_distinct_statements_keep_each_statement_once_in_order(texts):
    steps = [Step(index, index + 1, text) for index, text in enumerate(texts)]
    kept = distinct_statements(steps)
    keys = [statement_key(step.text) for step in kept]
    assert len(keys) == len(set(keys))  # no statement twice
    assert set(keys) == {statement_key(text) for text in texts}  # none lost
    assert kept == sorted(kept, key=lambda step: step.start)  # in order, each at its first occurrence
    assert all(steps[[statement_key(t) for t in texts].index(key)] == step for key, step in zip(keys, kept))
    assert distinct_statements(kept) == kept
