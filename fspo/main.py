"""``fspo-train`` / ``python -m fspo.main``: launch verl's V1 PPO trainer with FSPO.

A thin Hydra entry point in the style of verl's recipes: compose ``fspo/config/fspo_trainer.yaml``
(verl's ``ppo_trainer`` plus an ``fspo:`` block), check the inputs a user most often gets wrong,
and hand the config to verl's ``run_ppo`` with FSPO's own task runner.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

import hydra
import ray
from omegaconf import DictConfig, OmegaConf

from fspo.cpu import cpu_mode_requested
from fspo.hub_env import describe, hub_env_vars, with_env_vars

# verl's platform name for CUDA GPUs (verl.plugin.platform: "nvidia").
CUDA_PLATFORM = "nvidia"
ACTOR_PARAM_DTYPE = "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype"


def _verl_task_runner():
    """verl's ``TaskRunnerV1`` class itself (``main_ppo`` exports it already wrapped as a Ray actor)."""
    from verl.trainer.main_ppo import TaskRunnerV1

    return TaskRunnerV1.__ray_actor_class__


@contextmanager
def fspo_trainers_registered():
    """verl's trainer registry with FSPO's trainer of each ``trainer.v1.trainer_mode``, for the ``with`` block.

    verl's ``TaskRunnerV1.run`` picks its trainer with ``get_trainer_cls(mode)`` from
    ``verl.trainer.ppo.v1``'s ``TRAINER_REGISTRY`` and compares the mode string in several places, so
    FSPO cannot register a mode of its own, and ``register_trainer`` refuses to rebind a mode. The task
    runner is a Ray actor of its own, so rebinding the modes in its process (and restoring them after)
    reaches no other run.
    """
    from verl.trainer.ppo.v1 import trainer_base

    from fspo.trainer import TRAINER_MODES, fspo_trainer_class

    registry = trainer_base.TRAINER_REGISTRY
    saved = dict(registry)
    fspo_classes = {mode: fspo_trainer_class(mode) for mode in TRAINER_MODES}
    registry.update(fspo_classes)
    try:
        yield fspo_classes
    finally:
        registry.clear()
        registry.update(saved)


@ray.remote
class FSPOTaskRunner(_verl_task_runner()):
    """verl's ``TaskRunnerV1``, building the FSPO trainer of the configured ``trainer.v1.trainer_mode``.

    Only the trainer class changes (:func:`fspo_trainers_registered`); verl's ``run`` does the rest
    (TransferQueue, its agent-loop manager, the tracker's exit code). The reward manager comes from
    the config (``reward.reward_manager``), the colocated verifier servers from the trainer's ``_setup``.
    """

    def run(self, config: DictConfig) -> None:
        from fspo.cpu.plugin import STATE as cpu_plugin_state

        if config.trainer.device == "cpu" and not cpu_plugin_state["active"]:
            raise RuntimeError(
                "trainer.device=cpu but the fspo CPU backend is not active in the Ray workers "
                f"(plugin state: {cpu_plugin_state}). Reinstall the project (`pip install -e .`) so "
                "that its `verl.plugins` entry point is registered."
            )
        mode = config.trainer.v1.trainer_mode
        with fspo_trainers_registered() as trainers:
            print(f"fspo: trainer {trainers[mode].__name__} (trainer.v1.trainer_mode={mode})", flush=True)
            super().run(config)


