"""One validation before training per seed, shared by the runs that would validate the same thing.

Before training, two arms of one seed (FSPO and GRPO, say) validate the same model on the same questions with the
same greedy settings: on all 8 seeds of ``benchmarks/results/fspo_vs_grpo.json`` every arm's figures before
training are identical, per question. A later arm therefore runs with ``trainer.val_before_train=false`` (verl
0.9.1 ``trainer/ppo/v1/trainer_base.py`` line 439) and takes the first arm's figures, which saves one greedy
validation (~85 s on two cores) per arm after the first. Skipping it leaves the training itself as it was: each
rollout's sampling seed comes from the run's seed, the step, the row and the rollout's place in its group
(:func:`fspo.cpu.agent_loop.sample_seed`), not from anything the validation draws.

Sharing holds only while the two runs' composed Hydra overrides agree on every key but those that only shape
training or name where outputs go (:data:`TRAINING_ONLY`); any other difference (the model, the held-out file,
a seed, ``actor_rollout_ref.rollout.val_kwargs.*``, ``data.val_*``, the verifier) and the run validates again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# Keys whose value does not change a validation before training, nor the figures read from it (answer F1, the
# training verifier's step counts, the answers the world judge reads), with why.
TRAINING_ONLY: Mapping[str, str] = {
    "trainer.experiment_name": "a name",
    "trainer.default_local_dir": "where checkpoints go",
    "trainer.validation_data_dir": "where the validation answers are written",
    "trainer.rollout_data_dir": "where training rollouts are written",
    "fspo.dump_dir": "where training batches are written",
    "fspo.flip": "the advantage flip acts on training advantages only",
    "fspo.step_reward_weight": "a reward term: no shared figure reads the reward (step counts and F1 stay)",
}
DELETED = None  # the value of a key an override deletes (~key)


def composed(overrides: Iterable[str]) -> dict[str, str | None]:
    """Each key's final value after ``overrides`` in order (the last one wins, as in Hydra); a deleted key
    (``~key``) maps to :data:`DELETED`."""
    values: dict[str, str | None] = {}
    for override in overrides:
        # Hydra's prefixes: + adds a key, ++ adds or overrides it, ~ deletes it.
        deleted = override.startswith("~")
        key, _, value = override.lstrip("~+").partition("=")
        values[key.strip()] = DELETED if deleted else value.strip()
    return values


def validation_differences(
    first: Iterable[str], second: Iterable[str], training_only: Iterable[str] = TRAINING_ONLY
) -> list[str]:
    """The keys, sorted, on which two runs' composed overrides differ, ``training_only`` left out: what could make
    their validations before training differ."""
    ignored = set(training_only)
    one, other = composed(first), composed(second)
    keys = (set(one) | set(other)) - ignored
    # A key one run sets and the other leaves at the config's default differs: that default is not known here.
    return sorted(key for key in keys if key not in one or key not in other or one[key] != other[key])


def sharing_refusal(
    source: str, source_overrides: Iterable[str], overrides: Iterable[str], training_only: Iterable[str] = TRAINING_ONLY
) -> str | None:
    """None when a run of ``overrides`` may take the validation before training of ``source``'s run (of
    ``source_overrides``); otherwise why not, in one line."""
    differences = validation_differences(source_overrides, overrides, training_only)
    if not differences:
        return None
    shown = ", ".join(differences[:4]) + (f" and {len(differences) - 4} more" if len(differences) > 4 else "")
    return f"{shown} {'differs' if len(differences) == 1 else 'differ'} from {source}'s run"


def validates_before_training(overrides: Iterable[str]) -> bool:
    """Whether a run of ``overrides`` validates before training (verl's default ``trainer.val_before_train=true``)."""
    value = composed(overrides).get("trainer.val_before_train")  # None: unset or deleted
    return value is None or value.lower() != "false"
