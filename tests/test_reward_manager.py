"""The FSPO reward manager as verl's reward loop calls it: one DataProto per rollout.

Uses the real manager class, a real tokenizer and real verifiers (lexical, the offline MiniLM
embedding model, and an LLM judge pointed at a port where nothing listens).
"""

from __future__ import annotations

import asyncio
import socket

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from fspo.training.reward import FSPORewardManager, MissingEvidenceError
from fspo.training.reward_extra_info import OUTPUT_SEPARATOR, STAT_KEYS, decode_labels, step_metrics
from fspo.training.verifier_loss import VerifierLossError, VerifierLossGuard
from fspo_testing.faulty_verifier import RAISE_MARKER, FaultyVerifier
from fspo_testing.rollouts import single_rollout

EVIDENCE = "Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell."
GOOD = " Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell.\n</think> <answer> Piobrdell </answer>"
BAD = " Gorlan Pex sells blue apples. The moon base orbits Jupiter quickly.\n</think> <answer> Jupiter </answer>"


def manager(tokenizer, **fspo):
    config = OmegaConf.create({"fspo": {"enable": True, "verifier": {"name": "lexical"}, **fspo}})
    return FSPORewardManager(config, tokenizer, compute_score=None)


def rollout(tokenizer, response: str, evidence=EVIDENCE, pad_to: int = 80):
    """A synthetic-world rollout padded to ``pad_to`` response tokens (cut there when longer)."""
    ids = tokenizer(response, add_special_tokens=False)["input_ids"][:pad_to]
    return single_rollout(
        tokenizer,
        ids,
        data_source="synthetic_multihop",
        ground_truth="Piobrdell",
        extra_info={"index": 7, "split": "train", "evidence": evidence},
        padding=pad_to - len(ids),
    )


def score(reward_manager, data):
    return asyncio.run(reward_manager.run_single(data))


def test_supported_and_unsupported_steps_become_token_labels(qwen_tokenizer):
    reward_manager = manager(qwen_tokenizer)
    good, good_len = rollout(qwen_tokenizer, GOOD)
    bad, bad_len = rollout(qwen_tokenizer, BAD)
    good_out, bad_out = score(reward_manager, good), score(reward_manager, bad)
    assert good_out["reward_score"] == 1.0 and bad_out["reward_score"] == 0.0  # answer F1
    good_labels = decode_labels(good_out["reward_extra_info"]["fspo_labels"], good_len)
    bad_labels = decode_labels(bad_out["reward_extra_info"]["fspo_labels"], bad_len)
    assert set(good_labels) == {0, 1} and set(bad_labels) == {0, -1}
    info = good_out["reward_extra_info"]
    assert info["fspo_steps"] == 2 and info["fspo_supported"] == 2 and info["fspo_labelled"] == 1
    # verl stacks reward_extra_info across samples: every sample reports the same keys.
    assert set(good_out["reward_extra_info"]) == set(bad_out["reward_extra_info"])
    assert set(STAT_KEYS) <= set(info)


def test_step_reward_is_added_to_the_outcome(qwen_tokenizer):
    out = score(manager(qwen_tokenizer, step_reward_weight=0.5), rollout(qwen_tokenizer, BAD)[0])
    assert out["reward_score"] == pytest.approx(-0.5)
    assert out["reward_extra_info"]["fspo_outcome_score"] == 0.0


@pytest.mark.parametrize(
    "response",
    [
        "",
        "no tags at all",
        "<think> nested <think> open </think> x </think>",
        "🙂🙂 emoji. 🙃 </think>",
        " Stesta Bagu works for Vigio",
        "</think><answer></answer>",
        " a. " * 2000 + "</think>",
    ],
)
def test_malformed_responses_never_crash(qwen_tokenizer, response):
    data, length = rollout(qwen_tokenizer, response or " ", pad_to=4096)
    out = score(manager(qwen_tokenizer), data)
    assert len(decode_labels(out["reward_extra_info"]["fspo_labels"], length)) == length


def test_missing_evidence_is_counted_or_named(qwen_tokenizer):
    data, length = rollout(qwen_tokenizer, GOOD, evidence=float("nan"))
    out = score(manager(qwen_tokenizer), data)
    assert set(decode_labels(out["reward_extra_info"]["fspo_labels"], length)) == {0}
    assert out["reward_extra_info"]["fspo_has_evidence"] == 0
    with pytest.raises(MissingEvidenceError, match="index=7 split=train"):
        score(manager(qwen_tokenizer, require_evidence=True), data)


def test_unreachable_judge_gives_no_labels_and_the_run_goes_on(qwen_tokenizer):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    judge = {"name": "llm_judge", "url": f"http://127.0.0.1:{port}/v1", "timeout_s": 1, "max_retries": 0}
    data, length = rollout(qwen_tokenizer, GOOD)
    out = score(manager(qwen_tokenizer, verifier=judge), data)
    info = out["reward_extra_info"]
    assert set(decode_labels(info["fspo_labels"], length)) == {0}
    assert info["fspo_unverifiable"] == 2 and info["fspo_labelled"] == 0
    assert info["fspo_failed_steps"] == 2  # no verdict is the judge's failure, which the run-level guard counts
    assert out["reward_score"] == 1.0  # the outcome reward is untouched


