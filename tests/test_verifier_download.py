"""``fspo verifier download``: a verifier's weights into the HF cache for offline nodes.

The hub is a local stand-in (fspo_testing.hub_server) serving a tiny HHEM in its published layout, gated
as the real one is, and a tiny flan-t5 foundation; the cache it fills is then read offline.
"""

from __future__ import annotations

import pytest

from fspo.cli import main as fspo_main
from fspo.config.verifier import VerifierConfig
from fspo.config.vocabulary import ConfigError
from fspo.launch.preflight import HubProbe, resolve, verifier_needs
from fspo.verifier_tools.download import download_verifier
from fspo.verifiers.hhem import HHEM_FOUNDATION, HHEM_MODEL
from fspo_testing.hub_server import StandInHub

CLOSED_PORT = "http://127.0.0.1:9"


@pytest.fixture(scope="module")
def tiny_hhem(tmp_path_factory):
    from fspo_testing.tiny_model import build_tiny_hhem_cache

    return build_tiny_hhem_cache(tmp_path_factory.mktemp("download"))


@pytest.fixture
def online(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # conftest's offline, read at import
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)


@pytest.fixture
def hub(tiny_hhem):
    # The foundation repo carries weights too (as flan-t5-base does): they must not be fetched.
    weights = tiny_hhem["foundation"] / "model.safetensors"
    weights.write_bytes(b"not fetched")
    try:
        with StandInHub(
            {HHEM_MODEL: tiny_hhem["hhem"], HHEM_FOUNDATION: tiny_hhem["foundation"]},
            gated={HHEM_MODEL},
            granted={"hf_granted"},
        ) as server:
            yield server
    finally:
        weights.unlink()


def test_hhem_and_its_foundation_are_fetched_and_then_serve_an_offline_node(hub, tmp_path, online, monkeypatch):
    cache = str(tmp_path / "cache")
    monkeypatch.setenv("HF_TOKEN", "hf_granted")
    lines = download_verifier("hhem", cache_dir=cache, endpoint=hub.endpoint)
    assert [line.split(" (")[0] for line in lines] == [HHEM_MODEL, HHEM_FOUNDATION]
    assert all("(fetched): " in line for line in lines)
    assert "[config.json, configuration_hhem_v2.py, model.safetensors, modeling_hhem_v2.py]" in lines[0]
    assert "[config.json, spiece.model, tokenizer.json, tokenizer_config.json]" in lines[1]  # no flan weights
    assert not [
        path for path in hub.requests if path.startswith(f"/{HHEM_FOUNDATION}/") and path.endswith("model.safetensors")
    ]
    # Again: nothing new.
    assert all("(up to date): " in line for line in download_verifier("hhem", cache_dir=cache, endpoint=hub.endpoint))
    # An offline node reading that cache passes the preflight.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for need in verifier_needs(VerifierConfig(name="hhem"), cache_dir=cache):
        assert "snapshots" in resolve(need, HubProbe(CLOSED_PORT), cache)
    assert all(
        "HF_HUB_OFFLINE is set, the hub was not asked" in line
        for line in download_verifier("hhem", cache_dir=cache, endpoint=hub.endpoint)
    )


def test_a_gated_model_without_access_names_the_terms_page(hub, tmp_path, online, monkeypatch):
    with pytest.raises(
        ConfigError, match=rf"is gated: accept its terms at {hub.endpoint}/{HHEM_MODEL}, then set HF_TOKEN"
    ):
        download_verifier("hhem", cache_dir=str(tmp_path), endpoint=hub.endpoint)
    monkeypatch.setenv("HF_TOKEN", "hf_someone_else")
    with pytest.raises(ConfigError, match="your HF_TOKEN's account has not been granted access"):
        download_verifier("hhem", cache_dir=str(tmp_path), endpoint=hub.endpoint)


def test_an_unreachable_hub_and_an_empty_cache_say_so(tmp_path, online):
    with pytest.raises(ConfigError, match=f"cannot reach the hub at {CLOSED_PORT}"):
        download_verifier("hhem", cache_dir=str(tmp_path), endpoint=CLOSED_PORT)


def test_an_unreachable_hub_with_a_complete_cache_reports_the_cache(tiny_hhem, online):
    lines = download_verifier("hhem", cache_dir=str(tiny_hhem["cache"]), endpoint=CLOSED_PORT)
    assert all("(cached; the hub could not be reached): " in line for line in lines)


def test_the_cli(tiny_hhem, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert fspo_main(["verifier", "download", "hhem", "--cache-dir", str(tiny_hhem["cache"])]) == 0
    out = capsys.readouterr().out
    assert f"on offline nodes set HF_HUB_CACHE={tiny_hhem['cache']}" in out and "google/flan-t5-base (cached" in out
    assert fspo_main(["verifier", "download", "hhem", "--cache-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("fspo verifier download: fspo.verifier.model_path: HF_HUB_OFFLINE is set and")
        and err.count("\n") == 1
    )
    assert fspo_main(["verifier", "download", "lexical"]) == 0
    assert "lexical loads no weights; nothing to fetch" in capsys.readouterr().out
    assert fspo_main(["verifier", "download", "nli", "--model-path", str(tmp_path / "missing")]) == 2
    assert "does not exist: fix the path" in capsys.readouterr().err
    assert fspo_main(["verifier", "download", "nli", "--model-path", str(tiny_hhem["hhem"])]) == 2  # no tokenizer
    assert "lacks tokenizer.json or" in capsys.readouterr().err


def test_a_hub_that_accepts_and_never_answers_ends_the_download_in_bounded_time(tmp_path):
    """`fspo verifier download` against an endpoint that accepts the connection and never answers: snapshot_download's
    repo_info had no timeout and waited forever; now each request is bounded by HF_HUB_ETAG_TIMEOUT and the command
    exits 2 with one line naming the endpoint and the setting."""
    import os
    import subprocess
    import sys
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    with StandInHub({}, silent=True) as hub:
        env.update(HF_ENDPOINT=hub.endpoint, HF_HUB_ETAG_TIMEOUT="1", HF_HUB_DOWNLOAD_TIMEOUT="1")
        command = [sys.executable, "-m", "fspo.cli", "verifier", "download", "nli", "--model-path", "org/model"]
        started = time.monotonic()
        done = subprocess.run(
            [*command, "--cache-dir", str(tmp_path)], env=env, capture_output=True, text=True, timeout=120
        )
        seconds = time.monotonic() - started
        assert hub.calls  # it was asked, and did not answer
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"cannot reach the hub at {hub.endpoint}" in done.stderr
    assert "no answer within 1 s; raise HF_HUB_ETAG_TIMEOUT" in done.stderr
    assert seconds < 60, seconds
