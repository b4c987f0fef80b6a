"""Step verifiers: map (evidence, claim) pairs to support probabilities in ``[0, 1]`` (NaN = unverifiable).

Build one from the ``fspo.verifier`` config block with [`build_verifier`]:

```python
from fspo.verifiers import build_verifier

verifier = build_verifier({"name": "lexical"})
verifier.score([("Paris is the capital of France.", "The capital of France is Paris.")])  # [1.0]
```
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from fspo.verifiers.base import UNVERIFIABLE, PairPipeline, Verifier

__all__ = [
    "UNVERIFIABLE",
    "VERIFIER_NAMES",
    "PairPipeline",
    "Verifier",
    "build_verifier",
]

logger = logging.getLogger(__name__)

# The backends; each one's options and their types: fspo.config.VerifierConfig.
VERIFIER_NAMES = ("lexical", "embedding", "hhem", "nli", "llm_judge", "minicheck", "factcg")


def _class_for(name: str):
    if name == "lexical":
        from fspo.verifiers.lexical import LexicalVerifier as cls
    elif name == "embedding":
        from fspo.verifiers.embedding import EmbeddingVerifier as cls
    elif name == "hhem":
        from fspo.verifiers.hhem import HHEMVerifier as cls
    elif name == "nli":
        from fspo.verifiers.nli import NLIVerifier as cls
    elif name == "minicheck":
        from fspo.verifiers.minicheck import build_minicheck as cls
    elif name == "factcg":
        from fspo.verifiers.factcg import FactCGVerifier as cls
    else:
        from fspo.verifiers.llm_judge import LLMJudgeVerifier as cls
    return cls


def build_verifier(config: Mapping) -> Verifier:
    """Builds the verifier described by an ``fspo.verifier`` config block.

    Args:
        config: a :class:`fspo.config.VerifierConfig`, or a mapping of its fields (a ``DictConfig``
            or a dict): ``name`` (one of ``lexical``, ``embedding``, ``hhem``, ``nli``, ``llm_judge``,
            ``minicheck``, ``factcg``) and
            that backend's options. ``placement``: ``local``/``auto`` build the model in this process;
            ``colocated`` returns a client of the servers FSPO's trainer starts on verl's GPUs;
            ``ray`` runs it in a named Ray actor that requests ``num_gpus`` GPUs (see
            :mod:`fspo.verifiers.placement`). Options set to null take the backend default; options
            of other backends (``model_path`` with ``name: lexical``) are ignored with a warning, so one
            block can carry settings for several backends.

    Raises:
        ValueError: (:class:`fspo.checks.ConfigError`) an unknown name or option, a value of the wrong
            type or out of range, a missing ``model_path`` (nli) or ``url`` (llm_judge).
    """
    from fspo.config.verifier import verifier_config

    settings = verifier_config(config)
    options = settings.backend_options()
    ignored = settings.ignored_options()
    if ignored:
        logger.warning("fspo.verifier: options %s do not apply to name=%r and are ignored", ignored, settings.name)
    if settings.placement == "colocated":
        from fspo.verifiers.ray_actor import ColocatedVerifier

        return ColocatedVerifier(
            settings.name, threshold=settings.threshold, request_timeout_s=settings.request_timeout_s
        )
    if settings.placement == "ray":
        from fspo.verifiers.ray_actor import RayVerifier

        return RayVerifier(settings)
    verifier = _class_for(settings.name)(**options)
    verifier.threshold = settings.threshold
    verifier.coalesce_ms = settings.coalesce_ms
    return verifier
