"""The verifier backends by name, each built in this process (``fspo.verifier.placement: local``).

A backend's module is imported only when its name is asked for: the model backends import torch and
transformers, which a ``lexical`` or ``llm_judge`` run (and ``fspo verify --help``) never needs.
"""

from __future__ import annotations

import logging

from fspo.config.verifier import VerifierConfig
from fspo.verifiers.base import Verifier

logger = logging.getLogger(__name__)


def backend_class(name: str) -> type[Verifier]:
    """The class (or factory) of backend ``name``, one of :data:`fspo.config.vocabulary.VERIFIER_NAMES`."""
    # Lazy: each backend's heavy dependencies load only when that backend is named.
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
    elif name == "llm_judge":
        from fspo.verifiers.llm_judge import LLMJudgeVerifier as cls
    else:  # VerifierConfig refuses other names; this guards a caller that built none
        raise ValueError(f"unknown verifier backend {name!r}")
    return cls


def build_local_verifier(settings: VerifierConfig) -> Verifier:
    """Backend ``settings.name`` loaded in this process, with its options, threshold and coalescing window.

    Options of other backends (``model_path`` with ``name: lexical``) are ignored with a warning, so one
    block can carry settings for several backends.
    """
    options = settings.backend_options()
    ignored = settings.ignored_options()
    if ignored:
        logger.warning("fspo.verifier: options %s do not apply to name=%r and are ignored", ignored, settings.name)
    verifier = backend_class(settings.name)(**options)
    verifier.threshold = settings.threshold
    verifier.coalesce_ms = settings.coalesce_ms
    return verifier
