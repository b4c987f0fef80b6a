"""fspo/launch/cluster_paths.py: every path a run hands Ray is absolute before Ray starts, so a worker whose working
directory is elsewhere (where `ray start` ran on its node) opens the same files the launcher meant."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from fspo.launch.cluster_paths import MODEL_KEYS, PATH_KEYS, absolute_model_ref, absolute_path, with_absolute_paths

segment = st.text(st.sampled_from("abcxyz_-.0123"), min_size=1, max_size=8).filter(lambda s: s not in (".", ".."))
relative_paths = st.lists(st.one_of(segment, st.just("..")), min_size=1, max_size=4).map(
    lambda parts: os.path.join(*parts)
)


@settings(max_examples=200, deadline=None)
@given(relative_paths, st.sampled_from(["/launch", "/a/b/launch"]))
def test_a_relative_path_becomes_the_same_file_under_the_launching_directory(path, cwd):
    result = absolute_path(path, cwd)
    assert os.path.isabs(result)
    assert result == os.path.normpath(os.path.join(cwd, path))


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(
        relative_paths.map(lambda p: "/" + p),
        relative_paths.map(lambda p: "~/" + p),
        relative_paths.map(lambda p: "hdfs://host/" + p),
        relative_paths.map(lambda p: "pkg://" + p.replace("/", ".")),
        st.just(""),
    )
)
def test_paths_that_mean_the_same_place_everywhere_stay(value):
    assert absolute_path(value, "/launch") == value


def test_a_model_key_becomes_absolute_only_where_the_folder_exists(tmp_path):
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    assert absolute_model_ref("models/tiny", tmp_path) == str(tmp_path / "models" / "tiny")
    assert absolute_model_ref("Qwen/Qwen3-4B", tmp_path) == "Qwen/Qwen3-4B"  # a hub id


WORKER = """
import json, os, sys
paths = json.loads(sys.argv[1])
print(json.dumps({key: os.path.exists(path) for key, path in paths.items()}))
"""


def config_with_relative_paths() -> dict:
    return {
        "data": {"train_files": ["data/train.parquet", "data/math.parquet"], "val_files": "data/test.parquet"},
        "trainer": {
            "default_local_dir": "checkpoints/fspo/run",
            "rollout_data_dir": "dumps/rollout",
            "validation_data_dir": "dumps/validation",
        },
        "fspo": {"dump_dir": "dumps/fspo", "verifier": {"model_path": "models/hhem", "tokenizer_path": None}},
        "reward": {"custom_reward_function": {"path": "reward.py"}},
        "actor_rollout_ref": {"model": {"path": "models/policy", "tokenizer_path": None}},
        "critic": {"model": {"path": "Qwen/Qwen2.5-7B"}},
    }


def test_a_worker_in_another_directory_finds_every_path(tmp_path):
    """Every path key of the config, created under the launching directory, exists for a process that runs in
    another directory once the config is rewritten; before, none does."""
    launch, worker_dir = tmp_path / "repo", tmp_path / "ray_start_dir"
    worker_dir.mkdir()
    config = OmegaConf.create(config_with_relative_paths())
    flat = {}
    for key in PATH_KEYS + MODEL_KEYS:
        value = OmegaConf.select(config, key)
        for position, item in enumerate(value if OmegaConf.is_list(value) else [value]):
            if item and not item.startswith("Qwen/"):  # a hub id is no path
                flat[f"{key}[{position}]"] = item
                (launch / item).parent.mkdir(parents=True, exist_ok=True)
                (launch / item).touch()
    assert len(flat) == 10  # every path key of the config above has a file

    def seen_by_worker(paths):
        process = subprocess.run(
            [sys.executable, "-c", WORKER, json.dumps(paths)], cwd=worker_dir, capture_output=True, text=True
        )
        return json.loads(process.stdout)

    assert not any(seen_by_worker(flat).values())
    changed = with_absolute_paths(config, launch)
    assert set(changed) == {key.split("[")[0] for key in flat}
    rewritten = {}
    for name in flat:
        key, position = name[:-3], int(name[-2])
        value = OmegaConf.select(config, key)
        rewritten[name] = value[position] if OmegaConf.is_list(value) else value
    assert all(seen_by_worker(rewritten).values()), rewritten
    assert OmegaConf.select(config, "critic.model.path") == "Qwen/Qwen2.5-7B"
