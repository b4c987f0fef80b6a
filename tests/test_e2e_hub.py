"""End to end on CPU: a policy named by hub id, the way a GPU recipe names it (``Qwen/...``).

A run with a (fake, recognisable) ``HF_TOKEN`` downloading a gated model from a stand-in hub: the workers
that download it send the token, and the token is in no file under Ray's temp folder, in none of the run's outputs
and logs, and in no actor Ray's state API lists (``ray list actors --detail``). The run is ``servers_gone_run``
(tests/conftest.py, fspo_testing/servers_gone.py), which also hosts the verifier-loss test. The offline node with
the model in its HF cache is asserted on the recipe pipeline's run (``tests/test_e2e_recipe_pipeline.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fspo_testing.servers_gone import REPO_ID, TOKEN

pytestmark = pytest.mark.e2e


def files_holding(secret: bytes, *roots: Path) -> list[str]:
    holding = []
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink() and secret in path.read_bytes():
                holding.append(str(path))
    return holding


def test_the_token_reaches_the_workers_and_nothing_ray_logs_or_shows(servers_gone_run):
    run = servers_gone_run
    assert run["records"] and run["records"][0]["step"] == 1, run["log"][-3000:]

    # The workers had the token where they need it: they downloaded the gated weights with it.
    calls = run["hub_calls"]
    weights = [call for call in calls if call[:2] == ("GET", f"/{REPO_ID}/resolve/main/model.safetensors")]
    assert weights and all(call[2] == TOKEN for call in weights), calls
    assert all(call[2] == TOKEN for call in calls if call[1].startswith(f"/{REPO_ID}/"))

    # Ray showed the run's actors and their runtime env, without the token.
    listings = run["listings"]
    assert listings, f"the state API never answered during the run: {run['listing_errors'][-3:]}"
    shown = max(listings, key=len)
    assert "FSPOTaskRunner" in shown and "HF_ENDPOINT" in shown
    assert not [listing for listing in listings if TOKEN in listing]
    assert files_holding(TOKEN.encode(), run["ray_temp"], run["out"], run["hf_home"]) == []