def validate(config: DictConfig, check_files: bool = True) -> None:
    """Everything that can be checked before starting Ray; raises on the first problem.

    Resolves every interpolation (the chat-template resolver included, so Ray actors receive plain
    strings), converts the ``fspo:`` block to :class:`fspo.config.FSPOConfig` and builds each verl config
    dataclass (a mistyped value fails here naming the key, not in a worker), runs verl's own
    ``validate_config``, resolves where the verifier runs (:mod:`fspo.verifiers.placement`) and prints it
    as one ``fspo: verifier ...`` line.
    With ``check_files`` the model and data paths must exist (see :mod:`fspo.checks`); the data files'
    contents are checked as ``fspo data check`` does (a source without a scorer, evidence under another
    key, evidence-less rows under ``fspo.require_evidence``), in the dry run for the files that exist.
    """
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config
    from verl.utils.device import auto_set_device

    from fspo.attention import apply_attention_fallback
    from fspo.checks import (
        check_advantage_estimator,
        check_config,
        check_data_files,
        check_dataclasses,
        check_trainer_mode,
    )
    from fspo.config import fspo_config
    from fspo.preflight import preflight, preflight_requested
    from fspo.verifiers.placement import resolve_verifier_placement

    auto_set_device(config)
    apply_attention_fallback(config)  # sdpa without flash-attn; before resolving, so interpolations follow
    OmegaConf.resolve(config)
    fspo_config(config)  # the fspo block's types and ranges, before anything reads it
    if check_files:
        check_config(config)
    else:
        # The dry run: data is often built later, but a file that is already there is checked.
        for key in ("data.train_files", "data.val_files"):
            if OmegaConf.select(config, key):
                check_data_files(key, OmegaConf.select(config, key), config, only_existing=True)
    check_advantage_estimator(config, check_files)
    check_dataclasses(config)
    line, warnings = resolve_verifier_placement(config)
    settings = fspo_config(config)  # with the placement (and llm_judge's url) resolved
    if settings.enable:
        settings.verifier.backend_options()  # what the backend cannot work without
    check_trainer_mode(config)
    if config.trainer.device == "cpu":
        from fspo.cpu.compute import startup_line

        warnings = [*warnings, startup_line(OmegaConf.select(config, ACTOR_PARAM_DTYPE))]
    for message in [line, *warnings]:
        if message:
            print(message, file=sys.stderr, flush=True)
    validate_config(config=without_vllm_lora_check(config), use_reference_policy=need_reference_policy(config),
                    use_critic=need_critic(config))
    if preflight_requested():  # last: the checks above cost nothing, this one may ask the hub
        print(f"fspo: models found: {'; '.join(preflight(config)) or 'none to load'}", file=sys.stderr, flush=True)


# The ranks vLLM serves LoRA adapters up to (verl's fallback list when it cannot ask vLLM).
VLLM_MAX_LORA_RANK = 512


def without_vllm_lora_check(config: DictConfig) -> DictConfig:
    """``config``, or a copy whose LoRA rank verl's ``validate_config`` will not check against vLLM.

    verl checks a LoRA rank with vLLM rollouts by importing vLLM, which a machine without it (a dry run
    on a laptop or CI) cannot: there the rank is checked against vLLM's largest here instead.
    """
    import copy
    import importlib.util

    from fspo.checks import ConfigError

    model = config.actor_rollout_ref.model
    rank = model.get("lora", {}).get("rank", 0) or model.get("lora_rank", 0)
    if rank <= 0 or config.actor_rollout_ref.rollout.name != "vllm" or importlib.util.find_spec("vllm") is not None:
        return config
    if rank > VLLM_MAX_LORA_RANK:
        raise ConfigError(f"actor_rollout_ref.model.lora_rank must be at most {VLLM_MAX_LORA_RANK} for vLLM, got {rank}")
    unchecked = copy.deepcopy(config)
    unchecked.actor_rollout_ref.model.lora_rank = 0
    if "lora" in unchecked.actor_rollout_ref.model:
        unchecked.actor_rollout_ref.model.lora.rank = 0
    return unchecked


def run(config: DictConfig) -> None:
    """Validate ``config`` and train. Raises :class:`fspo.checks.ConfigError` on bad input."""
    from verl.trainer.main_ppo import run_ppo

    validate(config)
    run_ppo(config, task_runner_class=with_env_vars(FSPOTaskRunner, forwarded_hub_env()))


def forwarded_hub_env() -> dict[str, str]:
    """The Hugging Face variables every Ray process gets (:mod:`fspo.hub_env`), named on stderr."""
    env = hub_env_vars()
    if line := describe(env):
        print(line, file=sys.stderr, flush=True)
    return env


def dry_run_requested() -> bool:
    return os.environ.get("FSPO_DRY_RUN", "0").lower() in ("1", "true", "yes")


@hydra.main(config_path="config", config_name="fspo_trainer", version_base=None)
def _hydra_main(config: DictConfig) -> None:
    from fspo.checks import ConfigError

    try:
        if dry_run_requested():
            # Recipes: resolve and validate the full config, print it, start nothing. Files need
            # not exist yet (data is often built on the cluster), everything else is checked.
            validate(config, check_files=False)
            print(OmegaConf.to_yaml(config))
            forwarded_hub_env()
            print("fspo: dry run OK (FSPO_DRY_RUN=1): the config resolves and validates", file=sys.stderr)
            return
        run(config)
    except ConfigError as error:
        print(f"fspo: {error}", file=sys.stderr)
        sys.exit(2)