def test_a_verifier_that_raises_is_counted(qwen_tokenizer):
    reward_manager = manager(qwen_tokenizer)

    def broken(pairs):
        raise RuntimeError("CUDA error: device-side assert")

    reward_manager.verifier.score = broken
    data, length = rollout(qwen_tokenizer, GOOD)
    with pytest.warns(UserWarning, match="verifier failed"):
        out = score(reward_manager, data)
    assert out["reward_extra_info"]["fspo_verifier_failed"] == 1
    assert set(decode_labels(out["reward_extra_info"]["fspo_labels"], length)) == {0}


def test_embedding_verifier_through_config(qwen_tokenizer):
    reward_manager = manager(qwen_tokenizer, verifier={"name": "embedding"})
    good = score(reward_manager, rollout(qwen_tokenizer, GOOD)[0])["reward_extra_info"]
    assert good["fspo_steps"] == 2 and good["fspo_supported"] == 2


def released_rollout(tokenizer, response: str, data_source="HotpotQA", ground_truth="Piobrdell", **columns):
    """A rollout of a row in the released FSPO files' schema: evidence in a top-level column, extra_info
    with only index and split (github nusnlp/FSPO, data/hotpot/*/train.parquet)."""
    return single_rollout(
        tokenizer,
        response,
        data_source=data_source,
        ground_truth=ground_truth,
        extra_info={"index": 3, "split": "train"},
        **columns,
    )


def test_evidence_in_a_top_level_column_labels_steps(qwen_tokenizer):
    data, length = released_rollout(qwen_tokenizer, GOOD, knowledge=EVIDENCE)
    out = score(manager(qwen_tokenizer, evidence_key="knowledge"), data)
    info = out["reward_extra_info"]
    assert out["reward_score"] == 1.0  # `HotpotQA` is scored by the project's span scorer
    assert info["fspo_has_evidence"] == 1 and info["fspo_supported"] == 2 and info["fspo_labelled"] == 1
    assert set(decode_labels(info["fspo_labels"], length)) == {0, 1}
    # Under another key the same row has no evidence: no labels (and under require_evidence, an error).
    other = score(manager(qwen_tokenizer), released_rollout(qwen_tokenizer, GOOD, knowledge=EVIDENCE)[0])
    assert other["reward_extra_info"]["fspo_has_evidence"] == 0
    with pytest.raises(MissingEvidenceError, match="index=3 .*a column evidence"):
        score(
            manager(qwen_tokenizer, require_evidence=True),
            released_rollout(qwen_tokenizer, GOOD, knowledge=EVIDENCE)[0],
        )


def test_extra_info_evidence_comes_before_the_column(qwen_tokenizer):
    from fspo.evidence import row_evidence

    row = {"extra_info": {"knowledge": " from extra_info "}, "knowledge": "from the column"}
    assert row_evidence(row, "knowledge") == "from extra_info"
    assert row_evidence({"extra_info": {"knowledge": ""}, "knowledge": np.str_("col")}, "knowledge") == "col"
    assert row_evidence({"extra_info": None, "knowledge": None}, "knowledge") == ""
    assert row_evidence({"knowledge": np.array(["a", "b"], dtype=object)}, "knowledge") == "a\n\nb"


def test_a_verl_named_source_reports_the_same_keys(qwen_tokenizer):
    reward_manager = manager(qwen_tokenizer)
    ours = score(reward_manager, released_rollout(qwen_tokenizer, GOOD, data_source="GSM8K", ground_truth="7")[0])
    verls = score(
        reward_manager, released_rollout(qwen_tokenizer, "So #### 72", data_source="openai/gsm8k", ground_truth="72")[0]
    )
    assert verls["reward_score"] == 1.0 and ours["reward_score"] == 0.0
    assert set(ours["reward_extra_info"]) == set(verls["reward_extra_info"])


def test_the_verifiers_threshold_decides_the_labels(qwen_tokenizer):
    data, length = rollout(qwen_tokenizer, BAD)
    strict = score(manager(qwen_tokenizer), data)["reward_extra_info"]
    lenient = score(manager(qwen_tokenizer, verifier={"name": "lexical", "threshold": 0.0}), data)["reward_extra_info"]
    assert strict["fspo_unsupported"] == 2 and set(decode_labels(strict["fspo_labels"], length)) == {0, -1}
    assert lenient["fspo_supported"] == 2 and set(decode_labels(lenient["fspo_labels"], length)) == {0, 1}


