"""A CPU run that loses its verifier: one colocated ``lexical`` server on one logical GPU, killed once the first
step is logged, and again each time Ray brings it back (as a segfault or the OOM killer would), until Ray's
restarts are spent. The next actor updates find no server, and the run-level guard
(``fspo.verifier.max_failed_share``, ``max_failed_steps``) should stop the run.

The run samples at seed 3 and keeps its rollouts: step 1's are sampled before any kill, so they are also a
second seed's rollouts for the reproducibility test.

It also names its model by hub id, the way a GPU recipe does, gated on a stand-in hub (fspo_testing.hub_server)
that grants a fake, recognisable ``HF_TOKEN``, in an empty HF cache and Ray temp folder of its own, with Ray's
dashboard on (off in the CPU preset, on in a GPU run's Ray) and every actor listed with its details on each poll, as
``ray list actors --detail`` would: test_e2e_hub checks where the token went. One run serves the three tests.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import tempfile
import time
from pathlib import Path

import pytest

from fspo.quickstart.launch import launch
from fspo.verifiers.ray_actor import SERVER_RESTARTS
from fspo_testing.hub_server import StandInHub
from fspo_testing.tiny_run import tiny_run_overrides

STEPS = 8
SEED = 3
REPO_ID = "fspo-test/tiny-reasoner"
TOKEN = "hf_FSPOsecretTOKEN4e2eTest7Qz"
LIST_EVERY_S = 3.0  # each listing costs the dashboard and this process CPU the run shares


def run_with_servers_killed(setup: dict, reward_overrides: list[str], out: Path, env: pytest.MonkeyPatch) -> dict:
    """Launch the run in ``out`` and kill its verifier servers as described above; ``env`` sets its environment.

    Returns the logged step records, the run's log, the pids killed, the launcher's error (None if the run was
    not stopped), the hub's calls, the actor listings (and the state API's errors), and the folders the token
    must stay out of: the run's own Ray temp folder (the caller removes it) and HF cache."""
    ray_temp = Path(tempfile.mkdtemp(prefix="fspo-ray-", dir="/tmp"))  # short: Ray's socket paths fit 107 bytes
    hf_home = out / "hf"
    env.setenv("RAY_TMPDIR", str(ray_temp))
    env.setenv("HF_HOME", str(hf_home))
    env.setenv("HF_TOKEN", TOKEN)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HUGGING_FACE_HUB_TOKEN"):
        env.delenv(name, raising=False)
    # Its workers start cold, as on a GPU node (the suite's other Ray clusters fork theirs: tests/conftest.py).
    env.delenv("RAY_RUNTIME_ENV_HOOK", raising=False)
    # Ray's own token authentication stays off, so that this process can ask the run's Ray what it shows.
    env.setenv("RAY_AUTH_MODE", "disabled")
    overrides = tiny_run_overrides(setup, out, steps=STEPS) + [
        f"actor_rollout_ref.model.path={REPO_ID}",
        "ray_kwargs.ray_init.include_dashboard=true",
        *reward_overrides,
        "trainer.save_freq=-1",
        "trainer.n_gpus_per_node=1",
        "ray_kwargs.ray_init.num_gpus=1",
        "reward.num_workers=1",
        "fspo.verifier.name=lexical",
        "fspo.verifier.placement=colocated",
        # Short deadlines, so that a step without servers costs seconds, not the production 10 minutes.
        "fspo.verifier.request_timeout_s=5",
        "fspo.verifier.request_deadline_s=10",
        "fspo.verifier.max_failed_share=0.1",
        "fspo.verifier.max_failed_steps=2",
        f"actor_rollout_ref.rollout.seed={SEED}",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
    ]
    log_path = out / "run.log"
    killed: set[int] = set()
    records: list[dict] = []  # the steps logged, as they are

    def kill_servers() -> None:
        if not records or len(killed) > SERVER_RESTARTS:
            return
        for pid in map(int, re.findall(r"fspo: verifier server lexical ready in pid (\d+)", log_path.read_text())):
            if pid not in killed:
                killed.add(pid)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    listings: list[str] = []
    listing_errors: list[str] = []

    listed_at = [0.0]

    def list_the_actors() -> None:
        from ray.util.state import list_actors

        if time.monotonic() - listed_at[0] < LIST_EVERY_S or (url := dashboard_url(log_path)) is None:
            return
        listed_at[0] = time.monotonic()
        try:
            actors = list_actors(address=url, detail=True, limit=1000, raise_on_missing_output=False)
        except Exception as error:  # noqa: BLE001 - the dashboard is still starting, or already gone
            listing_errors.append(repr(error)[:300])
            return
        listings.append(json.dumps([dataclasses.asdict(actor) for actor in actors], default=str))

    def poll() -> None:
        kill_servers()
        list_the_actors()

    error = None
    with StandInHub({REPO_ID: setup["model"]}, gated={REPO_ID}, granted={TOKEN}) as hub:
        env.setenv("HF_ENDPOINT", hub.endpoint)
        try:
            launch(overrides, log_path, out / "run.jsonl", on_step=records.append, on_poll=poll)
        except RuntimeError as stopped:
            error = str(stopped)
    return {
        "out": out,
        "records": records,
        "log": log_path.read_text(),
        "killed": killed,
        "error": error,
        "hub_calls": hub.calls,
        "listings": listings,
        "listing_errors": listing_errors,
        "ray_temp": ray_temp,
        "hf_home": hf_home,
    }


def dashboard_url(log: Path) -> str | None:
    """The dashboard of the Ray the run started, from ray.init's line in the run's log."""
    if not log.exists():
        return None
    found = re.search(r"View the dashboard at \S*?(\d+\.\d+\.\d+\.\d+:\d+)", log.read_text())
    return f"http://{found.group(1)}" if found else None