# Hydra writes outputs/<date>/<time>/ (the composed config, main.log) into the working folder, as verl's
# main_ppo does for a real run; a dry run "starts nothing" and leaves nothing behind either.
DRY_RUN_HYDRA_OVERRIDES = ("hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=none",
                           "hydra/hydra_logging=none")


def without_hydra_outputs(argv: list[str]) -> list[str]:
    """``argv`` with Hydra told to write no run folder or log file, unless the user set those keys."""
    given = {arg.split("=", 1)[0].lstrip("+~") for arg in argv}
    return [*argv, *(override for override in DRY_RUN_HYDRA_OVERRIDES if override.split("=", 1)[0] not in given)]


def ray_address(argv: list[str]) -> str | None:
    """The Ray cluster the run will join: ``ray_kwargs.ray_init.address=`` or ``RAY_ADDRESS`` (None = start one)."""
    for arg in argv:
        key, _, value = arg.partition("=")
        if key.lstrip("+~") == "ray_kwargs.ray_init.address" and value not in ("", "null", "None"):
            return value
    return os.environ.get("RAY_ADDRESS") or None


def cluster_has_accelerator(address: str) -> bool:
    """Whether the Ray cluster at ``address`` offers GPUs (or NPUs); connects briefly as a driver."""
    import ray

    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        resources = ray.cluster_resources()
    finally:
        ray.shutdown()
    return any(resources.get(name, 0) > 0 for name in ("GPU", "NPU"))


def pin_cuda_platform(argv: list[str]) -> list[str]:
    """Pin ``VERL_PLATFORM`` to CUDA here and in every Ray process, so that the CPU backend (which takes over
    where no accelerator is found) stays off in processes that land on a GPU-less head node."""
    os.environ["VERL_PLATFORM"] = CUDA_PLATFORM
    key = "ray_kwargs.ray_init.runtime_env.env_vars.VERL_PLATFORM"
    if any(arg.split("=", 1)[0].lstrip("+~") == key for arg in argv):
        return argv
    return [*argv, f"+{key}={CUDA_PLATFORM}"]


def with_platform_default(argv: list[str]) -> list[str]:
    """Pick the hardware preset from where the run trains, not from the machine that launches it.

    With no accelerator here and no ``platform=`` given: a run that starts its own Ray gets
    ``platform=cpu``; a run that joins a Ray cluster (``RAY_ADDRESS`` or ``ray_kwargs.ray_init.address``)
    gets the CPU preset only when that cluster has no GPU. A GPU cluster keeps the GPU preset, and
    ``VERL_PLATFORM`` is pinned to CUDA here and in every Ray process (the CPU backend otherwise takes
    over in processes that land on a GPU-less head node). ``platform=gpu`` given on a machine without an
    accelerator pins ``VERL_PLATFORM`` the same way; ``platform=cpu`` is left as given.
    """
    platforms = [arg.split("=", 1)[1] for arg in argv if arg.split("=", 1)[0].lstrip("+~") == "platform" and "=" in arg]
    if platforms and platforms[-1] != "gpu":
        return argv
    if not cpu_mode_requested():
        return argv
    if platforms:  # platform=gpu from a machine without an accelerator: the GPUs are in the cluster
        return pin_cuda_platform(argv)
    address = ray_address(argv)
    if address and cluster_has_accelerator(address):
        print(
            f"fspo: no accelerator on this machine, but the Ray cluster at {address} has GPUs; using the GPU preset",
            file=sys.stderr,
        )
        return pin_cuda_platform(argv)
    print("fspo: no accelerator found; using the CPU preset (platform=cpu)", file=sys.stderr)
    return [*argv, "platform=cpu"]


def main(argv: list[str] | None = None) -> int:
    """Console entry point; ``argv`` are Hydra overrides (``key=value``)."""
    from fspo.checks import ConfigError, check_overrides
    from fspo.cpu.compute import register_dtype_resolver
    from fspo.data.templates import register_chat_template_resolver

    register_chat_template_resolver()  # ${fspo_chat_template:qwen-base} in configs
    register_dtype_resolver()  # ${fspo_cpu_dtype:} in the CPU preset
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        check_overrides(args)
    except ConfigError as error:
        print(f"fspo: {error}", file=sys.stderr)
        return 2
    if dry_run_requested():
        args = without_hydra_outputs(args)
    sys.argv = [sys.argv[0], *with_platform_default(args)]
    _hydra_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
