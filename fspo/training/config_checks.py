"""Everything checked on a composed training config before Ray starts (:func:`validate`), one clear line each.

verl validates its own dataclasses, but a missing model directory, a data file without the
columns verl reads, or a CPU run asked for with settings it cannot honour otherwise surface as a
traceback from deep inside a Ray worker minutes later.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
import warnings
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config
from verl.utils.device import auto_set_device

from fspo.config.fspo_config import FSPOConfig, fspo_config
from fspo.config.numeric_options import COUNT
from fspo.config.vocabulary import TRAINER_MODES, ConfigError
from fspo.cpu.compute import startup_line
from fspo.launch.attention import apply_attention_fallback
from fspo.launch.cluster_paths import with_absolute_paths
from fspo.launch.preflight import (
    MODEL_FILES,
    ModelNeed,
    check_rollout_importable,
    preflight,
    preflight_requested,
    resolve_local,
)
from fspo.methods.fapo import overlong_buffer
from fspo.training.data_checks import scan_file
from fspo.verifiers.placement import resolve_verifier_placement

ACTOR_PARAM_DTYPE = "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"


def _as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple, ListConfig)):
        return [str(v) for v in value]
    return [str(value)]


def check_model_path(
    path: str, key: str = "actor_rollout_ref.model.path", positions: tuple[int, str] | None = None
) -> None:
    """``key`` names a model: a complete local folder (its weights' headers readable, its position table
    holding ``positions``' tokens), or a hub id. Whether a hub id can be had (from the HF cache, under
    ``HF_HUB_OFFLINE`` too, or from the hub) is the preflight's to say, in the dry run and the run alike
    (:func:`fspo.launch.preflight.resolve`)."""
    if not path:
        raise ConfigError(f"{key} is not set: give a Hugging Face model directory or hub id")
    resolve_local(ModelNeed(key, path, MODEL_FILES, f"hf download {path}", positions=positions))


def sequence_positions(config: DictConfig) -> tuple[int, str] | None:
    """The tokens a rollout's prompt and response take together, and the keys that set them; None where either
    length is not a positive integer (check_positive_counts names it)."""
    prompt = OmegaConf.select(config, "data.max_prompt_length", default=None)
    response = OmegaConf.select(config, "data.max_response_length", default=None)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in (prompt, response)):
        return None
    return prompt + response, f"data.max_prompt_length + data.max_response_length ({prompt} + {response})"


def uses_fspo_scorer(config: DictConfig) -> bool:
    """Whether rewards come from :func:`fspo.training.outcome.compute_score` (the default), whose sources can be checked."""
    function = OmegaConf.select(config, "reward.custom_reward_function") or {}
    path, name = function.get("path"), function.get("name") or "compute_score"
    return path is None or (
        str(path) in ("pkg://fspo.training.outcome", "fspo.training.outcome") and name == "compute_score"
    )


def check_data_files(
    key: str,
    files,
    config: DictConfig | None = None,
    settings: FSPOConfig | None = None,
    only_existing: bool = False,
) -> None:
    """Raise for the first file of ``key`` that cannot train, as ``fspo data check`` reports it.

    With ``config`` (and ``settings``, its ``fspo:`` block) the file is read as that run would: its
    ``fspo.evidence_key`` and ``fspo.require_evidence``, and a scorer for each data_source unless a custom
    reward function scores. ``only_existing`` skips files that are not there yet (the dry run).
    """
    paths = _as_list(files)
    if not paths:
        raise ConfigError(f"{key} is empty: give one or more parquet files (see `fspo data --help`)")
    settings = settings or fspo_config(config)
    for path in paths:
        if only_existing and not Path(os.path.expanduser(path)).exists():
            continue
        report = scan_file(
            path,
            settings.evidence_key,
            check_scorers=config is None or uses_fspo_scorer(config),
            check_evidence=settings.enable,
            require_evidence=settings.enable and settings.require_evidence,
        )
        if report.problems:
            raise ConfigError(f"{key}: {path} " + "; ".join(report.problems) + " (`fspo data check` reports the file)")


def check_cpu_settings(config: DictConfig) -> None:
    """Settings a CPU run cannot honour."""
    rollout = config.actor_rollout_ref.rollout
    actor = config.actor_rollout_ref.actor
    problems = []
    if rollout.name != "hf":
        problems.append(f"actor_rollout_ref.rollout.name={rollout.name} needs a GPU; use `hf` on CPU")
    elif rollout.get("logprobs_mode") not in (None, "processed_logprobs", "raw_logprobs"):
        problems.append(
            f"actor_rollout_ref.rollout.logprobs_mode={rollout.logprobs_mode}: the hf rollout reports "
            "processed_logprobs or raw_logprobs"
        )
    if actor.strategy != "fsdp2" or actor.fsdp_config.strategy != "fsdp2":
        problems.append(
            "actor_rollout_ref.actor.strategy and .fsdp_config.strategy must be fsdp2 on CPU (FSDP1 needs CUDA)"
        )
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


def check_config(config: DictConfig, settings: FSPOConfig) -> None:
    """Raise :class:`ConfigError` for the first class of problem found in the model, the data and the platform."""
    check_model_path(config.actor_rollout_ref.model.path, positions=sequence_positions(config))
    check_data_files("data.train_files", config.data.train_files, config, settings)
    if config.data.get("val_files"):
        check_data_files("data.val_files", config.data.val_files, config, settings)
    if config.trainer.device == "cpu":
        check_cpu_settings(config)


# The config nodes verl turns into dataclasses (by their `_target_`) when it builds its workers.
DATACLASS_NODES = ("actor_rollout_ref.actor", "actor_rollout_ref.rollout", "algorithm")


# Counts that must be positive integers; verl's own checks report a negative one as a comparison with
# another size (or not at all) instead of naming it.
POSITIVE_COUNTS = (
    "data.train_batch_size",
    "actor_rollout_ref.actor.ppo_mini_batch_size",
    "actor_rollout_ref.rollout.n",
    # The dry run took 0, -1, nan or inf for these; the run then failed in verl's dataset or trainer.
    "data.max_prompt_length",
    "data.max_response_length",
    "trainer.total_training_steps",
    "trainer.total_epochs",
)


def check_positive_counts(config: DictConfig) -> None:
    for path in POSITIVE_COUNTS:
        value = OmegaConf.select(config, path)
        # A count beyond int64 passes Python's int but fails in numpy, torch and verl's dataset.
        if value is not None and (not isinstance(value, int) or COUNT.problem(value)):
            too_big = isinstance(value, int) and value > 1
            raise ConfigError(f"{path}={value} must be a positive integer" + (" of 64 bits at most" if too_big else ""))


def check_dataclasses(config: DictConfig) -> None:
    """Build the verl config dataclasses now, so a mistyped value fails here and not in a Ray worker."""
    check_positive_counts(config)
    paths = [*DATACLASS_NODES, *(("critic",) if need_critic(config) else ())]
    for path in paths:
        node = OmegaConf.select(config, path)
        try:
            omega_conf_to_dataclass(node)
        except Exception as error:  # noqa: BLE001 - report which node and why
            raise ConfigError(f"{path} does not validate as {node.get('_target_')}: {error}") from error


def uses_critic(config: DictConfig) -> bool:
    """Whether the run trains a critic (GAE, or ``critic.enable``), as verl decides it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # need_critic warns when the critic is off, which is the usual case
        return need_critic(config)


