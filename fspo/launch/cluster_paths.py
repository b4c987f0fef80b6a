"""Every path a run hands Ray, made absolute against the launching directory before Ray starts.

Ray puts the driver's directory on a worker's ``sys.path`` but does not change the worker's working directory
(``ray/_private/worker.py``): a worker runs where ``ray start`` ran on its node. verl's task runner (which reads
the data and writes ``latest_checkpointed_iteration.txt``) and every FSDP rank (which writes its shard) can be
on any node, so a relative ``data/...`` or ``checkpoints/...`` resolves per node: the run fails after Ray
starts, or writes its checkpoints elsewhere and ``resume_mode=auto`` silently starts again. Made absolute on
the driver, a path means the same file on every node that shares the file system.

Left as they are: absolute paths, URLs (``hdfs://``, ``pkg://``), ``~`` paths (each node's home, as verl's
own defaults mean them) and hub ids: a model key's relative value becomes a path only where it exists here.
"""

from __future__ import annotations

import os

from omegaconf import DictConfig, ListConfig, OmegaConf

# Files and folders verl's workers (and fspo's) read or write.
PATH_KEYS = (
    "data.train_files",
    "data.val_files",
    "trainer.default_local_dir",
    "trainer.rollout_data_dir",
    "trainer.validation_data_dir",
    "fspo.dump_dir",
    "reward.custom_reward_function.path",
)
# Keys that name a model folder or a hub id.
MODEL_KEYS = (
    "actor_rollout_ref.model.path",
    "actor_rollout_ref.model.tokenizer_path",
    "critic.model.path",
    "critic.model.tokenizer_path",
    "reward.reward_model.model_path",
    "data.tokenizer",
    "fspo.verifier.model_path",
    "fspo.verifier.tokenizer_path",
)


def stays(value: str) -> bool:
    """Whether ``value`` means the same place on every node already (or is no local path at all)."""
    return not value or os.path.isabs(value) or "://" in value or value.startswith("~")


def absolute_path(value: str, cwd: str | os.PathLike) -> str:
    """``value`` resolved against ``cwd`` (the launching directory), unless :func:`stays`."""
    return value if stays(value) else os.path.normpath(os.path.join(os.fspath(cwd), value))


def absolute_model_ref(value: str, cwd: str | os.PathLike) -> str:
    """A model key's value: a relative path that exists under ``cwd`` made absolute; anything else (a hub id
    such as ``Qwen/Qwen3-4B``) as it is."""
    candidate = absolute_path(value, cwd)
    return candidate if candidate != value and os.path.exists(candidate) else value


def with_absolute_paths(config: DictConfig, cwd: str | os.PathLike) -> list[str]:
    """Rewrite ``config``'s :data:`PATH_KEYS` (a file list item by item) and :data:`MODEL_KEYS` in place to
    absolute paths against ``cwd``; returns the keys that changed. Call it on the resolved config."""
    changed = []
    for keys, rewrite in ((PATH_KEYS, absolute_path), (MODEL_KEYS, absolute_model_ref)):
        for key in keys:
            value = OmegaConf.select(config, key, default=None)
            if isinstance(value, (list, ListConfig)):
                new = [rewrite(str(item), cwd) for item in value]
                differs = new != [str(item) for item in value]
            elif isinstance(value, str):
                new = rewrite(value, cwd)
                differs = new != value
            else:
                continue
            if differs:
                OmegaConf.update(config, key, new, force_add=False)
                changed.append(key)
    return changed
