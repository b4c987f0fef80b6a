"""Step verifiers: map (evidence, claim) pairs to support probabilities in ``[0, 1]`` (NaN = unverifiable).

Build one from the ``fspo.verifier`` config block with [`build_verifier`]:

```python
from fspo.config.verifier import verifier_config
from fspo.verifiers import build_verifier

verifier = build_verifier(verifier_config({"name": "lexical"}))
verifier.score([("Paris is the capital of France.", "The capital of France is Paris.")])  # [1.0]
```
"""

from __future__ import annotations

from fspo.config.verifier import VerifierConfig
from fspo.verifiers.backends import build_local_verifier
from fspo.verifiers.base import UNVERIFIABLE, PairPipeline, Verifier
from fspo.verifiers.ray_actor import ColocatedVerifier

__all__ = ["UNVERIFIABLE", "PairPipeline", "Verifier", "build_verifier"]


def build_verifier(settings: VerifierConfig) -> Verifier:
    """The verifier an ``fspo.verifier`` block describes, where its ``placement`` puts it.

    ``local``/``auto`` build the model in this process (:func:`fspo.verifiers.backends.build_local_verifier`);
    ``colocated`` and ``ray`` return a client of the servers FSPO's trainer starts (on verl's GPUs, or one
    server with ``num_gpus`` of its own; see :mod:`fspo.verifiers.placement`).

    Args:
        settings: the block as a :class:`fspo.config.verifier.VerifierConfig` (``fspo.config.verifier.verifier_config`` turns
            a mapping into one, naming a bad key or value).

    Raises:
        TypeError: ``settings`` is not a ``VerifierConfig``.
        fspo.config.vocabulary.ConfigError: a missing ``model_path`` (nli) or ``url`` (llm_judge).
    """
    if not isinstance(settings, VerifierConfig):
        raise TypeError(
            f"build_verifier takes a fspo.config.verifier.VerifierConfig, got {type(settings).__name__}: "
            "convert a mapping with fspo.config.verifier.verifier_config(...)"
        )
    if settings.placement in ("colocated", "ray"):
        # The trainer starts the servers of either placement; this client finds them by name.
        return ColocatedVerifier(
            settings.name,
            threshold=settings.threshold,
            request_timeout_s=settings.request_timeout_s,
            request_deadline_s=settings.deadline_s,
        )
    return build_local_verifier(settings)
