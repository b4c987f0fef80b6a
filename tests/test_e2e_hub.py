"""End to end on CPU: a policy named by hub id, the way a GPU recipe names it (``Qwen/...``).

A run with a (fake, recognisable) ``HF_TOKEN`` downloading a gated model from a stand-in hub: the workers
that download it send the token, and the token is in no file under Ray's temp folder, in none of the run's outputs and logs, and in no actor Ray's state API lists (``ray list actors --detail``).
One training step on the session's tiny model (``tests/conftest.py``). The offline node with the model in
its HF cache is asserted on the recipe pipeline's run (``tests/test_e2e_recipe_pipeline.py``).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from fspo_testing.tiny_run import tiny_run_overrides

pytestmark = pytest.mark.e2e

REPO_ID = "fspo-test/tiny-reasoner"


def hub_id_overrides(setup: dict, out: Path) -> list[str]:
    return [*tiny_run_overrides(setup, out, steps=1), f"actor_rollout_ref.model.path={REPO_ID}"]


@pytest.fixture
def ray_temp(monkeypatch):
    """Ray's temp folder for the run, short (Ray's socket paths must fit 107 bytes) and the test's own."""
    folder = Path(tempfile.mkdtemp(prefix="fspo-ray-", dir="/tmp"))
    monkeypatch.setenv("RAY_TMPDIR", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def dashboard_url(log: Path) -> str | None:
    """The dashboard of the Ray the run started, from ray.init's line in the run's log."""
    if not log.exists():
        return None
    found = re.search(r"View the dashboard at \S*?(\d+\.\d+\.\d+\.\d+:\d+)", log.read_text())
    return f"http://{found.group(1)}" if found else None


def files_holding(secret: bytes, *roots: Path) -> list[str]:
    holding = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink() and secret in path.read_bytes():
                holding.append(str(path))
    return holding


def test_the_token_reaches_the_workers_and_nothing_ray_logs_or_shows(tiny_reasoner, tmp_path, monkeypatch, ray_temp):
    from ray.util.state import list_actors

    from fspo.quickstart.launch import launch
    from fspo_testing.hub_server import StandInHub

    token = "hf_FSPOsecretTOKEN4e2eTest7Qz"
    hf_home = tmp_path / "hf"  # an empty cache: the workers download the gated model with the token
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_TOKEN", token)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "run"
    out.mkdir()
    # Ray's own token authentication stays off, so that this process can ask the run's Ray what it shows.
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    listings: list[str] = []
    errors: list[str] = []

    def list_the_actors() -> None:
        """While the run's Ray is up: every actor with its details, as ``ray list actors --detail``."""
        if (url := dashboard_url(out / "run.log")) is None:
            return
        try:
            actors = list_actors(address=url, detail=True, limit=1000, raise_on_missing_output=False)
        except Exception as error:  # noqa: BLE001 - the dashboard is still starting, or already gone
            errors.append(repr(error)[:300])
            return
        listings.append(json.dumps([dataclasses.asdict(actor) for actor in actors], default=str))

    with StandInHub({REPO_ID: tiny_reasoner["model"]}, gated={REPO_ID}, granted={token}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        # The dashboard (off in the CPU preset, on in a GPU run's Ray) is what answers the state API.
        overrides = [*hub_id_overrides(tiny_reasoner, out), "ray_kwargs.ray_init.include_dashboard=true"]
        records = launch(overrides, out / "run.log", out / "metrics.jsonl", 900, on_poll=list_the_actors)
    assert [record["step"] for record in records] == [1]

    # The workers had the token where they need it: they downloaded the gated weights with it.
    weights = [call for call in hub.calls if call[:2] == ("GET", f"/{REPO_ID}/resolve/main/model.safetensors")]
    assert weights and all(call[2] == token for call in weights), hub.calls
    assert all(call[2] == token for call in hub.calls if call[1].startswith(f"/{REPO_ID}/"))

    # Ray showed the run's actors and their runtime env, without the token.
    assert listings, f"the state API never answered during the run: {errors[-3:]}"
    shown = max(listings, key=len)
    assert "FSPOTaskRunner" in shown and "HF_ENDPOINT" in shown
    assert not [listing for listing in listings if token in listing]
    assert files_holding(token.encode(), ray_temp, out, hf_home) == []
