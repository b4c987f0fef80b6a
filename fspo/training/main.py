"""``fspo-train`` / ``python -m fspo.training.main``: launch verl's V1 PPO trainer with FSPO.

A thin Hydra entry point in the style of verl's recipes: compose ``fspo/config/fspo_trainer.yaml``
(verl's ``ppo_trainer`` plus an ``fspo:`` block), check the inputs a user most often gets wrong,
and hand the config to verl's ``run_ppo`` with FSPO's own task runner.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

import hydra
import ray
from hydra._internal.utils import get_args_parser
from omegaconf import DictConfig, OmegaConf
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
from verl.trainer.ppo.v1 import trainer_base

from fspo.config.calibrated_thresholds import register_threshold_resolver
from fspo.config.environment import EnvironmentVariableError, check_environment, environment_value, folder_problem
from fspo.config.vocabulary import TRAINER_MODES, ConfigError
from fspo.cpu import cpu_mode_requested
from fspo.cpu.allocator import register_preload_resolver
from fspo.cpu.compute import register_dtype_resolver
from fspo.cpu.plugin import STATE as cpu_plugin_state
from fspo.launch.attention import FLASH_ATTENTION_MODULES, WORKER_IMPORTS_ENV, importable_on_a_gpu_node
from fspo.launch.hub_env import describe, driver_has_token, hub_env_vars, with_env_vars
from fspo.launch.run_folder import CALLBACK_OVERRIDE
from fspo.training.config_checks import validate
from fspo.training.prompt_formats import register_chat_template_resolver
from fspo.training.run_ledger import ledger_entry
from fspo.training.trainer import fspo_trainer_class
from fspo.training.verifier_loss import VerifierLossError
from fspo.utils.arguments import UsageError, check_override_keys, check_overrides, refuse

# verl's platform name for CUDA GPUs (verl.plugin.platform: "nvidia").
CUDA_PLATFORM = "nvidia"


@contextmanager
def fspo_trainers_registered():
    """verl's trainer registry with FSPO's trainer of each ``trainer.v1.trainer_mode``, for the ``with`` block.

    verl's ``TaskRunnerV1.run`` picks its trainer with ``get_trainer_cls(mode)`` from
    ``verl.trainer.ppo.v1``'s ``TRAINER_REGISTRY`` and compares the mode string in several places, so
    FSPO cannot register a mode of its own, and ``register_trainer`` refuses to rebind a mode. The task
    runner is a Ray actor of its own, so rebinding the modes in its process (and restoring them after)
    reaches no other run.
    """
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
class FSPOTaskRunner(TaskRunnerV1.__ray_actor_class__):  # main_ppo exports it already wrapped as a Ray actor
    """verl's ``TaskRunnerV1``, building the FSPO trainer of the configured ``trainer.v1.trainer_mode``.

    Only the trainer class changes (:func:`fspo_trainers_registered`); verl's ``run`` does the rest
    (TransferQueue, its agent-loop manager, the tracker's exit code). The reward manager comes from
    the config (``reward.reward_manager``), the colocated verifier servers from the trainer's ``_setup``.
    """

    def run(self, config: DictConfig) -> None:
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


def run(config: DictConfig) -> None:
    """Validate ``config`` and train. Raises :class:`fspo.config.vocabulary.ConfigError` on bad input."""
    sized_by_the_cluster_it_joins(config)
    validate(config)
    check_checkpoint_folder(config)
    env = forwarded_env(joined_cluster(config))
    OmegaConf.resolve(config.ray_kwargs)  # ray.init's arguments: verl passes them to Ray as they are, unresolved
    with ledger_entry(f"{config.trainer.project_name}/{config.trainer.experiment_name}"):
        run_ppo(config, task_runner_class=with_env_vars(FSPOTaskRunner, env))


def check_checkpoint_folder(config: DictConfig) -> None:
    """``trainer.default_local_dir`` (resolved) can be a folder: not a file, not under one. verl would otherwise
    fail at the first save, hours in. Whether it can be written is the nodes' matter (a dry run may be elsewhere)."""
    folder = OmegaConf.select(config, "trainer.default_local_dir", default=None)
    problem = folder_problem(str(folder)) if folder else None
    if problem:
        raise ConfigError(f"trainer.default_local_dir: {problem}; give a folder for the checkpoints")


def joined_cluster(config: DictConfig) -> str | None:
    """The address of the Ray cluster ``run_ppo`` joins (``ray_kwargs.ray_init.address`` or ``RAY_ADDRESS``);
    None when it starts its own, whose processes inherit this one's environment."""
    address = OmegaConf.select(config, "ray_kwargs.ray_init.address", default=None)
    return str(address) if address not in (None, "", "null", "None") else os.environ.get("RAY_ADDRESS") or None


# ray.init's arguments that size a cluster it starts; joining a cluster, it refuses them ("When connecting to an
# existing cluster, num_cpus and num_gpus must not be provided"): the cluster's own resources count.
CLUSTER_SIZE_KEYS = ("num_cpus", "num_gpus", "resources", "object_store_memory", "labels")


def sized_by_the_cluster_it_joins(config: DictConfig) -> None:
    """A run that joins a Ray cluster leaves its size to the cluster: :data:`CLUSTER_SIZE_KEYS` in
    ``ray_kwargs.ray_init`` (the CPU preset's logical CPUs and GPU among them) become null."""
    cluster = joined_cluster(config)
    if cluster is None:
        return
    ray_init = config.ray_kwargs.ray_init
    given = [key for key in CLUSTER_SIZE_KEYS if ray_init.get(key) is not None]
    for key in given:
        ray_init[key] = None
    if given:
        names = ", ".join(f"ray_kwargs.ray_init.{key}" for key in given)
        print(f"fspo: joining the Ray cluster at {cluster}: its own resources count, not {names}", file=sys.stderr)


# The driver's variables that verl's processes read besides the Hugging Face ones: the file logger's path (the task
# runner writes the metrics). A Ray the run starts inherits them; the processes of a cluster it joins do not.
RUN_ENV_NAMES = ("VERL_FILE_LOGGER_PATH",)


def forwarded_env(cluster: str | None = None) -> dict[str, str]:
    """The variables every Ray process of the run gets: the Hugging Face ones (:mod:`fspo.launch.hub_env`) and
    :data:`RUN_ENV_NAMES` (a path made absolute), named on stderr with where the token comes from (it never
    travels through Ray)."""
    env = hub_env_vars()
    for name in RUN_ENV_NAMES:
        if os.environ.get(name):
            env[name] = os.path.abspath(os.environ[name])
    for line in describe(env, driver_has_token(), cluster):
        print(line, file=sys.stderr, flush=True)
    return env


def dry_run_requested() -> bool:
    return environment_value("FSPO_DRY_RUN")


CONFIG_DIR = Path(__file__).resolve().parents[1] / "config"  # fspo/config
CONFIG_NAME = "fspo_trainer"


@hydra.main(config_path="../config", config_name=CONFIG_NAME, version_base=None)
def _hydra_main(config: DictConfig) -> None:
    try:
        if dry_run_requested():
            # Recipes: resolve and validate the full config, print it, start nothing. Files need
            # not exist yet (data is often built on the cluster), everything else is checked.
            sized_by_the_cluster_it_joins(config)
            validate(config, check_files=False)
            check_checkpoint_folder(config)
            print(OmegaConf.to_yaml(config))
            forwarded_env(joined_cluster(config))
            print("fspo: dry run OK (FSPO_DRY_RUN=1): the config resolves and validates", file=sys.stderr)
            return
        run(config)
    except ConfigError as error:
        print(f"fspo: {error}", file=sys.stderr)
        sys.exit(2)
    except VerifierLossError as error:  # raised in the task runner; Ray re-raises it here with its traceback
        print(f"fspo: run stopped: {getattr(error, 'cause', None) or error}", file=sys.stderr)
        sys.exit(3)


# Hydra writes outputs/<date>/<time>/ (the composed config, main.log) into the working folder, as verl's
# main_ppo does for a real run; a dry run "starts nothing" and leaves nothing behind either.
DRY_RUN_HYDRA_OVERRIDES = (
    "hydra.run.dir=.",
    "hydra.output_subdir=null",
    "hydra/job_logging=none",
    "hydra/hydra_logging=none",
)


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


# How long the flash-attn check waits for a GPU node to run it (a cluster busy with another job may not).
GPU_NODE_CHECK_TIMEOUT_S = 120


def cluster_has_accelerator(address: str) -> bool:
    """Whether the Ray cluster at ``address`` offers GPUs (or NPUs); connects briefly as a driver. On a GPU
    cluster it also records which flash-attention packages import on a GPU node (:func:`record_gpu_worker_imports`)."""
    ray.init(address=address, logging_level="ERROR", log_to_driver=False)
    try:
        resources = ray.cluster_resources()
        has_accelerator = any(resources.get(name, 0) > 0 for name in ("GPU", "NPU"))
        if resources.get("GPU", 0) > 0:
            record_gpu_worker_imports()
    finally:
        ray.shutdown()
    return has_accelerator


def record_gpu_worker_imports() -> None:
    """Decide the attention fallback for the GPU workers, not this GPU-less driver: the flash-attention packages
    a GPU node imports go to :data:`fspo.launch.attention.WORKER_IMPORTS_ENV`, read by the config checks. A value the
    user set is kept; a node that cannot run the check in time leaves the decision to this machine, said in a line."""
    if environment_value(WORKER_IMPORTS_ENV) is not None:
        return
    try:
        found = importable_on_a_gpu_node(tuple(FLASH_ATTENTION_MODULES.values()), GPU_NODE_CHECK_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        print(
            f"fspo: no GPU node ran the flash-attn check within {GPU_NODE_CHECK_TIMEOUT_S} s; deciding from this "
            f"machine's install. Set {WORKER_IMPORTS_ENV}=flash_attn if the GPU nodes have flash-attn",
            file=sys.stderr,
        )
        return
    os.environ[WORKER_IMPORTS_ENV] = ",".join(found)
    print(f"fspo: flash-attn on the GPU nodes: {'installed' if found else 'not installed'}", file=sys.stderr)


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
    accelerator pins ``VERL_PLATFORM`` the same way; ``platform=cpu`` is left as given. Joining a GPU cluster
    from here, whether flash-attn is there is asked of a GPU node (:func:`record_gpu_worker_imports`).
    """
    platforms = [arg.split("=", 1)[1] for arg in argv if arg.split("=", 1)[0].lstrip("+~") == "platform" and "=" in arg]
    if platforms and platforms[-1] != "gpu":
        return argv
    if not cpu_mode_requested():
        return argv
    address = ray_address(argv)
    if platforms:  # platform=gpu from a machine without an accelerator: the GPUs are in the cluster
        if address:
            cluster_has_accelerator(address)  # the flash-attn decision is made on a GPU node
        return pin_cuda_platform(argv)
    if address and cluster_has_accelerator(address):
        print(
            f"fspo: no accelerator on this machine, but the Ray cluster at {address} has GPUs; using the GPU preset",
            file=sys.stderr,
        )
        return pin_cuda_platform(argv)
    print("fspo: no accelerator found; using the CPU preset (platform=cpu)", file=sys.stderr)
    return [*argv, "platform=cpu"]


def register_config_resolvers() -> None:
    """The OmegaConf resolvers fspo's configs use, registered in this process."""
    register_chat_template_resolver()  # ${fspo_chat_template:qwen-base} in configs
    register_dtype_resolver()  # ${fspo_cpu_dtype:} in the CPU preset
    register_preload_resolver()  # ${fspo_cpu_preload:} in the CPU preset
    register_threshold_resolver()  # ${fspo_calibrated_threshold:...} in fspo_trainer.yaml


def main(argv: list[str] | None = None) -> int:
    """Console entry point; ``argv`` are Hydra overrides (``key=value``)."""
    register_config_resolvers()
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        # Before Hydra makes its run folder: FSPO_DRY_RUN=on is refused here, not taken for a real run.
        check_environment()
        # Hydra's own flags (--help, --cfg job, ...) are its to read; the overrides are checked here.
        overrides = get_args_parser().parse_known_args(args)[0].overrides
        check_overrides(overrides)
        check_override_keys(overrides, CONFIG_DIR, CONFIG_NAME)
    except (UsageError, EnvironmentVariableError) as error:
        return refuse("fspo", error)
    if dry_run_requested():
        args = without_hydra_outputs(args)
    # Hydra's run folder is claimed under fspo's output rule before Hydra writes in it (fspo.launch.run_folder).
    args = [*args, CALLBACK_OVERRIDE]
    sys.argv = [sys.argv[0], *with_platform_default(args)]
    _hydra_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
