"""A verifier that returns NaN or ±inf instead of raising fails its call, and the run-level guard stops the run.

Issue 70, item 1: a T5 overflowing in ``fspo.verifier.dtype=float16`` gave every step NaN, which the reward
manager labelled 0 as "unverifiable", so the run trained plain GRPO forever with the guard at 0. Here the
backend is a real one (MiniCheck's RoBERTa layout, tiny random weights, :mod:`fspo_testing.tiny_verifiers`)
whose weights are made to give NaN, reached through the reward manager as verl's reward loop calls it, and
the guard reads the update's metrics as the trainer does (``fspo/training/trainer.py``, ``observe_metrics``).
"""

from __future__ import annotations

import asyncio
import json
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from fspo.config.verifier import verifier_config
from fspo.training.reward import FSPORewardManager
from fspo.training.reward_extra_info import decode_labels, step_metrics
from fspo.training.verifier_loss import VerifierLossError, VerifierLossGuard
from fspo.verifiers import build_verifier
from fspo.verifiers.base import ScoredPairs, fail_infinite
from fspo.verifiers.batching import NonFiniteOutput, run_batched
from fspo.verifiers.lexical import LexicalVerifier
from fspo_testing.rollouts import single_rollout
from fspo_testing.tiny_verifiers import build_roberta_checker

EVIDENCE = "Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell."
# Two claims and a filler step: the filler has nothing to check (the lexical verifier's NaN verdict).
RESPONSE = (
    " Stesta Bagu works for Vigio Shipping. Then it is so.\n"
    "Vigio Shipping is headquartered in Piobrdell.\n</think> <answer> Piobrdell </answer>"
)
NON_FINITE = [math.nan, math.inf, -math.inf]


# --- the doors, as pure functions ------------------------------------------------------------------


def _forward_of(values: list[float]):
    """A model forward that gives row ``i`` (its first input id) the score ``values[i]``."""
    return lambda batch: torch.tensor([values[int(row[0])] for row in batch["input_ids"]])


@given(st.lists(st.sampled_from([0.0, 0.5, 1.0, *NON_FINITE]), min_size=1, max_size=12), st.integers(1, 8))
def test_a_non_finite_model_output_fails_the_call(values, max_tokens):
    rows = [{"input_ids": [i]} for i in range(len(values))]
    run = lambda: run_batched(  # noqa: E731
        rows, _forward_of(values), pad_token_id=0, device="cpu", max_tokens_per_batch=max_tokens
    )
    if all(math.isfinite(v) for v in values):
        assert [float(out) for out in run()] == values
    else:
        with pytest.raises(NonFiniteOutput, match=r"NaN or ±inf for \d+ of \d+ rows .*fspo\.verifier\.dtype"):
            run()


@given(st.lists(st.sampled_from([0.0, 0.7, 1.0, *NON_FINITE]), max_size=10), st.data())
def test_an_infinite_score_is_a_failed_pair_and_a_nan_verdict_stays_a_verdict(scores, data):
    nan_at = [i for i, score in enumerate(scores) if math.isnan(score)]
    failed = data.draw(st.sets(st.sampled_from(nan_at))) if nan_at else set()  # backends list NaN scores only
    checked = fail_infinite(ScoredPairs(scores, tuple(sorted(failed))))
    for i, score in enumerate(scores):
        if math.isinf(score):
            assert i in checked.failed and math.isnan(checked.scores[i])
        else:
            assert (i in checked.failed) == (i in failed)
            assert checked.scores[i] == score or (math.isnan(score) and math.isnan(checked.scores[i]))
    assert list(checked.failed) == sorted(set(checked.failed))


# --- a real backend through the reward manager -------------------------------------------------------


@pytest.fixture(scope="module")
def checker_path(tmp_path_factory):
    return build_roberta_checker(tmp_path_factory.mktemp("nan_checker") / "roberta")


def _manager(tokenizer, verifier) -> FSPORewardManager:
    config = OmegaConf.create({"fspo": {"enable": True, "verifier": {"name": "lexical"}}})
    manager = FSPORewardManager(config, tokenizer, compute_score=None)
    manager.verifier = verifier
    return manager


def _rollout(tokenizer, response: str = RESPONSE):
    ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    return single_rollout(
        tokenizer,
        ids,
        data_source="synthetic_multihop",
        ground_truth="Piobrdell",
        extra_info={"index": 7, "split": "train", "evidence": EVIDENCE},
    )


def _info(manager, tokenizer, response: str = RESPONSE) -> tuple[dict, int]:
    data, length = _rollout(tokenizer, response)
    return asyncio.run(manager.run_single(data))["reward_extra_info"], length


