"""A verifier server with faults on demand, for the fault-injection tests of the colocated placement.

The faults are real: the backend raises inside the model call on a marked pair (as a tokenizer error or
an out-of-memory row would), or the model call blocks (as a hung device would), inside a real
:class:`~fspo.verifiers.ray_actor.VerifierServer` actor reached through Ray.
"""

from __future__ import annotations

import time

from fspo.verifiers.base import Pair
from fspo.verifiers.lexical import LexicalVerifier
from fspo.verifiers.ray_actor import VerifierServer

# A claim containing this word makes the model call that holds it raise.
RAISE_MARKER = "FAULTYPAIR"


class FaultyVerifier(LexicalVerifier):
    """``lexical``, except that a batch holding a claim with :data:`RAISE_MARKER` raises, and every batch
    blocks for ``hang_s`` seconds once :meth:`hang` is called."""

    name = "lexical"
    hang_s = 0.0

    def _score_unique(self, pairs: list[Pair]) -> list[float]:
        if self.hang_s:
            time.sleep(self.hang_s)
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
        """From now on every model call blocks ``seconds`` (the server stops answering)."""
        self.verifier.hang_s = seconds
