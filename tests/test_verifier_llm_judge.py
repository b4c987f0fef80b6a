"""llm_judge against real local HTTP servers speaking the OpenAI chat-completions API."""

from __future__ import annotations

import asyncio
import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fspo.config.verifier import verifier_config
from fspo.verifiers import build_verifier
from fspo.verifiers.llm_judge import chat_url, first_error_scores, parse_first_error, parse_verdict


def evidence_judge():
    """A judge that calls a claim SUPPORTED when its words all appear in the evidence.

    Claims steer it: "SLOW" sleeps past the client's timeout, "GARBAGE" answers non-JSON,
    "SHRUG" answers a chat completion without a verdict, "BUSY" fails with 503 on its first request.
    """
    busy_seen: set[str] = set()

    def answer(body: dict):
        user = body["messages"][-1]["content"]
        evidence = user.split("EVIDENCE:\n", 1)[1].split("\n\nCLAIM:\n", 1)[0]
        claim = user.split("\n\nCLAIM:\n", 1)[1].split("\n\nVerdict", 1)[0]
        if "SLOW" in claim:
            time.sleep(1.0)
        if "BUSY" in claim and claim not in busy_seen:
            busy_seen.add(claim)
            return 503
        if "GARBAGE" in claim:
            return b"<html>502 upstream</html>"
        if "SHRUG" in claim:
            return "I cannot tell."
        facts = [w for w in claim.split() if w not in ("SLOW", "BUSY")]
        verdict = "SUPPORTED" if all(w in evidence for w in facts) else "UNSUPPORTED"
        return f"<think>Is it SUPPORTED? Let me check.</think>\nVerdict: {verdict}"

    return answer


@pytest.fixture
def judge_server(chat_server):
    return chat_server(evidence_judge())


def test_judge_scores_verdicts_and_unverifiable_pairs_without_crashing(judge_server, monkeypatch):
    monkeypatch.setenv("TEST_JUDGE_KEY", "sk-test")
    verifier = build_verifier(
        verifier_config(
            {
                "name": "llm_judge",
                "url": judge_server.url,
                "model": "judge",
                "timeout_s": 0.3,
                "max_retries": 1,
                "backoff_s": 0.01,
                "max_concurrency": 4,
                "api_key_env": "TEST_JUDGE_KEY",
            }
        )
    )
    evidence = "Paris is the capital of France"
    claims = [
        "Paris capital",
        "Rome capital",
        "SLOW Paris",
        "GARBAGE",
        "SHRUG",
        "BUSY Paris",
        "Paris capital",
    ]
    started = time.monotonic()
    scores = verifier.score([(evidence, c) for c in claims])
    elapsed = time.monotonic() - started
    assert scores[0] == 1.0 and scores[1] == 0.0 and scores[5] == 1.0 and scores[6] == 1.0
    assert all(math.isnan(s) for s in scores[2:5])
    assert elapsed < 3.0  # the slow pair cost two timeouts, not the server's sleep, and ran concurrently
    sent = judge_server.requests
    assert all(r["auth"] == "Bearer sk-test" and r["body"]["model"] == "judge" for r in sent)
    assert sum("SLOW" in r["body"]["messages"][-1]["content"] for r in sent) == 2  # 1 try + 1 retry
    assert sum("GARBAGE" in r["body"]["messages"][-1]["content"] for r in sent) == 1  # garbage isn't retried
    assert len(sent) == 8  # duplicates are asked once; BUSY was retried once
    verifier.close()


def test_judge_unreachable_server_is_unverifiable():
    verifier = build_verifier(
        verifier_config(
            {
                "name": "llm_judge",
                "url": "http://127.0.0.1:9/v1",
                "timeout_s": 0.2,
                "max_retries": 0,
            }
        )
    )
    assert math.isnan(verifier.score([("e", "c")])[0])


