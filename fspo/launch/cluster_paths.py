"""Every path a run hands Ray, made absolute against the launching directory before Ray starts.

Ray puts the driver's directory on a worker's ``sys.path`` but does not change the worker's working directory
(``ray/_private/worker.py``): a worker runs where ``ray start`` ran on its node. verl's task runner (which reads
the data and writes ``latest_checkpointed_iteration.txt``) and every FSDP rank (which writes its shard) can be
on any node, so a relative ``data/...`` or ``checkpoints/...`` resolves per node: the run fails after Ray
starts, or writes its checkpoints elsewhere and ``resume_mode=auto`` silently starts again. Made absolute on
the driver, a path means the same file on every node that shares the file system.

Which keys are paths is read from the config itself, not listed: every key whose name is a path's name
(:func:`path_kind`), at any depth and in lists, verl's and the ``fspo`` block's alike, so a key a newer verl adds
is found too. Left as they are: absolute paths, URLs (``hdfs://``, ``pkg://``), ``~`` paths (each node's home, as
verl's own defaults mean them), and a reference key's value that is no folder here (a hub id).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Literal

from omegaconf import DictConfig, ListConfig, OmegaConf

# What a key holds, and so how it is rewritten:
#   path: a local file or folder verl opens (read or written): always made absolute.
#   reference: a local folder or something else verl also accepts, a hub id (``copy_to_local`` and
#       ``from_pretrained``) or a file verl looks for in its own package too (``resolve_config_path``, verl's
#       utils/import_utils.py:91): made absolute only where it exists under the launching directory.
#   not_local: named like a path but not one on this file system: left as it is.
PathKind = Literal["path", "reference", "not_local"]

# A key is a path when its name ends so (case matters: an upper-case name is an environment variable's).
PATH_SUFFIXES = ("_path", "_dir", "_file", "_files")
# Names that are a path by themselves: verl's ``path`` (a model folder, or a code file such as
# custom_reward_function.path), ``file`` (rollout.prometheus.file) and ``tokenizer`` (data.tokenizer).
BARE_PATH_NAMES = frozenset({"path", "file", "tokenizer"})
# Reference keys, by name; and ``path`` under a ``model`` block (actor_rollout_ref.model.path).
REFERENCE_NAMES = frozenset(
    {
        # a hub id or a folder: verl's HFModelConfig (workers/config/model.py:150-176) and the reward and
        # teacher models' model_path go through copy_to_local, which passes a hub id on; a LoRA adapter
        # through PeftModel.from_pretrained (workers/engine/fsdp/transformer_impl.py:342-352), which takes one
        "model_path",
        "tokenizer_path",
        "hf_config_path",
        "lora_adapter_path",
        "adapter_path",
        "tokenizer",
        # found in the working directory, else in verl's package (experimental/agent_loop/agent_loop.py:529-536,
        # workers/rollout/router.py:331); data.tool_config_path reuses the rollout's name
        "tool_config_path",
        "function_tool_path",
        "agent_loop_config_path",
        "router_config_path",
    }
)
# Named like paths, not paths here. Small on purpose: a new path-like key of verl's is a path until reviewed
# (tests/test_cluster_paths.py lists every one found).
NOT_LOCAL_NAMES = frozenset(
    {
        # a folder on HDFS (verl copies checkpoints there with utils/hdfs_io.py): relative to the HDFS user's
        # home, not to any node's working directory
        "default_hdfs_dir",
    }
)


def path_kind(name: str, parent: str = "") -> PathKind | None:
    """What the key ``name`` (in the block named ``parent``) holds, or None when its name is no path's."""
    if name in NOT_LOCAL_NAMES:
        return "not_local"
    if name in REFERENCE_NAMES or (name == "path" and parent == "model"):
        return "reference"
    if name in BARE_PATH_NAMES or name.endswith(PATH_SUFFIXES):
        return "path"
    return None


def stays(value: str) -> bool:
    """Whether ``value`` means the same place on every node already (or is no local path at all)."""
    return not value or os.path.isabs(value) or "://" in value or value.startswith("~")


def absolute_path(value: str, cwd: str | os.PathLike) -> str:
    """``value`` resolved against ``cwd`` (the launching directory), unless :func:`stays`."""
    return value if stays(value) else os.path.normpath(os.path.join(os.fspath(cwd), value))


def absolute_model_ref(value: str, cwd: str | os.PathLike) -> str:
    """A reference key's value: a relative path that exists under ``cwd`` made absolute; anything else (a hub id
    such as ``Qwen/Qwen3-4B``) as it is."""
    candidate = absolute_path(value, cwd)
    return candidate if candidate != value and os.path.exists(candidate) else value


# How each kind's value is rewritten; a not_local key's is left as it is.
REWRITES = {"path": absolute_path, "reference": absolute_model_ref}


def path_keys(config: DictConfig) -> Iterator[tuple[str, PathKind]]:
    """Each path-like key of ``config`` (dotted, a list item as ``[i]``) and its :func:`path_kind`, whatever
    its value."""
    for key, _, _, kind in _path_slots(config, "", ""):
        yield key, kind


def _path_slots(node, dotted: str, parent: str):
    """(dotted key, the block holding it, its name there, kind) of each path-like key under ``node``."""
    if isinstance(node, ListConfig):
        for position in range(len(node)):
            if not OmegaConf.is_missing(node, position):
                yield from _path_slots(node[position], f"{dotted}[{position}]", parent)
        return
    if not isinstance(node, DictConfig):
        return
    for name in node.keys():
        key = f"{dotted}.{name}" if dotted else str(name)
        kind = path_kind(str(name), parent)
        if kind is not None:
            yield key, node, name, kind
        elif not OmegaConf.is_missing(node, name):  # a path key holds a string or a list of them, not a block
            yield from _path_slots(node[name], key, str(name))


def _rewritten(value, rewrite, cwd):
    """``value`` (a string or a list of strings) rewritten item by item; None for any other value."""
    if isinstance(value, str):
        return rewrite(value, cwd)
    if isinstance(value, (list, ListConfig)) and value and all(isinstance(item, str) for item in value):
        return [rewrite(item, cwd) for item in value]
    return None


def with_absolute_paths(config: DictConfig, cwd: str | os.PathLike) -> list[str]:
    """Rewrite each path-like key of ``config`` (:func:`path_keys`; a file list item by item) in place to an
    absolute path against ``cwd`` as its kind says; returns the keys that changed. Call it on the resolved config."""
    changed = []
    for key, block, name, kind in list(_path_slots(config, "", "")):
        if kind not in REWRITES or OmegaConf.is_missing(block, name):
            continue
        value = block[name]
        new = _rewritten(value, REWRITES[kind], cwd)
        if new is not None and new != (list(value) if isinstance(value, ListConfig) else value):
            block[name] = new
            changed.append(key)
    return changed
