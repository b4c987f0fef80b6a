"""An LLM judge behind an OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM, SGLang, a hosted API).

Prompt (``JUDGE_SYSTEM_PROMPT`` + ``JUDGE_USER_TEMPLATE``): the judge sees the evidence and one claim
(a reasoning step) and must answer with one word, ``SUPPORTED`` or ``UNSUPPORTED``. The verdict is read
from the reply after dropping any ``<think>...</think>`` block: the last ``SUPPORTED`` /
``UNSUPPORTED`` / ``NOT SUPPORTED`` word wins (case-insensitive) and maps to 1.0 / 0.0. A reply with no
verdict, a malformed response, an HTTP error that survives the retries or a timeout scores NaN
(unverifiable), is reported as a failed pair (the run-level guard counts it) and the run goes on. Requests, retries and timeouts are `fspo.chat_client.ChatClient`'s,
shared with the evaluation judge (`fspo evaluate --judge`).
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from fspo.chat_client import ChatClient, chat_url, without_thinking
from fspo.verifiers.base import UNVERIFIABLE, Pair, PairPipeline, ScoredPairs

__all__ = ["JUDGE_SYSTEM_PROMPT", "JUDGE_USER_TEMPLATE", "LLMJudgeVerifier", "chat_url", "parse_verdict"]

JUDGE_SYSTEM_PROMPT = (
    "You are a strict fact checker. You are given EVIDENCE and a CLAIM taken from someone's reasoning. "
    "Decide whether the EVIDENCE supports the CLAIM: every fact the claim states must be stated in or "
    "directly implied by the evidence. Claims that add facts the evidence does not contain, or that "
    "contradict it, are UNSUPPORTED. Answer with exactly one word: SUPPORTED or UNSUPPORTED."
)
JUDGE_USER_TEMPLATE = "EVIDENCE:\n{evidence}\n\nCLAIM:\n{claim}\n\nVerdict (SUPPORTED or UNSUPPORTED):"

_VERDICT_RE = re.compile(r"\b(UNSUPPORTED|NOT[\s_-]+SUPPORTED|SUPPORTED)\b", re.IGNORECASE)


def parse_verdict(reply: str) -> float:
    """1.0 for SUPPORTED, 0.0 for UNSUPPORTED / NOT SUPPORTED, NaN when the reply holds no verdict."""
    if not isinstance(reply, str):
        return UNVERIFIABLE
    verdicts = _VERDICT_RE.findall(without_thinking(reply))
    if not verdicts:
        return UNVERIFIABLE
    return 1.0 if verdicts[-1].upper() == "SUPPORTED" else 0.0


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
        evidence_top_k, cache_size: see [`~fspo.verifiers.base.PairPipeline`].
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
    ):
        super().__init__(evidence_top_k=evidence_top_k, cache_size=cache_size)
        if max_concurrency < 1:
            raise ValueError("max_concurrency >= 1 is required")
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
