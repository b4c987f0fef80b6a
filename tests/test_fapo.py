"""FAPO's recipe beyond its reward (fspo.methods.fapo): held-out rows, the overlong penalty, clip-higher.

Checked against the authors' code, verl-recipe ``fapo/`` at 48ea0a79 (``fetch github:verl-project/verl-recipe``):
``reward_fn_reasoning.py`` scores a row of split "test" before its GenRM (line 114), and ``run_fapo_7b.sh`` trains
with ``clip_ratio_high=0.28`` (line 15) and DAPO's overlong penalty through verl's ``dapo`` reward manager (lines
18-21, 128-133), verl 0.9.1's ``experimental/reward_loop/reward_manager/dapo.py``.
"""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf
from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager

from fspo.config.vocabulary import ConfigError
from fspo.methods.fapo import OverlongBuffer, overlong_buffer
from fspo.training.reward import FSPORewardManager
from fspo_testing.rollouts import single_rollout

EVIDENCE = "Mira Olt founded Kessa Mills. Kessa Mills is based in Dornhal."
# A right answer through an unsupported step (FAPO's flawed positive) under the lexical verifier.
FLAWED = " Mira Olt founded Kessa Mills. The river glows purple at night.\n</think> <answer> Dornhal </answer>"


def manager_reward(tokenizer, response, split: str, reward_kwargs=None, **fspo) -> dict:
    """FSPO's reward manager on one rollout of a row of ``split``, with verl's ``reward.reward_kwargs``."""
    config = OmegaConf.create(
        {
            "fspo": {"enable": True, "verifier": {"name": "lexical"}, **fspo},
            "reward": {"reward_kwargs": reward_kwargs or {}},
        }
    )
    data, _ = single_rollout(
        tokenizer,
        response,
        data_source="synthetic_multihop",
        ground_truth="Dornhal",
        extra_info={"index": 3, "split": split, "evidence": EVIDENCE},
        padding=2,
    )
    return asyncio.run(FSPORewardManager(config, tokenizer, compute_score=None).run_single(data))


def test_a_held_out_flawed_positive_scores_as_a_right_answer(qwen_tokenizer):
    """reward_fn_reasoning.py line 114: a "test" row returns +1/-1 by correctness, no GenRM penalty; validation
    rows are "test" rows (fspo data; verl 0.9.1 hands the reward manager no validate flag)."""
    training = manager_reward(qwen_tokenizer, FLAWED, "train", mode="fapo")
    held_out = manager_reward(qwen_tokenizer, FLAWED, "test", mode="fapo")
    assert training["reward_score"] == pytest.approx(0.5)
    assert held_out["reward_score"] == pytest.approx(1.0)
    assert held_out["reward_extra_info"]["fspo_step_reward"] == 0.0
    # Still counted: validation reports its flawed-positive rate.
    assert held_out["reward_extra_info"]["fspo_flawed_positive"] == 1.0


# FAPO's overlong settings (run_fapo_7b.sh lines 18-21) as its recipe hands them to verl (lines 129-133).
FAPO_7B_OVERLONG = {
    "max_resp_len": 8192,
    "overlong_buffer_cfg": {"enable": True, "len": 4096, "penalty_factor": 1.0, "log": True},
}


def dapo_reward(tokenizer, response_ids: list[int], reward_kwargs: dict) -> float:
    """verl's dapo reward manager's reward for a response whose score is 0: its overlong penalty alone."""

    async def zero(**_):
        return 0.0

    config = OmegaConf.create({"reward": {"reward_kwargs": reward_kwargs}})
    manager = DAPORewardManager(config, tokenizer, compute_score=zero)
    data, _ = single_rollout(tokenizer, response_ids, data_source="x", ground_truth="y", extra_info={}, padding=3)
    return float(manager.loop.run_until_complete(manager.run_single(data))["reward_score"])


@settings(deadline=None, max_examples=40)
@given(st.integers(1, 48), st.data(), st.sampled_from([0.0, 0.5, 1.0, 2.5]))
def test_the_overlong_penalty_is_verls_dapo_managers(qwen_tokenizer, max_length, data, factor):
    """OverlongBuffer.penalty equals what verl's dapo reward manager adds (dapo.py lines 108-114), at every length
    up to past the limit; it is 0 before the buffer and -factor at the limit."""
    length = data.draw(st.integers(1, max_length))
    response_length = data.draw(st.integers(1, max_length + 4))
    buffer_cfg = {"enable": True, "len": length, "penalty_factor": factor, "log": False}  # verl's reads all four
    kwargs = {"max_resp_len": max_length, "overlong_buffer_cfg": buffer_cfg}
    buffer = overlong_buffer({"reward": {"reward_kwargs": kwargs}})
    penalty = buffer.penalty(response_length)
    assert penalty == pytest.approx(dapo_reward(qwen_tokenizer, [15] * response_length, kwargs), abs=1e-6)
    assert penalty <= 0.0
    if response_length <= max_length - length:
        assert penalty == 0.0
    assert buffer.penalty(max_length) == pytest.approx(-factor)


