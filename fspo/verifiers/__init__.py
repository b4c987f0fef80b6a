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
from fspo.verifiers.placement import PLACEMENTS

__all__ = [
    "DEFAULTS",
    "UNVERIFIABLE",
    "VERIFIER_NAMES",
    "PairPipeline",
    "Verifier",
    "build_verifier",
    "validate_verifier_config",
]

logger = logging.getLogger(__name__)

# Options every backend accepts; `threshold` is read by the reward manager and `fspo verify`.
_COMMON = {
    "name",
    "threshold",
    "evidence_top_k",
    "cache_size",
    "coalesce_ms",
    "placement",
    "num_gpus",
    "num_cpus",
    "actor_name",
    "start_timeout_s",
}
_MODEL = {"model_path", "tokenizer_path", "device", "dtype", "max_tokens_per_batch"}
OPTIONS: dict[str, set[str]] = {
    "lexical": set(),
    "embedding": _MODEL | {"max_length"},
    "hhem": _MODEL | {"trust_remote_code"},
    "nli": _MODEL | {"entailment_label", "max_length", "stride", "trust_remote_code"},
    "llm_judge": {
        "url",
        "endpoint",
        "model",
        "api_key_env",
        "max_concurrency",
        "timeout_s",
        "max_retries",
        "backoff_s",
        "max_tokens",
        "temperature",
    },
}
VERIFIER_NAMES = tuple(OPTIONS)

# Defaults of the `fspo.verifier` block (backend-specific ones are the classes' own defaults).
DEFAULTS = {
    "name": "hhem",
    "threshold": 0.5,
    "evidence_top_k": None,
    "cache_size": 0,
    "coalesce_ms": 10.0,
    "placement": "auto",
    "num_gpus": 1,
    "num_cpus": 1,
    "actor_name": "fspo_verifier",
    "start_timeout_s": 600.0,
}


def _class_for(name: str):
    if name == "lexical":
        from fspo.verifiers.lexical import LexicalVerifier as cls
    elif name == "embedding":
        from fspo.verifiers.embedding import EmbeddingVerifier as cls
    elif name == "hhem":
        from fspo.verifiers.hhem import HHEMVerifier as cls
    elif name == "nli":
        from fspo.verifiers.nli import NLIVerifier as cls
    else:
        from fspo.verifiers.llm_judge import LLMJudgeVerifier as cls
    return cls


def _plain(config: Mapping) -> dict:
    """A plain dict from a Mapping or an OmegaConf node; keys whose value is None are dropped."""
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(config, DictConfig):
            config = OmegaConf.to_container(config, resolve=True)
    except ImportError:
        pass
    if not isinstance(config, Mapping):
        raise TypeError(
            f"the verifier config must be a mapping (the fspo.verifier block), got {type(config).__name__}"
        )
    return {str(k): v for k, v in config.items() if v is not None}


def validate_verifier_config(config: Mapping) -> dict:
    """Check an ``fspo.verifier`` block without building anything; return its resolved settings.

    Returns a dict with ``name``, ``threshold``, ``coalesce_ms``, ``placement``, ``num_gpus``,
    ``num_cpus``, ``actor_name``, ``start_timeout_s`` and ``options`` (the backend's own options).

    Raises:
        ValueError: unknown name, an option no backend knows, or a bad value. Options of other
            backends (``model_path`` with ``name: lexical``) are dropped with a warning, so one config
            block can carry settings for several backends.
    """
    options = _plain(config)
    name = options.pop("name", DEFAULTS["name"])
    if name not in OPTIONS:
        raise ValueError(f"unknown fspo.verifier.name {name!r}; valid names: {', '.join(VERIFIER_NAMES)}")
    known_anywhere = _COMMON.union(*OPTIONS.values())
    unknown = sorted(set(options) - known_anywhere)
    if unknown:
        valid = sorted((_COMMON | OPTIONS[name]) - {"name"})
        raise ValueError(
            f"unknown option(s) {unknown} for fspo.verifier.name={name!r}; valid options: {', '.join(valid)}"
        )
    # Another backend's option (a recipe's model_path while trying name=lexical) is dropped, not fatal.
    other = sorted(set(options) - _COMMON - OPTIONS[name])
    if other:
        logger.warning("fspo.verifier: options %s do not apply to name=%r and are ignored", other, name)
        for key in other:
            options.pop(key)
    settings = {key: options.pop(key, DEFAULTS[key]) for key in
                ("threshold", "coalesce_ms", "placement", "num_gpus", "num_cpus", "actor_name", "start_timeout_s")}
    threshold, coalesce_ms = settings["threshold"], settings["coalesce_ms"]
    if not (isinstance(threshold, (int, float)) and 0.0 <= threshold <= 1.0):
        raise ValueError(f"fspo.verifier.threshold must be a number in [0, 1], got {threshold!r}")
    if not (isinstance(coalesce_ms, (int, float)) and coalesce_ms >= 0):
        raise ValueError(f"fspo.verifier.coalesce_ms must be a non-negative number, got {coalesce_ms!r}")
    if settings["placement"] not in PLACEMENTS:
        raise ValueError(
            f"fspo.verifier.placement must be one of {', '.join(PLACEMENTS)}, got {settings['placement']!r}"
        )
    if name == "llm_judge":
        if "endpoint" in options:
            options.setdefault("url", options.pop("endpoint"))
        if "url" not in options:
            raise ValueError(
                "fspo.verifier.name=llm_judge needs fspo.verifier.url (the OpenAI-compatible server), or "
                "reward.reward_model.enable=true to judge with verl's reward-model servers"
            )
    if name == "nli" and "model_path" not in options:
        raise ValueError("fspo.verifier.name=nli needs fspo.verifier.model_path (a sequence-classification NLI model)")
    if "max_tokens_per_batch" in options:
        options["max_tokens_per_batch"] = int(options["max_tokens_per_batch"])
    settings["start_timeout_s"] = float(settings["start_timeout_s"])
    return {"name": name, **settings, "options": options}


def build_verifier(config: Mapping) -> Verifier:
    """Builds the verifier described by an ``fspo.verifier`` config block.

    Args:
        config: ``name`` (one of ``lexical``, ``embedding``, ``hhem``, ``nli``, ``llm_judge``) and that
            backend's options. ``placement``: ``local``/``auto`` build the model in this process;
            ``colocated`` returns a client of the servers FSPO's trainer starts on verl's GPUs;
            ``ray`` runs it in a named Ray actor that requests ``num_gpus`` GPUs (see
            :mod:`fspo.verifiers.placement`). Options set to null take the backend default.
            ``coalesce_ms``: how long an async ``ascore`` call waits for concurrent calls to merge
            into one batch.

    Raises:
        ValueError: as :func:`validate_verifier_config`.
    """
    settings = validate_verifier_config(config)
    name, options = settings["name"], settings["options"]
    if settings["placement"] == "colocated":
        from fspo.verifiers.ray_actor import ColocatedVerifier

        return ColocatedVerifier(name, threshold=float(settings["threshold"]))
    if settings["placement"] == "ray":
        from fspo.verifiers.ray_actor import RayVerifier

        return RayVerifier(
            {"name": name, "threshold": settings["threshold"], "coalesce_ms": settings["coalesce_ms"], **options},
            num_gpus=settings["num_gpus"],
            num_cpus=settings["num_cpus"],
            actor_name=settings["actor_name"],
            start_timeout_s=settings["start_timeout_s"],
        )
    verifier = _class_for(name)(**options)
    verifier.threshold = float(settings["threshold"])
    verifier.coalesce_ms = float(settings["coalesce_ms"])
    return verifier
