"""Checks on a composed config that turn common mistakes into one clear message.

verl validates its own dataclasses, but a missing model directory, a data file without the
columns verl reads, or a CPU run asked for with settings it cannot honour otherwise surface as a
traceback from deep inside a Ray worker minutes later.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, ListConfig

REQUIRED_DATA_COLUMNS = ("prompt", "data_source", "reward_model")


class ConfigError(ValueError):
    """A config value that cannot work, with what to change."""


def _as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple, ListConfig)):
        return [str(v) for v in value]
    return [str(value)]


def check_model_path(path: str) -> None:
    if not path:
        raise ConfigError("actor_rollout_ref.model.path is not set: give a Hugging Face model directory or hub id")
    local = Path(os.path.expanduser(path))
    if local.exists():
        if not (local / "config.json").exists():
            raise ConfigError(
                f"actor_rollout_ref.model.path={path} has no config.json: point it at a Hugging Face model "
                "directory (a merged checkpoint's huggingface/ folder, or a downloaded model)"
            )
        return
    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")
    looks_like_hub_id = path.count("/") == 1 and not path.startswith((".", "~", "/"))
    if offline or not looks_like_hub_id:
        raise ConfigError(
            f"actor_rollout_ref.model.path={path} does not exist"
            + (" (and HF_HUB_OFFLINE is set, so it cannot be a hub id)" if offline else "")
            + ": give an existing model directory or an `org/name` hub id"
        )


def check_data_files(key: str, files) -> None:
    import pyarrow.parquet as pq

    paths = _as_list(files)
    if not paths:
        raise ConfigError(f"{key} is empty: give one or more parquet files (see `fspo data --help`)")
    for path in paths:
        if not Path(os.path.expanduser(path)).exists():
            raise ConfigError(f"{key}: {path} does not exist (build it with `fspo data ...`)")
        try:
            columns = set(pq.read_schema(os.path.expanduser(path)).names)
        except Exception as error:  # noqa: BLE001 - any unreadable file gets the same message
            raise ConfigError(f"{key}: {path} is not a readable parquet file ({error})") from error
        missing = [c for c in REQUIRED_DATA_COLUMNS if c not in columns]
        if missing:
            raise ConfigError(
                f"{key}: {path} lacks the column(s) {missing} that verl reads (it has {sorted(columns)}); "
                "write it with `fspo data ...` or add them in verl's RL format"
            )


def check_cpu_settings(config: DictConfig) -> None:
    """Settings a CPU run cannot honour."""
    rollout = config.actor_rollout_ref.rollout
    actor = config.actor_rollout_ref.actor
    problems = []
    if rollout.name != "hf":
        problems.append(f"actor_rollout_ref.rollout.name={rollout.name} needs a GPU; use `hf` on CPU")
    if actor.strategy != "fsdp2" or actor.fsdp_config.strategy != "fsdp2":
        problems.append("actor_rollout_ref.actor.strategy and .fsdp_config.strategy must be fsdp2 on CPU (FSDP1 needs CUDA)")
    attn = config.actor_rollout_ref.model.get("override_config", {}).get("attn_implementation")
    if attn not in ("sdpa", "eager"):
        problems.append(
            f"actor_rollout_ref.model.override_config.attn_implementation={attn} is not available on CPU; use sdpa"
        )
    if config.trainer.nnodes != 1:
        problems.append(f"trainer.nnodes={config.trainer.nnodes}: a CPU run is single-node")
    num_gpus = config.ray_kwargs.ray_init.get("num_gpus")
    if num_gpus is not None and config.trainer.n_gpus_per_node > num_gpus:
        problems.append(
            f"trainer.n_gpus_per_node={config.trainer.n_gpus_per_node} exceeds the {num_gpus} logical GPU(s) the "
            "CPU preset gives Ray; raise ray_kwargs.ray_init.num_gpus too"
        )
    if problems:
        raise ConfigError("this CPU run cannot work as configured:\n  - " + "\n  - ".join(problems))


def check_config(config: DictConfig) -> None:
    """Raise :class:`ConfigError` for the first class of problem found."""
    check_model_path(config.actor_rollout_ref.model.path)
    check_data_files("data.train_files", config.data.train_files)
    if config.data.get("val_files"):
        check_data_files("data.val_files", config.data.val_files)
    if config.trainer.device == "cpu":
        check_cpu_settings(config)


# The config nodes verl turns into dataclasses (by their `_target_`) when it builds its workers.
DATACLASS_NODES = ("actor_rollout_ref.actor", "actor_rollout_ref.rollout", "algorithm")


# Counts that must be positive integers; verl's own checks report a negative one as a comparison with
# another size (or not at all) instead of naming it.
POSITIVE_COUNTS = ("data.train_batch_size", "actor_rollout_ref.actor.ppo_mini_batch_size", "actor_rollout_ref.rollout.n")


def check_positive_counts(config: DictConfig) -> None:
    from omegaconf import OmegaConf

    for path in POSITIVE_COUNTS:
        value = OmegaConf.select(config, path)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ConfigError(f"{path}={value} must be a positive integer")


def check_dataclasses(config: DictConfig) -> None:
    """Build the verl config dataclasses now, so a mistyped value fails here and not in a Ray worker."""
    from omegaconf import OmegaConf

    check_positive_counts(config)
    from verl.trainer.ppo.utils import need_critic
    from verl.utils.config import omega_conf_to_dataclass

    paths = [*DATACLASS_NODES, *(("critic",) if need_critic(config) else ())]
    for path in paths:
        node = OmegaConf.select(config, path)
        try:
            omega_conf_to_dataclass(node)
        except Exception as error:  # noqa: BLE001 - report which node and why
            raise ConfigError(f"{path} does not validate as {node.get('_target_')}: {error}") from error


def check_verifier(config: DictConfig) -> None:
    """Check the ``fspo`` block's values and the verifier's name and options without loading a model."""
    block = config.get("fspo")
    if block is None or not block.get("enable", True):
        return
    threshold = block.get("threshold", 0.5)
    if not isinstance(threshold, (int, float)) or not 0.0 <= float(threshold) <= 1.0:
        raise ConfigError(f"fspo.threshold={threshold!r} must be a number in [0, 1]")
    from fspo.verifiers import validate_verifier_config

    try:
        validate_verifier_config(block.get("verifier") or {})
    except ValueError as error:
        raise ConfigError(str(error)) from error
