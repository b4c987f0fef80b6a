"""An LLM judge behind an OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM, SGLang, a hosted API).

Prompt (``JUDGE_SYSTEM_PROMPT`` + ``JUDGE_USER_TEMPLATE``): the judge sees the evidence and one claim
(a reasoning step) and must answer with one word, ``SUPPORTED`` or ``UNSUPPORTED``. The verdict is read
from the reply after dropping any ``<think>...</think>`` block: the last ``SUPPORTED`` /
``UNSUPPORTED`` / ``NOT SUPPORTED`` word wins (case-insensitive) and maps to 1.0 / 0.0. A reply with no
verdict, a malformed response, an HTTP error that survives the retries or a timeout scores NaN
(unverifiable), is reported as a failed pair (the run-level guard counts it) and the run goes on. Requests, retries and timeouts are `fspo.utils.chat_client.ChatClient`'s,
shared with the evaluation judge (`fspo evaluate --judge`).

``reply_format="first_error"`` asks instead as FAPO's generative reward model is asked (verl-recipe
``fapo/reward_fn_reasoning.py`` lines 58-70, ``FAPO_GENRM_TEMPLATE``; the evidence stands where the math problem
and its ground truth stand there): one request per solution, its steps numbered from 0, and the reply's last
``\boxed{k}`` is the index of the first wrong step, -1 for none (``fapo/reward_fn_genrm.py`` lines 20-32 accept
-1 or 0 <= k < the number of steps). The steps before k score 1.0, step k 0.0 and the steps after it NaN (the
GenRM says nothing of them); -1 scores every step 1.0; a reply without a valid index scores every step NaN, as
FAPO counts it no error (``reward_fn_reasoning.py`` lines 140-144). A solution is a run of consecutive pairs
with the same evidence: the reward manager sends one agent run's steps per call.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from fspo.utils.chat_client import ChatClient, chat_url, without_thinking
from fspo.verifiers.base import UNVERIFIABLE, Pair, PairPipeline, ScoredPairs, check_pairs

__all__ = [
    "FIRST_ERROR_TEMPLATE",
    "JUDGE_SYSTEM_PROMPT",
    "JUDGE_USER_TEMPLATE",
    "LLMJudgeVerifier",
    "chat_url",
    "first_error_scores",
    "parse_first_error",
    "parse_verdict",
]

JUDGE_SYSTEM_PROMPT = (
    "You are a strict fact checker. You are given EVIDENCE and a CLAIM taken from someone's reasoning. "
    "Decide whether the EVIDENCE supports the CLAIM: every fact the claim states must be stated in or "
    "directly implied by the evidence. Claims that add facts the evidence does not contain, or that "
    "contradict it, are UNSUPPORTED. Answer with exactly one word: SUPPORTED or UNSUPPORTED."
)
JUDGE_USER_TEMPLATE = "EVIDENCE:\n{evidence}\n\nCLAIM:\n{claim}\n\nVerdict (SUPPORTED or UNSUPPORTED):"

# FAPO-GenRM's request (verl-recipe fapo/reward_fn_reasoning.py lines 58-70), in its words, evidence for the problem.
FIRST_ERROR_TEMPLATE = (
    "The following is the evidence for a question, along with an AI solution (split into steps):\n\n"
    "[Evidence]\n\n{evidence}\n\n[AI Solution]\n\n{solution}\n\n"
    "Your task is to review and critique the solution step by step. Once you identify an error in a step, return "
    "the index of the step where the earliest error occurs. Otherwise, return the index of -1 (which typically "
    "denotes 'not found').\n\nPlease reason step by step, put your final answer (i.e., the index) in \\boxed{{}}."
)
REPLY_FORMATS = ("verdict", "first_error")
_BOXED_RE = re.compile(r"\\boxed\{\s*([-+]?\d+)\s*\}")

_VERDICT_RE = re.compile(r"\b(UNSUPPORTED|NOT[\s_-]+SUPPORTED|SUPPORTED)\b", re.IGNORECASE)


def parse_verdict(reply: str) -> float:
    """1.0 for SUPPORTED, 0.0 for UNSUPPORTED / NOT SUPPORTED, NaN when the reply holds no verdict."""
    if not isinstance(reply, str):
        return UNVERIFIABLE
    verdicts = _VERDICT_RE.findall(without_thinking(reply))
    if not verdicts:
        return UNVERIFIABLE
    return 1.0 if verdicts[-1].upper() == "SUPPORTED" else 0.0


def parse_first_error(reply: str, steps: int) -> int | None:
    """The first wrong step's index in a GenRM reply (the last ``\\boxed{k}``): -1 for none, None when there is
    no index or it is out of range (not -1 and not 0 <= k < steps)."""
    if not isinstance(reply, str):
        return None
    indices = _BOXED_RE.findall(without_thinking(reply))
    if not indices:
        return None
    index = int(indices[-1])
    return index if index == -1 or 0 <= index < steps else None


def first_error_scores(index: int | None, steps: int) -> list[float]:
    """Step scores from a first-error index: 1.0 before it, 0.0 at it, NaN after it; all 1.0 for -1; all NaN for
    None."""
    if index is None:
        return [UNVERIFIABLE] * steps
    if index == -1:
        return [1.0] * steps
    return [1.0] * index + [0.0] + [UNVERIFIABLE] * (steps - index - 1)


def solution_runs(pairs: Sequence[Pair]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of consecutive pairs with the same evidence."""
    runs: list[tuple[int, int]] = []
    for i, (evidence, _) in enumerate(pairs):
        if runs and pairs[runs[-1][0]][0] == evidence:
            runs[-1] = (runs[-1][0], i + 1)
        else:
            runs.append((i, i + 1))
    return runs


