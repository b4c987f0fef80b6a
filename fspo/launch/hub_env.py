"""The driver's Hugging Face settings, and how each reaches the Ray processes of the run.

verl's workers, vLLM and the verifier servers load models with transformers and huggingface_hub, which
read ``HF_TOKEN``, ``HF_HOME``, ``HF_HUB_OFFLINE``, ``HF_ENDPOINT`` ... from their own environment. A Ray
cluster started with ``ray start`` on each node gives its workers that node's environment, not the
driver's: a cache or offline switch set where ``fspo-train`` runs would reach no worker.

Settings travel in the runtime env of FSPO's task runner, which Ray merges into every actor and task the
runner starts (verl's worker groups, rollout servers, reward workers, verifier servers). Ray writes a
runtime env in clear into ``session_*/logs/runtime_env_agent.log`` and shows it in ``ray list actors
--detail`` and the dashboard, so the token never goes that way (nor into the trainer config, which verl
prints). It reaches the workers from where they start:

- a run that starts its own Ray (no ``RAY_ADDRESS``): Ray's processes are children of the driver and
  inherit its environment, ``HF_TOKEN`` included; a token saved by ``hf auth login`` is read from the same
  token file (``HF_HOME`` / ``HF_TOKEN_PATH`` travel);
- a run that joins a cluster: each node's workers use that node's token, ``HF_TOKEN`` in the environment
  ``ray start`` ran in, or the token file ``hf auth login`` writes (mode 0600) on each node or in a shared
  ``HF_HOME``. The driver's token stays on the driver.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# The variables huggingface_hub and transformers read besides the HF_* family.
HUB_ENV_NAMES = ("HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_CACHE")
TOKEN_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def hub_env_vars(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Hugging Face variables set (non-empty) in ``environ`` (default: this process's), the token excepted."""
    environ = os.environ if environ is None else environ
    return {
        name: value
        for name, value in environ.items()
        if value and (name.startswith("HF_") or name in HUB_ENV_NAMES) and name not in TOKEN_NAMES
    }


def driver_has_token() -> bool:
    """Whether this process has a Hugging Face token (a token variable, or ``hf auth login``'s file)."""
    from huggingface_hub import get_token

    return get_token() is not None


def describe(env: Mapping[str, str], has_token: bool = False, cluster: str | None = None) -> list[str]:
    """The lines naming what reaches the Ray processes (never a value).

    ``cluster`` is the address of a Ray cluster the run joins (None: the run starts its own).
    """
    lines = [f"fspo: passing {', '.join(sorted(env))} to every Ray process"] if env else []
    if has_token and cluster:
        lines.append(
            f"fspo: the Hugging Face token stays on this machine: the workers of the Ray cluster at {cluster} use "
            "their node's (HF_TOKEN where `ray start` ran, or `hf auth login` on each node)"
        )
    elif has_token:
        lines.append("fspo: the Hugging Face token reaches Ray's processes through this process's environment")
    return lines


def with_env_vars(actor_class, env: Mapping[str, str]):
    """``actor_class`` (a Ray actor class) whose actors, and every actor and task they start, get ``env``.

    Ray merges a parent's ``runtime_env["env_vars"]`` into its children's. (verl's nsys profiling path
    replaces the task runner's runtime env with its own: there the variables reach only a cluster whose
    nodes set them.) Ray logs and shows ``env``: a token in it is refused.
    """
    if secret := sorted(set(env) & set(TOKEN_NAMES)):
        raise ValueError(f"{', '.join(secret)} must not travel in a Ray runtime env: Ray logs it in clear")
    if not env:
        return actor_class
    import ray

    return ray.remote(runtime_env={"env_vars": dict(env)})(actor_class.__ray_actor_class__)