# What each of verl's checkpoint engines imports beyond the `gpu` extra (verl/checkpoint_engine/*.py), and how
# to install it. cupy's wheel is per CUDA major: "{cuda}" becomes torch's (13 for verl[vllm]'s torch 2.11).
CHECKPOINT_ENGINE_PACKAGES = {
    "nccl": "cupy (`pip install cupy-cuda{cuda}x`)",
    "delta_sharded": "cupy (`pip install cupy-cuda{cuda}x`)",
    "nixl": "nixl and cupy (`pip install nixl cupy-cuda{cuda}x`)",
    "mooncake": "Mooncake's transfer engine (`pip install mooncake-transfer-engine`)",
    "kimi_ckpt_engine": "Kimi's checkpoint-engine (`pip install checkpoint-engine`)",
}
CHECKPOINT_ENGINE_KEY = "actor_rollout_ref.rollout.checkpoint_engine.backend"
VERL_VLLM_CUDA = "13"  # the CUDA of the torch verl[vllm] pins (2.11.0 from PyPI), for a driver without it


def checkpoint_engine_needs(backend: str) -> str | None:
    """What verl's checkpoint engine ``backend`` needs installed, for this torch's CUDA (None: unknown backend)."""
    import torch

    needs = CHECKPOINT_ENGINE_PACKAGES.get(backend)
    return needs and needs.format(cuda=(torch.version.cuda or VERL_VLLM_CUDA).split(".")[0])


def checkpoint_engine_problem(backend: str) -> str | None:
    """Why verl's checkpoint engine ``backend`` cannot start here (None: it can), naming what to install.

    verl imports each engine module in ``verl.checkpoint_engine`` and registers only those whose
    transport package imports; the workers are assumed to share the driver's install.
    """
    from verl.checkpoint_engine import CheckpointEngineRegistry

    try:
        CheckpointEngineRegistry.get(backend)
    except ValueError as error:
        if (needs := checkpoint_engine_needs(backend)) is None:
            return f"{CHECKPOINT_ENGINE_KEY}={backend} is not one of verl's checkpoint engines ({error})"
        return f"{CHECKPOINT_ENGINE_KEY}={backend} needs {needs}, which the `gpu` extra does not install"
    return None


