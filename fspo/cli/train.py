"""``fspo train`` (and ``fspo-train``): its own help and option list, then verl (:func:`fspo.training.main.main`).

``--help`` answers here, without importing verl (~7 s) or printing Hydra's dump of the whole config;
``--options`` lists the ``fspo.*`` keys from the config dataclasses. Everything else goes to
:func:`fspo.training.main.main`, Hydra's own flags (``--cfg job``, ``--hydra-help``) included.
"""

from __future__ import annotations

import sys

HELP = """\
usage: fspo train [KEY=VALUE ...]        (the same: fspo-train)

Train with verl's PPO trainer and FSPO's step verifier. Each argument is a Hydra override on top of
fspo/config/fspo_trainer.yaml: verl's ppo_trainer config plus an fspo: block. A machine without an
accelerator gets the CPU preset (platform=cpu); platform=gpu keeps verl's GPU defaults.

  fspo train --options      the fspo.* keys: default, the verifier backends that read it, meaning
  fspo train --cfg job      the whole composed config, verl's keys included (Hydra)
  fspo train --hydra-help   Hydra's own flags

environment:
  FSPO_DRY_RUN=1            resolve and validate the config, print it, start nothing
  FSPO_PREFLIGHT=0          skip the check that every model the run loads can be had (e.g. validating a
                            cluster's config from a laptop)
  VERL_PLATFORM=cpu|cuda    the platform every process uses (default: cpu exactly where no accelerator is)
  FSPO_CPU_DTYPE=float32|bfloat16, FSPO_CPU_THREADS=N
                            the CPU backend's compute dtype and threads per process
  FSPO_DECODE_ROWS=N        rows in every decoding step of the CPU rollout (default 8)
  HF_TOKEN, HF_HUB_OFFLINE  reach every Ray worker; the token never travels through Ray's config

docs: docs/configuration.md (keys, CPU preset, metrics), docs/gpu-training.md (recipes, several nodes)
example:
  fspo train data.train_files=data/hotpotqa/train.parquet data.val_files=data/hotpotqa/test.parquet \\
    actor_rollout_ref.model.path=Qwen/Qwen2.5-7B-Instruct fspo.verifier.name=hhem trainer.n_gpus_per_node=8"""


def answered_here(argv: list[str]) -> int | None:
    """Print the help or the option list when ``argv`` asks for one (exit status 0); None otherwise."""
    if argv and argv[0] in ("-h", "--help"):
        print(HELP)
        return 0
    if argv and argv[0] == "--options":
        from fspo.config.reference import text

        print(text())
        return 0
    return None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    answer = answered_here(argv)
    if answer is not None:
        return answer
    from fspo.training.main import main as train

    return train(argv)
