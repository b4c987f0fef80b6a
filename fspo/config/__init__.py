"""FSPO's training config: ``fspo_trainer.yaml`` (verl's ``ppo_trainer`` plus an ``fspo:`` block) and the
dataclasses its ``fspo:`` block and ``fspo.verifier`` sub-block convert to, in verl's ``BaseConfig`` style."""

from fspo.config.fspo_config import FSPOConfig, fspo_config
from fspo.config.verifier import VerifierConfig, verifier_config

__all__ = ["FSPOConfig", "VerifierConfig", "fspo_config", "verifier_config"]
