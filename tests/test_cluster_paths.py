"""fspo/launch/cluster_paths.py: every path a run hands Ray is absolute before Ray starts, so a worker whose working
directory is elsewhere (where `ray start` ran on its node) opens the same files the launcher meant."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
import os
import pkgutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from fspo.launch.cluster_paths import (
    PATH_SUFFIXES,
    absolute_model_ref,
    absolute_path,
    path_keys,
    path_kind,
    with_absolute_paths,
)

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


@settings(max_examples=100, deadline=None)
@given(st.text(st.sampled_from("abcxyz_019"), min_size=1, max_size=12), st.sampled_from(PATH_SUFFIXES))
def test_a_key_named_like_a_path_is_found_and_an_environment_variable_is_not(stem, suffix):
    assert path_kind(stem + suffix) is not None
    assert path_kind((stem + suffix).upper()) is None  # runtime_env.env_vars.HF_HOME_DIR is a variable's name


# --- the composed config, as `fspo train` composes it -----------------------------------------------------------

# Relative values for keys verl reads in its task runner or workers. Files exist under the launching directory
# where marked; a hub id (a reference key's value that is no folder here) must stay as it is.
RELATIVE = {
    "trainer.resume_from_path": ("checkpoints/fspo/run/global_step_5", True),
    "actor_rollout_ref.model.lora_adapter_path": ("adapters/policy", True),
    "actor_rollout_ref.model.path": ("models/policy", True),
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": ("tools.yaml", True),
    "data.train_files": (["data/train.parquet", "data/math.parquet"], True),
    "data.val_files": ("data/test.parquet", True),
    "trainer.default_local_dir": ("checkpoints/fspo/run", False),  # an output: absolute though not there yet
    "trainer.rollout_data_dir": ("dumps/rollout", False),
    "trainer.validation_data_dir": ("dumps/validation", False),
    "fspo.dump_dir": ("dumps/fspo", False),
    "reward.custom_reward_function.path": ("reward.py", True),
}
UNCHANGED = {
    "actor_rollout_ref.model.tokenizer_path": "Qwen/Qwen3-4B",  # hub ids
    "critic.model.path": "Qwen/Qwen2.5-7B",
    "fspo.verifier.model_path": "vectara/hallucination_evaluation_model",
    "actor_rollout_ref.rollout.router_config_path": "router/plugin.yaml",  # not here: verl looks in its package
    "trainer.default_hdfs_dir": "ckpts/fspo",  # on HDFS
    "reward.reward_manager.module.path": "pkg://fspo.training.reward",
    "skip.rollout.dump_dir": "~/.verl/rollout_dump",
}


def hydra_value(value) -> str:
    return "[" + ",".join(value) + "]" if isinstance(value, list) else value


@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """(launching directory, the config before, the config after with_absolute_paths, the keys it changed): one
    composition of fspo_trainer.yaml over verl's ppo_trainer.yaml for every test below (platform=gpu; platform=cpu
    adds no path-like key)."""
    from hydra import compose, initialize_config_module

    from fspo.config.calibrated_thresholds import register_threshold_resolver

    register_threshold_resolver()  # the base config's verifier threshold, as fspo.training.main registers it

    launch = tmp_path_factory.mktemp("repo")
    for value, exists in RELATIVE.values():
        for item in value if isinstance(value, list) else [value]:
            if exists:
                (launch / item).parent.mkdir(parents=True, exist_ok=True)
                (launch / item).touch()
    overrides = [f"{key}={hydra_value(value)}" for key, (value, _) in RELATIVE.items()]
    overrides += [f"{key}='{value}'" for key, value in UNCHANGED.items()]  # quoted: Hydra reads ~ and : itself
    with initialize_config_module("fspo.config", version_base=None):
        before = compose("fspo_trainer", overrides=overrides)
    OmegaConf.resolve(before)  # as validate() does before it rewrites
    after = copy.deepcopy(before)
    changed = with_absolute_paths(after, launch)
    return launch, before, after, changed


def test_a_relative_resume_path_and_lora_adapter_become_absolute(composed):
    """verl joins a relative resume_from_path to the task runner's working directory
    (verl/trainer/ppo/v1/trainer_base.py:866-871, verl/trainer/ppo/ray_trainer.py:1073-1080), and hands
    lora_adapter_path to copy_to_local and PeftModel.from_pretrained in each FSDP rank's working directory
    (verl/workers/engine/fsdp/transformer_impl.py:342-352); in a joined cluster both are where `ray start` ran."""
    launch, _, after, changed = composed
    assert after.trainer.resume_from_path == str(launch / "checkpoints/fspo/run/global_step_5")
    assert after.actor_rollout_ref.model.lora_adapter_path == str(launch / "adapters/policy")
    assert {"trainer.resume_from_path", "actor_rollout_ref.model.lora_adapter_path"} <= set(changed)


@pytest.mark.parametrize("key", sorted(RELATIVE))
def test_each_relative_path_becomes_the_same_file_under_the_launching_directory(composed, key):
    launch, _, after, changed = composed
    value = RELATIVE[key][0]
    expected = [str(launch / item) for item in value] if isinstance(value, list) else str(launch / value)
    found = OmegaConf.select(after, key)
    assert (list(found) if OmegaConf.is_list(found) else found) == expected
    assert key in changed


@pytest.mark.parametrize("key", sorted(UNCHANGED))
def test_hub_ids_urls_home_and_hdfs_paths_stay(composed, key):
    _, _, after, changed = composed
    assert OmegaConf.select(after, key) == UNCHANGED[key]
    assert key not in changed


def test_nothing_but_path_keys_changes(composed):
    _, before, after, changed = composed
    before = copy.deepcopy(before)
    for key in changed:
        OmegaConf.update(before, key, OmegaConf.select(after, key), force_add=False)
    assert before == after


WORKER = """
import json, os, sys
paths = json.loads(sys.argv[1])
print(json.dumps({key: os.path.exists(path) for key, path in paths.items()}))
"""


def test_a_worker_in_another_directory_finds_every_path(composed, tmp_path):
    """Every file the config names under the launching directory exists for a process in another directory once
    the config is rewritten; before, none does."""
    launch, before, after, _ = composed

    def files(config):
        found = {}
        for key in RELATIVE:
            if RELATIVE[key][1]:
                value = OmegaConf.select(config, key)
                for position, item in enumerate(value if OmegaConf.is_list(value) else [value]):
                    found[f"{key}[{position}]"] = item
        return found

    def seen_by_worker(paths):
        process = subprocess.run(
            [sys.executable, "-c", WORKER, json.dumps(paths)], cwd=tmp_path, capture_output=True, text=True
        )
        return json.loads(process.stdout)

    assert len(files(before)) == 8
    assert not any(seen_by_worker(files(before)).values())
    assert all(seen_by_worker(files(after)).values()), files(after)


def test_a_path_key_in_a_list_of_blocks_is_found(tmp_path):
    config = OmegaConf.create({"tools": [{"cache_dir": "cache", "name": "search"}], "model": {"path": "Qwen/Qwen3"}})
    assert with_absolute_paths(config, tmp_path) == ["tools[0].cache_dir"]
    assert config.tools[0].cache_dir == str(tmp_path / "cache")


# --- every path-like key verl's schema holds, reviewed ----------------------------------------------------------

# Each name a path-like key of the composed config or a field of verl 0.9.1's config dataclasses
# (verl/workers/config, verl/trainer/config) has, with the kind it gets. `model.path` is `path` in a model block.
REVIEWED = {
    # read or written as local files and folders: always absolute
    "path": "path",  # code files: custom_reward_function, custom_cls, reward_manager.module, custom_sampler, ...
    "file": "path",  # rollout.prometheus.file
    "train_files": "path",
    "val_files": "path",
    "resume_from_path": "path",  # trainer/ppo/v1/trainer_base.py:866-871
    "default_local_dir": "path",
    "rollout_data_dir": "path",
    "validation_data_dir": "path",
    "dump_dir": "path",  # fspo.dump_dir and verl's skip.*.dump_dir
    "save_path": "path",  # the profilers' output folder (relative by default: outputs/profile)
    "config_path": "path",  # profiler.tool_config.precision_debugger
    "quantization_config_path": "path",
    "quantization_config_file": "path",
    "reward_loop_module_path": "path",  # copied to reward_manager.module.path (experimental/reward_loop/reward_loop.py:54)
    "timeline_json_file": "path",  # written by the driver (trainer/main_ppo.py:97-99)
    "record_file": "path",  # router replay
    "replay_file": "path",
    "dist_checkpointing_path": "path",  # megatron
    "load_checkpoint_path": "path",  # veomni
    "local_path": "path",  # HFModelConfig sets these three itself (workers/config/model.py:150-176)
    "local_hf_config_path": "path",
    "local_tokenizer_path": "path",
    # a hub id or a folder, or found in verl's own package: absolute only where it exists here
    "model.path": "reference",
    "model_path": "reference",
    "tokenizer_path": "reference",
    "hf_config_path": "reference",
    "lora_adapter_path": "reference",  # workers/engine/fsdp/transformer_impl.py:342-352
    "adapter_path": "reference",
    "tokenizer": "reference",  # data.tokenizer
    "tool_config_path": "reference",  # utils/import_utils.py:91 resolve_config_path
    "function_tool_path": "reference",
    "agent_loop_config_path": "reference",
    "router_config_path": "reference",
    # named like a path, not a local one
    "default_hdfs_dir": "not_local",
}


def review_name(key: str) -> str:
    *blocks, name = key.replace("[", ".[").split(".")
    blocks = [block for block in blocks if not block.startswith("[")]
    return "model.path" if name == "path" and blocks and blocks[-1] == "model" else name


def verl_config_dataclass_fields() -> dict[str, str]:
    import verl.trainer.config
    import verl.workers.config

    found = {}
    for package in (verl.workers.config, verl.trainer.config):
        for module_info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(module_info.name)
            for owner in vars(module).values():
                if isinstance(owner, type) and dataclasses.is_dataclass(owner) and owner.__module__ == module.__name__:
                    for field in dataclasses.fields(owner):
                        if path_kind(field.name) is not None:
                            found.setdefault(field.name, f"{owner.__module__}.{owner.__qualname__}")
    return found


def test_every_path_like_key_of_verls_schema_is_reviewed(composed):
    """A path-like key verl (or the fspo block) grows fails here until its kind is reviewed in REVIEWED."""
    _, before, _, _ = composed
    kinds = {review_name(key): kind for key, kind in path_keys(before)}
    in_config = set(kinds)
    for name in verl_config_dataclass_fields():
        kinds.setdefault(name, path_kind(name))
    unreviewed = {name: kind for name, kind in kinds.items() if name not in REVIEWED}
    assert not unreviewed, f"new path-like keys: review their kinds in fspo/launch/cluster_paths.py: {unreviewed}"
    assert kinds == REVIEWED
    assert {"resume_from_path", "lora_adapter_path", "dump_dir", "model_path"} <= in_config
