"""``fspo_seeded_single_turn``: verl's single-turn agent loop, with a sampling seed for every rollout.

verl's agent loop sends the rollout server nothing that says which rollout a request is (its request id
is a fresh uuid, and under ``rollout.full_determinism`` V1's is ``det-0`` for every request), so a server
that batches requests cannot tell them apart, and their samples come from whatever generator state the
timing left. This loop adds ``seed`` to each request's sampling parameters (vLLM's per-request
``SamplingParams.seed``, which the ``hf`` rollout server honours too), derived by :func:`sample_seed` from
the run's ``rollout.seed``, the training step, the prompt and the rollout's index within its group: the
same rollout gets the same seed in every run, and different rollouts different seeds.

The CPU preset selects it (``rollout.agent.default_agent_loop``); :mod:`fspo.cpu.plugin` registers it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def _plain(value: Any) -> Any:
    """``value`` as JSON-able plain data (verl hands the prompt over as numpy arrays of dicts)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def sample_seed(run_seed: int, global_steps: Any, index: Any, rollout: Any, prompt: Any) -> int:
    """The sampling seed of one rollout: a 63-bit hash of the run's seed, the training step, the prompt's
    dataset index and messages, and the rollout's index within its group (``session_id``)."""
    identity = json.dumps(_plain([run_seed, global_steps, index, rollout, prompt]), sort_keys=True)
    return int.from_bytes(hashlib.sha256(identity.encode()).digest()[:8], "big") >> 1


def _loop_class():
    from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

    return SingleTurnAgentLoop


class SeededSingleTurnAgentLoop(_loop_class()):
    """verl's ``single_turn_agent`` with ``seed`` in the sampling parameters (see the module docstring)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> Any:
        # V1 names a rollout's place in its group `session_id`; the legacy trainer repeats rows instead and
        # numbers every row (`priority`).
        rollout = kwargs.get("session_id", kwargs.get("priority", 0))
        seed = sample_seed(
            int(self.rollout_config.seed),
            kwargs.get("global_steps"),
            kwargs.get("index"),
            rollout,
            kwargs.get("raw_prompt"),
        )
        return await super().run({**sampling_params, "seed": seed}, **kwargs)