def test_missing_api_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ValueError, match="NO_SUCH_KEY_VAR"):
        build_verifier(verifier_config({"name": "llm_judge", "url": "http://x", "api_key_env": "NO_SUCH_KEY_VAR"}))


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("SUPPORTED", 1.0),
        ("unsupported", 0.0),
        ("Verdict: Not supported.", 0.0),
        ("NOT_SUPPORTED", 0.0),
        ("<think>maybe UNSUPPORTED</think> SUPPORTED", 1.0),
        ("The claim is supported.", 1.0),
        ("**UNSUPPORTED**", 0.0),
        ("yes", math.nan),
        ("", math.nan),
        ("<think>SUPPORTED", math.nan),
    ],
)
def test_parse_verdict(reply, score):
    assert parse_verdict(reply) == score or (math.isnan(score) and math.isnan(parse_verdict(reply)))


@given(st.text(max_size=60))
def test_parse_verdict_never_raises(reply):
    assert parse_verdict(reply) in (0.0, 1.0) or math.isnan(parse_verdict(reply))


def test_chat_url_forms():
    assert chat_url("http://h:8000") == chat_url("http://h:8000/v1/") == "http://h:8000/v1/chat/completions"
    assert chat_url("http://h/v1/chat/completions") == "http://h/v1/chat/completions"


def test_a_slow_request_does_not_hold_up_other_rollouts(judge_server):
    """Concurrent rollouts are not batched behind each other: the fast one returns before the slow one."""
    import asyncio

    verifier = build_verifier(
        verifier_config(
            {"name": "llm_judge", "url": judge_server.url, "timeout_s": 5, "max_retries": 0, "max_concurrency": 4}
        )
    )
    evidence = "Paris is the capital of France"
    finished: dict[str, float] = {}

    async def rollout(label: str, claims: list[str]) -> list[float]:
        started = time.monotonic()
        scores = await verifier.ascore([(evidence, c) for c in claims])
        finished[label] = time.monotonic() - started
        return scores

    async def both():
        return await asyncio.gather(rollout("slow", ["SLOW Paris capital"]), rollout("fast", ["Paris capital"]))

    slow, fast = asyncio.run(both())
    assert slow == [1.0] and fast == [1.0]
    assert finished["slow"] >= 1.0  # the server slept a second on it
    assert finished["fast"] < 0.5, finished  # ...but the other rollout did not wait for it
    verifier.close()


def test_requests_in_flight_are_bounded_by_max_concurrency(judge_server):
    import asyncio

    verifier = build_verifier(
        verifier_config(
            {"name": "llm_judge", "url": judge_server.url, "timeout_s": 5, "max_retries": 0, "max_concurrency": 2}
        )
    )

    async def many():
        calls = [verifier.ascore([("Paris", f"SLOW Paris {i}")]) for i in range(4)]
        return await asyncio.gather(*calls)

    started = time.monotonic()
    asyncio.run(many())
    elapsed = time.monotonic() - started
    # Four one-second requests, two at a time: two rounds.
    assert 1.9 <= elapsed < 3.5, elapsed
    verifier.close()


# --- FAPO-GenRM's reply format (reply_format=first_error) -----------------------------------------------------


def test_first_error_index_by_hand_from_fapo():
    """verl-recipe fapo/reward_fn_genrm.py lines 20-32: the last \\boxed{} of the reply, an int, kept when -1 or
    0 <= k < total_steps; fapo/reward_fn_reasoning.py lines 140-144: no valid index counts as no error."""
    assert parse_first_error("Step 1 is wrong. \\boxed{1}", 4) == 1
    assert parse_first_error("<think>\\boxed{0}</think> All fine: \\boxed{-1}", 4) == -1
    assert parse_first_error("\\boxed{4}", 4) is None and parse_first_error("\\boxed{-2}", 4) is None
    assert parse_first_error("no index", 4) is None
    # Steps before the first error supported, the error unsupported, the rest unknown to the GenRM.
    assert first_error_scores(1, 4)[:2] == [1.0, 0.0] and all(map(math.isnan, first_error_scores(1, 4)[2:]))
    assert first_error_scores(-1, 3) == [1.0, 1.0, 1.0] and all(map(math.isnan, first_error_scores(None, 2)))


