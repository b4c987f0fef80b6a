"""Coalesce concurrent requests into batched calls.

verl hands work to FSPO one sample at a time, concurrently: the agent loop sends one
``generate`` per rollout to the rollout server, and the reward loop calls the reward manager
once per finished rollout. Models are much cheaper per item in batches, so both the ``hf``
rollout server and the FSPO reward manager put their requests through a :class:`Coalescer`:
requests that arrive within a short window, or while the previous batch is running, go to the
model together.

When a merged batch fails, one bad item (an out-of-memory row, a tokenizer error) must not fail the
dozens of requests merged with it: with ``failed_result`` set, the batch is split in halves until the
failing items are isolated (:func:`isolate_failures`); only they get ``failed_result``, the rest are
scored.

A submission whose caller gave up (its task was cancelled: a client's deadline passed) is dropped before
its batch is computed, not scored for nobody; a merged call is bounded (``max_items``, ``max_cost``), so a
request waits behind a bounded amount of work, not behind every request pending.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Raise:
    """``failed_result``'s default: a failing batch fails every request merged into it."""


RAISE = _Raise()


def isolate_failures(
    items: Sequence[Item], run: Callable[[list[Item]], Sequence[Result]], failed: Result
) -> tuple[list[Result], list[int]]:
    """``run(items)``; if it raises, the items are split in halves, recursively, until the failing ones are alone.

    Returns one result per item (``failed`` for an item that fails on its own) and the indices of the
    failed items. ``k`` failing items among ``n`` cost about ``2 k log2(n / k)`` extra calls.

    Raises:
        The first error, when every item fails: the fault is then the batch function's (a dead device),
        not its items', and the caller should see it.
    """
    items = list(items)
    results: list = [failed] * len(items)
    failures: list[int] = []
    first_error: list[BaseException] = []

    def attempt(lo: int, hi: int) -> None:
        try:
            out = list(run(items[lo:hi]))
            if len(out) != hi - lo:
                raise RuntimeError(f"batch function returned {len(out)} results for {hi - lo} items")
        except Exception as error:  # noqa: BLE001 - split and retry; the error is kept for the all-failed case
            if not first_error:
                first_error.append(error)
            if hi - lo == 1:
                failures.append(lo)
                return
            middle = (lo + hi) // 2
            attempt(lo, middle)
            attempt(middle, hi)
            return
        results[lo:hi] = out

    if items:
        attempt(0, len(items))
    if items and len(failures) == len(items):
        raise first_error[0]
    return results, failures


@dataclass
class _Submission:
    items: list
    future: asyncio.Future = field(repr=False)


