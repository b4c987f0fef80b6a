"""Every model backend loads its checkpoint through :func:`from_pretrained_checked`, which refuses a checkpoint
of the wrong architecture: one whose weights do not fill the backend's model, so that transformers would
initialise part of it at random (a classification head on a causal LM or a T5 checkpoint) and the verifier
would score with noise.
"""

from __future__ import annotations


def from_pretrained_checked(model_class, model_path: str, **kwargs):
    """``model_class.from_pretrained(model_path, **kwargs)``; ValueError naming the checkpoint, its
    architecture and the weights it lacks where transformers reports any newly initialised (missing keys, or
    mismatched shapes)."""
    model, report = model_class.from_pretrained(model_path, output_loading_info=True, **kwargs)
    fresh = [*report.get("missing_keys", ()), *(_key(item) for item in report.get("mismatched_keys", ()))]
    if fresh:
        saved = ", ".join(getattr(model.config, "architectures", None) or [model.config.model_type])
        shown = ", ".join(sorted(fresh)[:3]) + (f" and {len(fresh) - 3} more" if len(fresh) > 3 else "")
        raise ValueError(
            f"{model_path} is a {saved} checkpoint, not a {type(model).__name__}: it lacks {shown}, which "
            "would be initialised at random; give a checkpoint of this verifier's architecture"
        )
    return model


def _key(item) -> str:
    return item[0] if isinstance(item, tuple | list) else str(item)
