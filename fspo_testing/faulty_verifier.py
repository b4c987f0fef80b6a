"""A verifier server with faults on demand, for the fault-injection tests of the colocated placement.

The faults are real: the backend raises inside the model call on a marked pair (as a tokenizer error or
an out-of-memory row would), the model call blocks (as a hung device would) until the stall ends, or every
call raises the error torch raises for a broken CUDA context, inside a real
:class:`~fspo.verifiers.ray_actor.VerifierServer` actor reached through Ray.
"""

from __future__ import annotations

import time

import torch

from fspo.verifiers.base import Pair
from fspo.verifiers.lexical import LexicalVerifier
from fspo.verifiers.ray_actor import VerifierServer

# A claim containing this word makes the model call that holds it raise.
RAISE_MARKER = "FAULTYPAIR"


class FaultyVerifier(LexicalVerifier):
    """``lexical``, except that a batch holding a claim with :data:`RAISE_MARKER` raises, every batch that
    starts before ``stalled_until`` (``time.monotonic()``) blocks until then, and every batch raises torch's
    CUDA error once ``device_broken`` is set (as a broken CUDA context does until its process ends)."""

    name = "lexical"
    stalled_until = 0.0
    device_broken = False

    def _score_unique(self, pairs: list[Pair]) -> list[float]:
        if self.device_broken:
            raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered")
        stall = self.stalled_until - time.monotonic()
        if stall > 0:
            time.sleep(stall)
        marked = [claim for _, claim in pairs if RAISE_MARKER in claim]
        if marked:
            raise ValueError(f"{len(marked)} marked pair(s) in a batch of {len(pairs)}")
        return super()._score_unique(pairs)


class FaultyVerifierServer(VerifierServer):
    """A verifier server running :class:`FaultyVerifier` whatever its config names."""

    def build(self, settings) -> FaultyVerifier:
        verifier = FaultyVerifier()
        verifier.coalesce_ms = settings.coalesce_ms
        return verifier

    async def hang(self, seconds: float) -> None:
        """The server stops answering for ``seconds``: every model call that starts before then blocks until then."""
        self.verifier.stalled_until = time.monotonic() + seconds

    async def break_device(self) -> None:
        """From now on every model call raises torch's CUDA error, until the process is replaced."""
        self.verifier.device_broken = True