def test_fapos_overlong_penalty_halfway_through_its_buffer():
    """run_fapo_7b.sh: 6144 of 8192 tokens is half the 4096-token buffer: -0.5 on its +-1 rewards."""
    buffer = overlong_buffer({"reward": {"reward_kwargs": FAPO_7B_OVERLONG}})
    assert buffer == OverlongBuffer(max_length=8192, length=4096, factor=1.0, log=True)
    assert [buffer.penalty(n) for n in (4096, 6144, 8192)] == [0.0, -0.5, -1.0]


def test_the_overlong_penalty_shapes_training_rows_only(qwen_tokenizer):
    right = " Mira Olt founded Kessa Mills. Kessa Mills is based in Dornhal.\n</think> <answer> Dornhal </answer>"
    ids = qwen_tokenizer(right, add_special_tokens=False)["input_ids"]
    kwargs = {"max_resp_len": len(ids), "overlong_buffer_cfg": {"enable": True, "len": 4, "penalty_factor": 0.5}}
    training = manager_reward(qwen_tokenizer, right, "train", kwargs, mode="fapo")
    assert training["reward_score"] == pytest.approx(1.0 - 0.5)  # at the limit: the whole factor
    assert "overlong_reward" not in training["reward_extra_info"]  # log is off
    logged = {**kwargs, "overlong_buffer_cfg": {**kwargs["overlong_buffer_cfg"], "log": True}}
    held_out = manager_reward(qwen_tokenizer, right, "test", logged, mode="fapo")
    assert held_out["reward_score"] == pytest.approx(1.0)
    assert held_out["reward_extra_info"]["overlong_reward"] == 0.0
    # Off unless enabled, as verl's dapo manager.
    assert manager_reward(qwen_tokenizer, right, "train", {"max_resp_len": 1}, mode="fapo")["reward_score"] == 1.0


@pytest.mark.parametrize(
    "reward_kwargs, message",
    [
        (
            {"overlong_buffer_cfg": {"enable": True, "len": 4, "penalty_factor": 1.0}},
            "reward.reward_kwargs.max_resp_len is not set: reward.reward_kwargs.overlong_buffer_cfg.enable=true needs it",
        ),
        (
            {"max_resp_len": 2048, "overlong_buffer_cfg": {"enable": True, "len": 4096, "penalty_factor": 1.0}},
            "reward.reward_kwargs.overlong_buffer_cfg.len=4096 must be at most reward.reward_kwargs.max_resp_len=2048",
        ),
        (
            {"max_resp_len": 2048, "overlong_buffer_cfg": {"enable": True, "len": 0, "penalty_factor": 1.0}},
            "reward.reward_kwargs.overlong_buffer_cfg.len must be >= 1",
        ),
        (
            {"max_resp_len": 2048, "overlong_buffer_cfg": {"enable": True, "len": 8, "penalty_factor": -1}},
            "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor must be a finite number >= 0, got -1",
        ),
    ],
)
def test_bad_overlong_settings_are_named(reward_kwargs, message):
    with pytest.raises(ConfigError, match="^" + message.replace(".", r"\.")):
        overlong_buffer(OmegaConf.create({"reward": {"reward_kwargs": reward_kwargs}}))


def test_an_overlong_limit_below_the_response_limit_is_refused():
    """Past max_resp_len DAPO's penalty grows without a floor (verl dapo.py lines 108-114): a 4096-token response
    under max_resp_len 2048 and a 1024 buffer would lose 3 x the factor. The recipe follows the data's limit."""
    kwargs = {"max_resp_len": 2048, "overlong_buffer_cfg": {"enable": True, "len": 1024, "penalty_factor": 0.5}}
    config = OmegaConf.create({"data": {"max_response_length": 4096}, "reward": {"reward_kwargs": kwargs}})
    with pytest.raises(
        ConfigError, match=r"^reward\.reward_kwargs\.max_resp_len=2048 is below data\.max_response_length=4096"
    ):
        overlong_buffer(config)
    config.data.max_response_length = 2048
    assert overlong_buffer(config).max_length == 2048
