"""The support threshold training runs each verifier backend at, and the config resolver that reads it.

Here, in the config package, so the trainer reads the figure without importing the tools that measured it
(:mod:`fspo.verifier_tools.quality` computes the metrics; ``fspo verify --labelled`` measures them).
"""

from __future__ import annotations

# The threshold training runs each backend at (``fspo.verifier.threshold``), where it was calibrated: the
# best balanced accuracy on held-out labelled claims (``fspo verify --labelled``; docs/verifiers.md's table).
# lexical: 1.0 on held-out synthetic facts, for both evidence units, and for the sentence unit also on
# judge-labelled steps of a trained quickstart policy (benchmarks/judged_steps.py), as the quickstart and
# recipes/run_cpu.sh train. A backend not
# listed runs at the config default, 0.5 (HHEM-2.1-Open's published operating point in the GPU recipes).
CALIBRATED_THRESHOLDS = {"lexical": 1.0}
DEFAULT_THRESHOLD = 0.5


def calibrated_threshold(verifier_name: str) -> float:
    """The support threshold training uses for ``verifier_name`` (see ``CALIBRATED_THRESHOLDS``)."""
    return CALIBRATED_THRESHOLDS.get(verifier_name, DEFAULT_THRESHOLD)


# ``${fspo_calibrated_threshold:${fspo.verifier.name}}`` in fspo_trainer.yaml: the backend's calibrated threshold, so
# every run (both presets, the quickstart, every recipe) trains at the one figure above.
THRESHOLD_RESOLVER = "fspo_calibrated_threshold"


def register_threshold_resolver() -> None:
    """Make ``${fspo_calibrated_threshold:NAME}`` resolve to :func:`calibrated_threshold` of ``NAME``."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(THRESHOLD_RESOLVER):
        OmegaConf.register_new_resolver(THRESHOLD_RESOLVER, lambda name: calibrated_threshold(str(name)))