def check_trainer_mode(config: DictConfig) -> None:
    """``trainer.v1.trainer_mode`` must be one FSPO builds a trainer for, and one the platform can run.

    ``separate_async`` serves rollouts from a standalone pool of accelerators that receives weights
    through a checkpoint engine other than ``naive`` (verl's ``SeparateAsyncTrainer`` asserts it), each
    of which needs a transport package the ``gpu`` extra lacks; the CPU backend has neither. verl's other
    asserts of the mode (a rollout pool, the sync step dividing the batch) fail inside a Ray actor: here
    they are one line before Ray starts.
    """
    v1 = config.trainer.get("v1") or {}
    mode = v1.get("trainer_mode", "sync")
    if mode not in TRAINER_MODES:
        raise ConfigError(f"trainer.v1.trainer_mode={mode} is unknown to FSPO; use one of {', '.join(TRAINER_MODES)}")
    if mode != "separate_async":
        return
    if config.trainer.get("device") == "cpu":
        raise ConfigError(
            "trainer.v1.trainer_mode=separate_async needs a standalone rollout pool of GPUs and an NCCL-class "
            "checkpoint engine, which a CPU run has not; use sync or colocate_async on CPU"
        )
    why = "trainer.v1.trainer_mode=separate_async"
    backend = str(OmegaConf.select(config, CHECKPOINT_ENGINE_KEY, default="naive"))
    if backend == "naive":
        raise ConfigError(
            f"{why} sends weights to its rollout pool through a checkpoint engine other than naive: set "
            f"{CHECKPOINT_ENGINE_KEY}=nccl and install {checkpoint_engine_needs('nccl')} "
            "on every node (the `gpu` extra does not), or use sync or colocate_async"
        )
    if problem := checkpoint_engine_problem(backend):
        raise ConfigError(f"{why}: {problem} (on every node), or use sync or colocate_async")
    rollout = config.actor_rollout_ref.rollout
    if not (rollout.get("nnodes") or 0) > 0 or not (rollout.get("n_gpus_per_node") or 0) > 0:
        raise ConfigError(
            f"{why} serves rollouts from a pool of its own: set actor_rollout_ref.rollout.nnodes and "
            "actor_rollout_ref.rollout.n_gpus_per_node (both > 0)"
        )
    sync_step = OmegaConf.select(config, "trainer.v1.separate_async.parameter_sync_step")
    mini_batch = config.actor_rollout_ref.actor.ppo_mini_batch_size
    if config.data.train_batch_size != sync_step * mini_batch:
        raise ConfigError(
            f"{why} needs data.train_batch_size = trainer.v1.separate_async.parameter_sync_step x "
            f"actor_rollout_ref.actor.ppo_mini_batch_size, got {config.data.train_batch_size} != {sync_step} x "
            f"{mini_batch}"
        )


# verl's estimators that take their baseline from the other rollouts of the same prompt (core_algos.py):
# with actor_rollout_ref.rollout.n=1 every group holds one rollout and they silently fall back to the
# raw score (grpo, gdpo: mean 0, std 1) or to nothing.
GROUP_ESTIMATORS = (
    "grpo",
    "grpo_vectorized",
    "grpo_passk",
    "gdpo",
    "rloo",
    "rloo_vectorized",
    "opo",
    "gpg",
    "reinforce_plus_plus_baseline",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
)
# verl's placeholder model path (verl/trainer/config/model/hf_model.yaml): never a real folder.
VERL_PLACEHOLDER_MODEL = "~/models/deepseek-llm-7b-chat"


def check_advantage_estimator(config: DictConfig, check_files: bool = True) -> None:
    """The estimator gets what it needs: a group of rollouts per prompt, or (GAE) a critic with a model.

    verl reports neither: a group-relative estimator with ``rollout.n=1`` trains on the raw score, and GAE
    without ``critic.model.path`` fails on loading verl's placeholder model path.
    """
    estimator = str(OmegaConf.select(config, "algorithm.adv_estimator"))
    n = OmegaConf.select(config, "actor_rollout_ref.rollout.n")
    if estimator in GROUP_ESTIMATORS and n == 1:  # n < 1 is refused as a count (check_positive_counts)
        raise ConfigError(
            f"algorithm.adv_estimator={estimator} compares each rollout with the others of its prompt, but "
            f"actor_rollout_ref.rollout.n={n}: set rollout.n >= 2 (the paper: 8), or use an estimator without "
            "groups (reinforce_plus_plus, remax, gae)"
        )
    if not uses_critic(config):
        return
    path = OmegaConf.select(config, "critic.model.path")
    why = "trains a value model (the critic)" if estimator == "gae" else "has critic.enable=true"
    fix = (
        "set critic.model.path (a Hugging Face model folder or hub id; the actor's: "
        "critic.model.path=${actor_rollout_ref.model.path}) and critic.ppo_micro_batch_size_per_gpu"
    )
    if not path or str(path) == VERL_PLACEHOLDER_MODEL:
        raise ConfigError(
            f"algorithm.adv_estimator={estimator} {why}, but critic.model.path is "
            f"{path or 'not set'} (verl's placeholder): {fix}"
        )
    if check_files:
        check_model_path(str(path), "critic.model.path")