def test_a_checker_whose_forward_gives_nan_fails_and_the_guard_stops_the_run(checker_path, qwen_tokenizer):
    """The fp16-overflow case: every row NaN. Each rollout's request fails (``fspo/verifier_failures``), its tokens
    keep label 0, and two such updates in a row stop the run; one, between healthy updates, does not."""
    verifier = build_verifier(verifier_config({"name": "minicheck", "model_path": str(checker_path), "device": "cpu"}))
    manager = _manager(qwen_tokenizer, verifier)
    healthy, _ = _info(manager, qwen_tokenizer)
    assert (healthy["fspo_verified"], healthy["fspo_verifier_failed"], healthy["fspo_failed_steps"]) == (1, 0, 0)

    bias = verifier.model.classifier.out_proj.bias
    saved = bias.detach().clone()
    with torch.no_grad():
        bias.fill_(math.nan)
    with pytest.warns(UserWarning, match="NonFiniteOutput.*NaN or ±inf"):
        broken, length = _info(manager, qwen_tokenizer)
    assert (broken["fspo_verified"], broken["fspo_verifier_failed"]) == (0, 1)
    assert set(decode_labels(broken["fspo_labels"], length)) == {0}

    guard = VerifierLossGuard(max_share=0.1, max_steps=2)  # fspo.verifier defaults
    guard.observe_metrics(step_metrics([broken] * 4), step=1)
    guard.observe_metrics(step_metrics([healthy] * 4), step=2)  # a transient NaN update is tolerated
    guard.observe_metrics(step_metrics([broken] * 4), step=3)
    assert guard.in_a_row == 1
    with pytest.raises(VerifierLossError, match=r"failed 4 of 4 rollouts .* 2 actor update\(s\) in a row"):
        guard.observe_metrics(step_metrics([broken] * 4), step=4)

    with torch.no_grad():
        bias.copy_(saved)
    assert _info(manager, qwen_tokenizer)[0]["fspo_failed_steps"] == 0  # the failed pairs were not cached


def test_a_nan_on_one_pair_fails_that_pair_alone(checker_path, qwen_tokenizer):
    """A word whose embedding is NaN makes only the rows holding it NaN: that step fails on its own
    (``fspo/verifier_failed_steps``) and the rollout's other steps are still labelled."""
    verifier = build_verifier(verifier_config({"name": "minicheck", "model_path": str(checker_path), "device": "cpu"}))
    manager = _manager(qwen_tokenizer, verifier)
    response = RESPONSE.replace("in Piobrdell.", "in Zyx.")
    claim = "Vigio Shipping is headquartered in Zyx."
    others = [EVIDENCE, "Stesta Bagu works for Vigio Shipping.", "Then it is so."]
    ids = lambda text: set(verifier.tokenizer(text)["input_ids"])  # noqa: E731
    [poisoned, *_] = sorted(ids(claim) - set().union(*map(ids, others)))  # in that claim's rows only
    with torch.no_grad():
        verifier.model.get_input_embeddings().weight[poisoned] = math.nan
    info, length = _info(manager, qwen_tokenizer, response)
    assert (info["fspo_verified"], info["fspo_verifier_failed"], info["fspo_failed_steps"]) == (1, 0, 1)
    assert info["fspo_supported"] + info["fspo_unsupported"] == 2  # the other claim and the filler step
    metrics = step_metrics([info] * 4)
    assert metrics["fspo/verifier_failed_step_rollouts"] == pytest.approx(4 / 3)


class _InfiniteLexical(LexicalVerifier):
    """``lexical`` whose scores of claims holding ``marker`` come back ±inf, as a broken remote backend might."""

    def __init__(self, value: float, marker: str = "Piobrdell"):
        super().__init__()
        self.value, self.marker = value, marker

    def _score_unique(self, pairs):
        scores = super()._score_unique(pairs)
        return [self.value if self.marker in claim else score for (_, claim), score in zip(pairs, scores)]


@pytest.mark.parametrize("value", [math.inf, -math.inf])
def test_an_infinite_score_from_any_backend_is_a_failed_step_not_a_label(value, qwen_tokenizer):
    """+inf would label a step supported and -inf unsupported; here it fails its step, and a filler step with
    nothing to check stays a verdict (label 0, not a failure)."""
    manager = _manager(qwen_tokenizer, _InfiniteLexical(value))
    info, length = _info(manager, qwen_tokenizer)
    assert (info["fspo_steps"], info["fspo_supported"], info["fspo_unsupported"]) == (3, 1, 0)
    assert (info["fspo_unverifiable"], info["fspo_failed_steps"], info["fspo_verifier_failed"]) == (2, 1, 0)
    assert set(decode_labels(info["fspo_labels"], length)) == {0, 1}


def test_a_command_whose_verifier_gives_nan_stops_in_one_line(checker_path, tmp_path, capsys):
    """Outside training no guard counts failures: ``fspo verify`` (as every command, through the one dispatcher,
    ``fspo/utils/subcommands.py``) stops with one line naming the setting to change, not a traceback."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from fspo.cli import main

    nan_checker = tmp_path / "nan_checker"
    model = AutoModelForSequenceClassification.from_pretrained(checker_path)
    with torch.no_grad():
        model.classifier.out_proj.bias.fill_(math.nan)
    model.save_pretrained(nan_checker)
    AutoTokenizer.from_pretrained(checker_path).save_pretrained(nan_checker)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"evidence": EVIDENCE, "response": "<think>" + RESPONSE}) + "\n")

    capsys.readouterr()  # the build's progress bars
    argv = ["verify", str(rows), "--verifier", "minicheck", "--model-path", str(nan_checker), "--device", "cpu"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]  # after transformers' weight-loading progress bar
    assert last.startswith("fspo verify: ") and "NaN or ±inf" in last and "dtype" in last
