"""FSPO's training config: ``fspo_trainer.yaml`` (verl's ``ppo_trainer`` plus an ``fspo:`` block), the
dataclasses its ``fspo:`` block (:mod:`fspo.config.fspo_config`) and ``fspo.verifier`` sub-block
(:mod:`fspo.config.verifier`) convert to, in verl's ``BaseConfig`` style, and the vocabulary
(:mod:`fspo.config.vocabulary`: ``ConfigError`` and every closed set of values) the rest of ``fspo`` reads.

The package imports nothing else from ``fspo``: every other module may depend on it. This file imports
nothing at all, so that the vocabulary loads without verl (the dataclasses import it: seconds).
"""
