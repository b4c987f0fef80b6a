"""The driver's Hugging Face settings, passed to every Ray process of the run.

verl's workers, vLLM and the verifier servers load models with transformers and huggingface_hub, which
read ``HF_TOKEN``, ``HF_HOME``, ``HF_HUB_OFFLINE``, ``HF_ENDPOINT`` ... from their own environment. A Ray
cluster started with ``ray start`` on each node gives its workers that node's environment, not the
driver's: a token, cache or offline switch set where ``fspo-train`` runs would reach no worker.

The variables travel in the runtime env of FSPO's task runner, which Ray merges into every actor and task
the runner starts (verl's worker groups, rollout servers, reward workers, verifier servers). They stay out
of the trainer config: verl prints that config and the ``ray.init`` arguments built from it, and the
token must appear in no log. A token saved by ``hf auth login`` on this machine is passed as ``HF_TOKEN``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# The variables huggingface_hub and transformers read besides the HF_* family.
HUB_ENV_NAMES = ("HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_CACHE")
TOKEN_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def hub_env_vars(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Hugging Face variables set (non-empty) in ``environ`` (default: this process's, plus the token
    ``hf auth login`` stored here when no token variable is set)."""
    if environ is None:
        from huggingface_hub import get_token

        env = hub_env_vars(os.environ)
        if not any(name in env for name in TOKEN_NAMES) and (token := get_token()):
            env["HF_TOKEN"] = token
        return env
    return {
        name: value for name, value in environ.items() if value and (name.startswith("HF_") or name in HUB_ENV_NAMES)
    }


def describe(env: Mapping[str, str]) -> str | None:
    """One line naming the variables passed (never their values)."""
    return f"fspo: passing {', '.join(sorted(env))} to every Ray process" if env else None


def with_env_vars(actor_class, env: Mapping[str, str]):
    """``actor_class`` (a Ray actor class) whose actors, and every actor and task they start, get ``env``.

    Ray merges a parent's ``runtime_env["env_vars"]`` into its children's. (verl's nsys profiling path
    replaces the task runner's runtime env with its own: there the variables reach only a cluster whose
    nodes set them.)
    """
    if not env:
        return actor_class
    import ray

    return ray.remote(runtime_env={"env_vars": dict(env)})(actor_class.__ray_actor_class__)
