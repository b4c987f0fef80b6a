"""Run an outcome scorer with a time limit that holds whatever the scorer does.

A scorer can run for minutes on a hostile answer: `math_verify` on ``$9^{9^{9^{9}}}$`` computes a huge
power inside one C call that holds the GIL, so neither a thread join with a timeout nor math-verify's own
SIGALRM limit (main thread only, checked between bytecodes) stops it. The only limit that holds is a
process boundary: :class:`TimeLimitedScorer` keeps one small worker process that runs the scorer, waits
for each answer with a deadline and, when it passes, kills the process and starts a fresh one.

The worker is started with ``subprocess`` (no fork of a process holding threads, CUDA or Ray state) and
speaks pickle over its stdin/stdout; whatever the scorer prints goes to stderr. It exits when its parent
closes the pipe, and kills itself if one call burns far more CPU than the limit (an orphan cannot spin).

    scorer = TimeLimitedScorer(default_scorer, timeout_s=10)
    scorer(data_source="math500", solution_str="<answer>$9^{9^{9^{9}}}$</answer>", ground_truth="3")
    # raises ScorerTimeout after 10 s; the next call gets a fresh worker
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from fspo.training.outcome import compute_score

logger = logging.getLogger(__name__)

# Modules the worker imports before it reports ready, so the first call's time limit is not spent importing, for a
# scorer without a ``prepare`` of its own (fspo's prepares each source's imports: math_verify, ~1.2 CPU-s, only for
# a math source).
WARM_MODULES = ("math_verify",)


class ScorerTimeout(TimeoutError):
    """The scorer did not answer within its time limit (its process was killed), or its process died."""


def default_scorer() -> Callable[..., Any]:
    """`fspo.training.outcome.compute_score` (the factory the worker calls when given none)."""
    return compute_score


def custom_scorer(path: str, name: str, reward_kwargs: dict | None = None) -> Callable[..., Any]:
    """A scorer named like verl's ``reward.custom_reward_function``: ``pkg://module.path`` or a ``.py`` file.

    ``reward_kwargs`` are added to every call (and win over the caller's), as verl does.
    """
    if path.startswith("pkg://"):
        module = importlib.import_module(path[len("pkg://") :].replace("/", "."))
    else:
        file = path[len("file://") :] if path.startswith("file://") else path
        spec = importlib.util.spec_from_file_location(f"fspo_custom_scorer_{abs(hash(file))}", file)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load a scorer from {path!r}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    function = getattr(module, name)
    kwargs = dict(reward_kwargs or {})
    return functools.partial(_with_kwargs, function, kwargs) if kwargs else function


def _with_kwargs(function: Callable, fixed: dict, **call):
    return function(**{**call, **fixed})


class _Worker:
    """One scorer process and the two pipes to it."""

    def __init__(self, factory: Callable[[], Callable], warm_modules: Sequence[str], cpu_cap_s: float):
        env = dict(os.environ)
        # The parent's import path (Ray's working_dir, an editable checkout) so the worker finds the scorer.
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "fspo.training.time_limit"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        self.ready = False
        self.prepared: set = set()  # data sources this process has prepared for
        self._send((factory, tuple(warm_modules), cpu_cap_s))

    def _send(self, message) -> None:
        pickle.dump(message, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.flush()

    def _receive(self, timeout_s: float | None):
        if timeout_s is not None:
            readable, _, _ = select.select([self.process.stdout], [], [], max(timeout_s, 0.0))
            if not readable:
                raise ScorerTimeout(f"no answer within {timeout_s:g} s")
        try:
            return pickle.load(self.process.stdout)
        except EOFError:
            raise ScorerTimeout(f"the scorer process exited with code {self.process.wait()}") from None

    def wait_ready(self, timeout_s: float) -> None:
        if self.ready:
            return
        status, payload = self._receive(timeout_s)
        if status != "ready":
            raise payload
        self.ready = True

    def call(self, kwargs: dict, timeout_s: float, prepare_timeout_s: float):
        # A source new to this process is first prepared (one-off imports), outside the limit; one request
        # in flight at a time, so a reply never waits in the pipe's read buffer.
        source = kwargs.get("data_source")
        steps = [("call", timeout_s)]
        if not isinstance(source, str) or source not in self.prepared:
            steps.insert(0, ("prepare", prepare_timeout_s))
        for kind, limit in steps:
            try:
                self._send((kind, kwargs))
            except (BrokenPipeError, OSError):
                raise ScorerTimeout(f"the scorer process exited with code {self.process.wait()}") from None
            status, payload = self._receive(limit)
            if status == "error":
                raise payload
            if kind == "prepare" and isinstance(source, str):
                self.prepared.add(source)
        return payload

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout):
            try:
                pipe.close()
            except OSError:
                pass


def _kill(worker_box: list) -> None:
    if worker_box and worker_box[0] is not None:
        worker_box[0].kill()


class TimeLimitedScorer:
    """Calls ``scorer(**kwargs)`` in a worker process and gives up after ``timeout_s`` seconds.

    Calls from several threads are served one at a time (scorers are CPU-bound Python: they were serialised
    by the GIL anyway); the time limit counts from when a call reaches the worker, not while it waits its turn.

    Args:
        factory: Picklable zero-argument callable the worker calls once to get the scorer (e.g.
            `default_scorer`, or ``functools.partial(custom_scorer, path, name)``).
        timeout_s: Seconds one call may take.
        start_timeout_s: Seconds the worker may take to start and import the scorer, and a scorer's
            ``prepare(**kwargs)`` (if it has one) before each call.
        warm_modules: Modules the worker imports before it takes calls, for a scorer without a ``prepare``.

    Raises (from a call):
        ScorerTimeout: The limit passed (the worker is killed; the next call gets a fresh one) or the worker died.
        Whatever the scorer raised, re-raised in the caller.
    """

    def __init__(
        self,
        factory: Callable[[], Callable] = default_scorer,
        timeout_s: float = 10.0,
        start_timeout_s: float = 120.0,
        warm_modules: Sequence[str] = WARM_MODULES,
    ):
        if not timeout_s or timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        pickle.dumps(factory)  # fail here, naming the factory, rather than in the worker
        self.factory, self.timeout_s, self.start_timeout_s = factory, float(timeout_s), float(start_timeout_s)
        self.warm_modules = tuple(warm_modules)
        # The worker kills itself past this much CPU time in one call: the parent normally kills it at
        # timeout_s, but an orphaned worker (parent gone) stuck in a C loop must not spin forever.
        self._cpu_cap_s = 2 * self.timeout_s + 5
        self.timeouts = 0
        self._lock = threading.Lock()
        self._box: list = [None]  # the live worker, shared with the finalizer
        self._finalizer = weakref.finalize(self, _kill, self._box)
        self._box[0] = _Worker(
            self.factory, self.warm_modules, self._cpu_cap_s
        )  # start now: imports overlap other setup

    def __call__(self, **kwargs):
        with self._lock:
            worker = self._box[0] or _Worker(self.factory, self.warm_modules, self._cpu_cap_s)
            self._box[0] = worker
            try:
                worker.wait_ready(self.start_timeout_s)
            except ScorerTimeout as error:
                self._replace()
                raise RuntimeError(f"the scorer process did not start: {error}") from None
            try:
                return worker.call(kwargs, self.timeout_s, self.start_timeout_s)
            except ScorerTimeout:
                self.timeouts += 1
                self._replace()
                raise

    def _replace(self) -> None:
        self._box[0].kill()
        # Start the next worker at once so its start-up overlaps whatever the caller does next.
        self._box[0] = _Worker(self.factory, self.warm_modules, self._cpu_cap_s)

    def close(self) -> None:
        """Stop the worker process (also done when the scorer is garbage collected or at exit)."""
        self._finalizer()


def _serve() -> None:
    """The worker's loop: read a factory, then score each kwargs dict it is sent until stdin closes."""
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # the scorer's prints must not corrupt the pickle stream
    sys.stdout = sys.stderr
    requests = sys.stdin.buffer

    def reply(status, payload) -> None:
        try:
            data = pickle.dumps((status, payload), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as error:  # noqa: BLE001 - an unpicklable result or exception still gets an answer
            data = pickle.dumps(("error", RuntimeError(f"scorer {status} not picklable: {payload!r} ({error})")))
        replies.write(data)
        replies.flush()

    factory, warm_modules, cpu_cap_s = pickle.load(requests)
    # SIGVTALRM's default action ends the process even inside a C call holding the GIL (no Python
    # handler has to run); math-verify's own limits use SIGALRM, so the two do not meet.
    signal.signal(signal.SIGVTALRM, signal.SIG_DFL)
    try:
        scorer = factory()
        prepare = getattr(scorer, "prepare", None)
        for name in warm_modules if prepare is None else ():
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    except Exception as error:  # noqa: BLE001 - reported to the parent, which raises it
        reply("error", error)
        return
    reply("ready", None)
    # A scorer may name a `prepare(**kwargs)` that imports what a call needs (verl's scorers for a source
    # fspo does not own take seconds to import): it runs before the call's time limit starts.
    while True:
        try:
            kind, kwargs = pickle.load(requests)
        except EOFError:
            return
        if kind == "prepare":
            if prepare is not None:
                try:
                    prepare(**kwargs)
                except Exception as error:  # noqa: BLE001 - the call itself will meet the same problem
                    logger.debug("scorer prepare failed: %r", error)
            reply("prepared", None)
            continue
        signal.setitimer(signal.ITIMER_VIRTUAL, cpu_cap_s)
        try:
            result = ("ok", scorer(**kwargs))
        except Exception as error:  # noqa: BLE001 - re-raised in the parent
            result = ("error", error)
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        reply(*result)


if __name__ == "__main__":
    _serve()