@given(st.one_of(st.none(), st.integers(-1, 9)), st.integers(1, 10))
def test_a_solution_is_flawed_exactly_when_the_genrm_names_a_step(index, steps):
    """FAPO (reward_fn_reasoning.py line 142): flawed iff the index is not -1; here: some step scores 0."""
    index = index if index is None or index < steps else None
    scores = first_error_scores(index, steps)
    assert len(scores) == steps and scores.count(0.0) == (index is not None and index >= 0)


def genrm_judge(body: dict) -> str:
    """A GenRM that names the first step with a word the evidence lacks (0-based, -1 for none)."""
    user = body["messages"][-1]["content"]
    evidence = user.split("[Evidence]\n\n", 1)[1].split("\n\n[AI Solution]", 1)[0]
    solution = user.split("[AI Solution]\n\n", 1)[1].split("\n\nYour task", 1)[0]
    for line in solution.split("\n\n"):
        label, step = line.split(": ", 1)
        if not all(word in evidence for word in step.split()):
            return f"<think>checking \\boxed{{-1}}</think> The earliest error: \\boxed{{{label.split()[1]}}}"
    return "No error found. \\boxed{-1}"


def test_two_responses_to_one_question_are_two_genrm_solutions(chat_server):
    """A flat list of pairs cannot tell two samples of one question apart; score_responses and every door that
    scores responses (evaluation's step rate, `fspo verify`, F-DPO's step verdicts) send each as its own solution,
    so a first error in one leaves the other's steps judged."""
    from fspo.cli.fdpo import judged_steps
    from fspo.evaluation.pipeline import supported_step_rate

    server = chat_server(genrm_judge)
    verifier = build_verifier(verifier_config({"name": "llm_judge", "url": server.url, "reply_format": "first_error"}))
    evidence = "Ann works for Vigio. Vigio is in Tarsk."
    wrong, right = ["Ann works for Mars.", "Vigio is in Tarsk."], ["Ann works for Vigio.", "Vigio is in Tarsk."]
    scores = verifier.score_responses([(evidence, wrong), (evidence, right), (evidence, [])])
    assert scores[0][0] == 0.0 and math.isnan(scores[0][1]) and scores[1:] == [[1.0, 1.0], []]
    assert len(server.requests) == 2
    responses = ["<think>" + "\n\n".join(steps) + "</think> Tarsk" for steps in (wrong, right)]
    rate = supported_step_rate([{"evidence": evidence, "responses": responses}], verifier)
    assert (rate["supported_steps"], rate["verified_steps"], rate["unverifiable_steps"]) == (2, 3, 1)
    assert judged_steps(verifier, 0.5, [(evidence, [wrong, right]), ("", [right])]) == [[[-1, 0], [1, 1]], [[]]]


def test_llm_judge_as_fapo_genrm_over_a_chat_server(chat_server):
    """One request per solution (a run of pairs with one evidence), FAPO's prompt, its index read back."""
    server = chat_server(genrm_judge)
    verifier = build_verifier(verifier_config({"name": "llm_judge", "url": server.url, "reply_format": "first_error"}))
    ev1, ev2 = "Ann works for Vigio. Vigio is in Tarsk.", "Bo was born in Ombria."
    pairs = [(ev1, "Ann works for Vigio."), (ev1, "Vigio is in Mars."), (ev1, "Ann is in Tarsk."), (ev2, "Bo born")]
    scores = verifier.score(pairs)
    assert scores[:2] == [1.0, 0.0] and math.isnan(scores[2]) and scores[3] == 1.0
    assert len(server.requests) == 2
    assert (
        "return the index of the step where the earliest error occurs"
        in server.requests[0]["body"]["messages"][0]["content"]
    )
    assert asyncio.run(verifier.ascore(pairs[3:])) == [1.0]
    with pytest.raises(Exception, match="reply_format must be verdict, first_error or null"):
        verifier_config({"name": "llm_judge", "url": server.url, "reply_format": "boxed"})