class Coalescer(Generic[Item, Result]):
    """Runs ``batch_fn(key, items) -> results`` on everything submitted together under ``key``.

    Args:
        batch_fn: Called in a worker thread with a key and the items of all submissions gathered
            under it; returns one result per item, in order.
        window_s: How long to wait after the first submission of a batch for others to arrive.
        max_items: Largest number of items in one ``batch_fn`` call (0 = no limit); a larger
            gathering is split into several calls.
        max_cost: Largest summed ``cost(item)`` in one call (0 = no limit), e.g. a verifier's model tokens;
            a submission costlier than that alone is called alone.
        cost: the cost of one item (default 1 each).
        failed_result: if given, a failing batch is split until its failing items are isolated
            (:func:`isolate_failures`); they get this result and are counted in ``failed_items``.
            By default every request of a failing batch gets its error.

    Batches run one at a time (``lock`` is held during each call), so a model behind
    ``batch_fn`` is never used by two batches at once, and anything else that needs the model to
    itself (swapping weights) can take ``lock`` too.
    """

    def __init__(
        self,
        batch_fn: Callable[[Hashable, list[Item]], Sequence[Result]],
        window_s: float = 0.02,
        max_items: int = 0,
        failed_result: Any = RAISE,
        max_cost: float = 0,
        cost: Callable[[Item], float] | None = None,
    ):
        self.batch_fn = batch_fn
        self.window_s = window_s
        self.max_items = max_items
        self.max_cost = max_cost
        self.cost = cost or (lambda _item: 1)
        self.failed_result = failed_result
        self.failed_items = 0
        self.lock = asyncio.Lock()
        self._pending: dict[Hashable, list[_Submission]] = {}
        self._flush_task: asyncio.Task | None = None
        self.calls = 0
        self.busy_seconds = 0.0
        self.computed_items = 0  # items passed to batch_fn (isolate_failures' retries not counted again)
        self.dropped_submissions = 0  # cancelled before their batch ran: never computed

    async def submit(self, items: Sequence[Item], key: Hashable = None) -> tuple[list[Result], float]:
        """Queue ``items``; return their results and this submission's share of the batch time.

        The share is the batch's seconds times this submission's fraction of its items, so the
        shares of all submissions add up to the time spent in ``batch_fn``.
        """
        items = list(items)
        if not items:
            return [], 0.0
        future = asyncio.get_running_loop().create_future()
        self._pending.setdefault(key, []).append(_Submission(items, future))
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.create_task(self._flush_after_window())
        return await future

    async def _flush_after_window(self) -> None:
        await asyncio.sleep(self.window_s)
        async with self.lock:
            while self._pending:
                key, submissions = next(iter(self._pending.items()))
                del self._pending[key]
                await self._run(key, submissions)

    async def _run(self, key: Hashable, submissions: list[_Submission]) -> None:
        for chunk in self._chunks(submissions):
            # Checked as each call starts: a caller may give up while the calls before its own run.
            waiting = [submission for submission in chunk if not submission.future.done()]
            self.dropped_submissions += len(chunk) - len(waiting)
            chunk = waiting
            if not chunk:
                continue
            items = [item for submission in chunk for item in submission.items]
            self.computed_items += len(items)
            started = time.perf_counter()
            try:
                results = list(await asyncio.to_thread(self._call, key, items))
                if len(results) != len(items):
                    raise RuntimeError(f"batch function returned {len(results)} results for {len(items)} items")
            except Exception as error:  # noqa: BLE001 - each waiting caller gets the error
                for submission in chunk:
                    if not submission.future.done():
                        submission.future.set_exception(error)
                continue
            seconds = time.perf_counter() - started
            self.calls += 1
            self.busy_seconds += seconds
            offset = 0
            for submission in chunk:
                count = len(submission.items)
                if not submission.future.done():
                    share = seconds * count / len(items)
                    submission.future.set_result((results[offset : offset + count], share))
                offset += count

    def _call(self, key: Hashable, items: list) -> Sequence:
        if self.failed_result is RAISE:
            return self.batch_fn(key, items)
        results, failures = isolate_failures(items, lambda part: self.batch_fn(key, part), self.failed_result)
        self.failed_items += len(failures)
        return results

    def _chunks(self, submissions: list[_Submission]) -> list[list[_Submission]]:
        sizes = [len(submission.items) for submission in submissions]
        costs = [
            sum(self.cost(item) for item in submission.items) if self.max_cost else 0 for submission in submissions
        ]
        return [[submissions[i] for i in chunk] for chunk in plan_chunks(sizes, costs, self.max_items, self.max_cost)]

    def stats(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "busy_seconds": self.busy_seconds,
            "failed_items": self.failed_items,
            "computed_items": self.computed_items,
            "dropped_submissions": self.dropped_submissions,
        }


def plan_chunks(sizes: Sequence[int], costs: Sequence[float], max_items: int, max_cost: float) -> list[list[int]]:
    """Consecutive submissions (their item counts and costs) grouped into calls of at most ``max_items`` items
    and ``max_cost`` cost (0 = no limit); a submission over a limit alone is a call of its own. In order."""
    chunks: list[list[int]] = []
    items = cost = 0.0
    for index, (size, price) in enumerate(zip(sizes, costs)):
        over = (max_items and items + size > max_items) or (max_cost and cost + price > max_cost)
        if not chunks or over:
            chunks.append([])
            items = cost = 0.0
        chunks[-1].append(index)
        items += size
        cost += price
    return chunks