def agent_run(tokenizer, responses: list[str], **non_tensor):
    """The DataProto verl's agent loop sends for a run with several outputs (``_compute_score``)."""
    from verl import DataProto

    prompt = tokenizer("Question?", add_special_tokens=False)["input_ids"]
    outputs = [tokenizer(r, add_special_tokens=False)["input_ids"] for r in responses]
    pad = torch.nn.utils.rnn.pad_sequence
    n = len(outputs)
    data = DataProto.from_single_dict(
        {
            "prompts": pad([torch.tensor(prompt)] * n, batch_first=True),
            "responses": pad([torch.tensor(o) for o in outputs], batch_first=True),
            "attention_mask": pad(
                [torch.ones(len(prompt) + len(o), dtype=torch.long) for o in outputs], batch_first=True
            ),
            "data_source": np.array(["synthetic_multihop"] * n, dtype=object),
            "reward_model": np.array([{"ground_truth": "Piobrdell", "style": "rule"}] * n, dtype=object),
            "extra_info": np.array([{"index": 7, "split": "train", "evidence": EVIDENCE}] * n, dtype=object),
            "__num_turns__": np.array([2 * (i + 1) for i in range(n)]),
            "tool_extra_fields": np.array([{"turn": i} for i in range(n)], dtype=object),
            "response_len": np.array([len(o) for o in outputs]),
            **non_tensor,
        }
    )
    return data, [len(o) for o in outputs]


def test_each_output_of_an_agent_run_gets_its_own_labels(qwen_tokenizer):
    data, lengths = agent_run(qwen_tokenizer, [BAD, " Short turn.", GOOD])
    out = score(manager(qwen_tokenizer), data)
    info = out["reward_extra_info"]
    parts = info["fspo_labels"].split(OUTPUT_SEPARATOR)
    labels = [decode_labels(part, length) for part, length in zip(parts, lengths, strict=True)]
    assert set(labels[0]) == {0, -1} and set(labels[1]) == {0} and set(labels[2]) == {0, 1}
    # Steps of every output are counted; the outcome is the last output's answer, as in verl.
    assert (info["fspo_steps"], info["fspo_supported"], info["fspo_unsupported"]) == (4, 2, 2)
    assert out["reward_score"] == 1.0


def test_the_scorer_sees_extra_info_as_verls_managers_complete_it(qwen_tokenizer):
    seen = {}

    def scorer(data_source, solution_str, ground_truth, extra_info):
        seen.update(extra_info)
        return 0.0

    config = OmegaConf.create({"fspo": {"enable": True, "verifier": {"name": "lexical"}}})
    reward_manager = FSPORewardManager(config, qwen_tokenizer, compute_score=scorer)
    data, _ = agent_run(qwen_tokenizer, [BAD, GOOD], reward_scores=np.array([{"tool": 0.5}] * 2, dtype=object))
    score(reward_manager, data)
    assert seen["num_turns"] == 4 and seen["rollout_reward_scores"] == {"tool": 0.5} and seen["turn"] == 1
    assert seen["evidence"] == EVIDENCE and seen["index"] == 7
    assert "num_turns" not in data.non_tensor_batch["extra_info"][-1]  # the row's own dict is left alone


def test_pairs_the_verifier_fails_on_alone_are_failures_not_verdicts(qwen_tokenizer):
    """The server's batcher isolates a pair that fails on its own (an out-of-memory row) and scores it NaN, as the
    lexical verifier scores a step with nothing to check; only the first is a failure, and the run-level guard
    counts it: a run whose every long-evidence row fails stops instead of training as plain GRPO."""
    reward_manager = manager(qwen_tokenizer)
    reward_manager.verifier = FaultyVerifier()
    response = (
        " Stesta Bagu works for Vigio Shipping. Then it is so.\n"
        f"{RAISE_MARKER} Vigio Shipping is headquartered in Piobrdell.\n</think> <answer> Piobrdell </answer>"
    )
    data, length = rollout(qwen_tokenizer, response)
    info = score(reward_manager, data)["reward_extra_info"]
    assert (info["fspo_steps"], info["fspo_supported"], info["fspo_unverifiable"]) == (3, 1, 2)
    assert info["fspo_failed_steps"] == 1 and info["fspo_verified"] == 1 and info["fspo_verifier_failed"] == 0
    assert set(decode_labels(info["fspo_labels"], length)) == {0, 1}

    metrics = step_metrics([info] * 4)
    assert metrics["fspo/verifier_failed_steps"] == 4
    assert metrics["fspo/verifier_failed_step_rollouts"] == pytest.approx(4 / 3)
    guard = VerifierLossGuard(max_share=0.1, max_steps=2)  # a third of each rollout's steps failed
    guard.observe_metrics(metrics, step=1)
    with pytest.raises(
        VerifierLossError, match=r"failed 1.33 of 4 rollouts .*1.33 of them: steps it failed alone \(out-of-memory rows"
    ):
        guard.observe_metrics(metrics, step=2)
    filler_only = rollout(qwen_tokenizer, " Then it is so.\n</think> <answer> Piobrdell </answer>")[0]
    legitimately_unverifiable = score(reward_manager, filler_only)["reward_extra_info"]
    assert legitimately_unverifiable["fspo_unverifiable"] == 1 and legitimately_unverifiable["fspo_failed_steps"] == 0
    VerifierLossGuard(max_share=0.1, max_steps=1).observe_metrics(step_metrics([legitimately_unverifiable] * 4))