class LLMJudgeVerifier(PairPipeline):
    """Asks an OpenAI-compatible chat model whether the evidence supports each claim.

    Args:
        url: server root, ``.../v1`` base or full ``.../v1/chat/completions`` URL.
        model: model name sent in the request.
        api_key_env: environment variable holding the API key (sent as a Bearer token), if any.
        max_concurrency: requests in flight at once.
        timeout_s: seconds per request before it counts as failed.
        max_retries: retries after a timeout, connection error or 408/429/5xx, with exponential
            backoff (``backoff_s * 2**attempt``, jittered).
        max_tokens: completion budget (room for a reasoning model's ``<think>`` block).
        temperature: sampling temperature (0: deterministic verdicts).
        reply_format: ``verdict`` (one claim a request, SUPPORTED/UNSUPPORTED) or ``first_error`` (one solution a
            request, FAPO-GenRM's first-error index; give a reasoning judge room in ``max_tokens``).
        evidence_top_k, cache_size: see [`~fspo.verifiers.base.PairPipeline`] (verdict format only).
    """

    name = "llm_judge"

    def __init__(
        self,
        url: str,
        model: str = "default",
        api_key_env: str | None = None,
        max_concurrency: int = 32,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        max_tokens: int = 16,
        temperature: float = 0.0,
        evidence_top_k: int | None = None,
        cache_size: int = 0,
        reply_format: str = "verdict",
    ):
        super().__init__(evidence_top_k=evidence_top_k, cache_size=cache_size)
        if max_concurrency < 1:
            raise ValueError("max_concurrency >= 1 is required")
        if reply_format not in REPLY_FORMATS:
            raise ValueError(f"reply_format must be one of {', '.join(REPLY_FORMATS)}, got {reply_format!r}")
        self.reply_format = reply_format
        self.client = ChatClient(
            url,
            model,
            api_key_env,
            timeout_s,
            max_retries,
            backoff_s,
            max_tokens,
            temperature,
            log_name="llm_judge",
            timeout_setting="fspo.verifier.timeout_s",
        )
        self.url, self.model = self.client.url, self.client.model
        self._pool = ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="llm-judge")

    @staticmethod
    def messages(evidence: str, claim: str) -> list[dict]:
        return [
            {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
            {"role": "user", "content": JUDGE_USER_TEMPLATE.format(evidence=evidence, claim=claim)},
        ]

    @property
    def judges_solutions(self) -> bool:
        """Whether one call's consecutive pairs of one evidence are judged together, as one solution."""
        return self.reply_format == "first_error"

    @staticmethod
    def solution_messages(evidence: str, steps: Sequence[str]) -> list[dict]:
        solution = "\n\n".join(f"Step {i}: {step}" for i, step in enumerate(steps))
        return [{"role": "user", "content": FIRST_ERROR_TEMPLATE.format(evidence=evidence, solution=solution)}]

    def judge_solution(self, evidence: str, steps: Sequence[str]) -> list[float]:
        """One solution's step scores from the GenRM-format reply (module doc); NaN for every step without one."""
        reply = self.client.reply(self.solution_messages(evidence, steps))
        return first_error_scores(None if reply is None else parse_first_error(reply, len(steps)), len(steps))

    def score_responses(self, responses: Sequence[tuple[str, Sequence[str]]]) -> list[list[float]]:
        """As FAPO's GenRM, one request a response (two responses to one question are two solutions)."""
        if not self.judges_solutions:
            return super().score_responses(responses)
        for evidence, steps in responses:
            check_pairs([(evidence, step) for step in steps])
        return list(self._pool.map(lambda response: self.judge_solution(*response) if response[1] else [], responses))

    def score(self, pairs: Sequence[Pair]) -> list[float]:
        """Each pair's score. As FAPO's GenRM, a run of consecutive pairs with one evidence is one solution: give
        several responses to one question to :meth:`score_responses`, which keeps them apart."""
        if not self.judges_solutions:
            return super().score(pairs)
        pairs = check_pairs(pairs)
        runs = [(pairs[a][0], [claim for _, claim in pairs[a:b]]) for a, b in solution_runs(pairs)]
        return [score for run in self._pool.map(lambda run: self.judge_solution(*run), runs) for score in run]

    def judge(self, pair: Pair) -> float:
        """One pair's verdict, with the client's retries; NaN when no verdict could be had."""
        reply = self.client.reply(self.messages(*pair))
        return UNVERIFIABLE if reply is None else parse_verdict(reply)

    def _score_unique(self, pairs: list[Pair]) -> list[float]:
        return list(self._pool.map(self.judge, pairs))

    async def ascore_with_failures(self, pairs: Sequence[Pair]) -> ScoredPairs:
        """Each pair is its own request in the shared pool, so a rollout waits only for its own pairs.

        Unlike the model backends there is nothing to batch: coalescing rollouts would make every one of
        them wait for the slowest request of the batch (up to ``timeout_s`` times the retries). Requests
        in flight are bounded by ``max_concurrency`` (the pool's size) across all concurrent callers.
        Every NaN is a failure: any claim has a verdict, so a pair without one is a judge that gave no
        answer, a malformed one or none that names a verdict.
        """
        if self.judges_solutions:
            pairs = check_pairs(pairs)
            loop = asyncio.get_running_loop()
            runs = [(pairs[a][0], [claim for _, claim in pairs[a:b]]) for a, b in solution_runs(pairs)]
            scored = await asyncio.gather(*(loop.run_in_executor(self._pool, self.judge_solution, *r) for r in runs))
            # After the first error the GenRM says nothing (NaN, not a failure); a solution with no score at all
            # got no usable reply, which the guard counts as failed.
            failed, start = [], 0
            for run in scored:
                if all(math.isnan(score) for score in run):
                    failed.extend(range(start, start + len(run)))
                start += len(run)
            return ScoredPairs([score for run in scored for score in run], tuple(failed))
        prepared = self.prepare(pairs)
        known, todo = self._lookup(prepared)
        if todo:
            loop = asyncio.get_running_loop()
            scores = await asyncio.gather(*(loop.run_in_executor(self._pool, self.judge, pair) for pair in todo))
            self._remember(todo, scores, known)
        scores = [known[pair] for pair in prepared]
        return ScoredPairs(scores, tuple(i for i, score in enumerate(scores) if math.isnan(score)))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