def validate(config: DictConfig, check_files: bool = True) -> FSPOConfig:
    """Everything that can be checked before starting Ray; raises :class:`ConfigError` on the first problem.

    Resolves every interpolation (the chat-template resolver included, so Ray actors receive plain
    strings), converts the ``fspo:`` block to :class:`fspo.config.fspo_config.FSPOConfig` once (a wrong type or value
    fails here naming the key) and builds each verl config dataclass, runs verl's own
    ``validate_config``, resolves where the verifier runs (:mod:`fspo.verifiers.placement`, written back
    into ``config`` for the workers) and prints it as one ``fspo: verifier ...`` line.
    With ``check_files`` the model and data paths must exist; the data files' contents are checked as
    ``fspo data check`` does (a source without a scorer, evidence under another key, evidence-less rows
    under ``fspo.require_evidence``), in the dry run for the files that exist. Returns the resolved block.
    """
    auto_set_device(config)
    # sdpa without flash-attn; before resolving, so interpolations follow
    apply_attention_fallback(config, with_critic=uses_critic(config))
    OmegaConf.resolve(config)
    # Ray's workers run where `ray start` ran, not here: every path they open is made absolute first
    with_absolute_paths(config, os.getcwd())
    settings = fspo_config(config)  # the fspo block's types and ranges, before anything reads it
    overlong_buffer(config)  # reward.reward_kwargs' overlong penalty, read in the reward workers
    if check_files:
        check_config(config, settings)
    else:
        # The dry run: data is often built later, but a file that is already there is checked.
        for key in ("data.train_files", "data.val_files"):
            if OmegaConf.select(config, key):
                check_data_files(key, OmegaConf.select(config, key), config, settings, only_existing=True)
    check_advantage_estimator(config, check_files)
    check_dataclasses(config)
    settings, line, messages = resolve_verifier_placement(config, settings)
    if settings.enable:
        settings.verifier.backend_options()  # what the backend cannot work without
    check_trainer_mode(config)
    if config.trainer.device == "cpu":
        messages = [*messages, startup_line(OmegaConf.select(config, ACTOR_PARAM_DTYPE))]
    for message in [line, *messages]:
        if message:
            print(message, file=sys.stderr, flush=True)
    validate_config(
        config=without_vllm_lora_check(config),
        use_reference_policy=need_reference_policy(config),
        use_critic=need_critic(config),
    )
    if preflight_requested():  # last: the checks above cost nothing, this one may ask the hub
        found = preflight(config, settings)
        print(f"fspo: models found: {'; '.join(found) or 'none to load'}", file=sys.stderr, flush=True)
    if check_files:  # a real run: its task runner starts on this machine (a dry run may be on a laptop)
        check_rollout_importable(config)
    return settings


# The ranks vLLM serves LoRA adapters up to (verl's fallback list when it cannot ask vLLM).
VLLM_MAX_LORA_RANK = 512


def without_vllm_lora_check(config: DictConfig) -> DictConfig:
    """``config``, or a copy whose LoRA rank verl's ``validate_config`` will not check against vLLM.

    verl checks a LoRA rank with vLLM rollouts by importing vLLM, which a machine without it (a dry run
    on a laptop or CI) cannot: there the rank is checked against vLLM's largest here instead.
    """
    model = config.actor_rollout_ref.model
    rank = model.get("lora", {}).get("rank", 0) or model.get("lora_rank", 0)
    if rank <= 0 or config.actor_rollout_ref.rollout.name != "vllm" or importlib.util.find_spec("vllm") is not None:
        return config
    if rank > VLLM_MAX_LORA_RANK:
        raise ConfigError(
            f"actor_rollout_ref.model.lora_rank must be at most {VLLM_MAX_LORA_RANK} for vLLM, got {rank}"
        )
    unchecked = copy.deepcopy(config)
    unchecked.actor_rollout_ref.model.lora_rank = 0
    if "lora" in unchecked.actor_rollout_ref.model:
        unchecked.actor_rollout_ref.model.lora.rank = 0
    return unchecked
