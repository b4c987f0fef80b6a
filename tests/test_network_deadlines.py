"""Every request to a judge ends by its deadline with one line naming the endpoint and the setting to raise:
against a server that accepts and never answers, and one that answers a byte at a time (real local servers)."""

from __future__ import annotations

import logging
import threading
import time

from fspo.utils.chat_client import ChatClient
from fspo_testing.chat_server import ChatServer, TricklingServer


def test_a_judge_that_never_answers_or_trickles_is_given_up_by_the_deadline(caplog):
    released = threading.Event()
    silent = ChatServer(lambda body: released.wait(60) and "yes")
    trickling = TricklingServer(interval_s=0.1)
    try:
        for server in (silent, trickling):
            client = ChatClient(
                server.url, timeout_s=0.5, max_retries=1, backoff_s=0.0, timeout_setting="--judge-timeout"
            )
            caplog.clear()
            started = time.monotonic()
            with caplog.at_level(logging.WARNING, logger="fspo.utils.chat_client"):
                assert client.reply([{"role": "user", "content": "Is water wet?"}]) is None
            seconds = time.monotonic() - started
            assert seconds < 3, seconds  # 2 attempts of 0.5 s, not the minute the server would hold them
            [record] = caplog.records
            assert f"{client.url} gave no answer within 0.5 s in 2 attempts" in record.getMessage()
            assert "raise --judge-timeout" in record.getMessage()
    finally:
        released.set()
        silent.close()
        trickling.close()


def test_the_preflight_names_the_endpoint_and_the_setting_when_the_hub_never_answers(monkeypatch, tmp_path):
    """The preflight's hub check (one HEAD, HF_HUB_ETAG_TIMEOUT) against a hub that accepts and never answers:
    one line naming the endpoint and the setting to raise, in about that timeout."""
    import pytest
    from huggingface_hub import constants

    from fspo.config.vocabulary import ConfigError
    from fspo.launch.preflight import HubProbe, ModelNeed, resolve
    from fspo_testing.hub_server import StandInHub

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # conftest's offline, read at import
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # an empty cache: nothing to fall back on
    need = ModelNeed("fspo.verifier.model_path", "org/model", (("config.json",),), "hf download org/model")
    with StandInHub({}, silent=True) as hub:
        started = time.monotonic()
        with pytest.raises(ConfigError) as refused:
            resolve(need, HubProbe(hub.endpoint, token="", timeout_s=0.5))
        assert time.monotonic() - started < 5
    message = str(refused.value)
    assert f"cannot reach the hub at {hub.endpoint} (no answer within 0.5 s; raise HF_HUB_ETAG_TIMEOUT" in message


def test_a_data_build_from_a_hub_that_never_answers_ends_in_one_line(tmp_path):
    """`fspo data hotpotqa` without --input reads the hub through `datasets`, whose own requests wait 100 s each,
    retried (still running after 90 s with HF_HUB_ETAG_TIMEOUT=1); one bounded question first ends it."""
    import os
    import subprocess
    import sys

    from fspo_testing.hub_server import StandInHub

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    with StandInHub({}, silent=True) as hub:
        env.update(HF_ENDPOINT=hub.endpoint, HF_HUB_ETAG_TIMEOUT="1", HF_HOME=str(tmp_path / "hf"))
        command = [sys.executable, "-m", "fspo.cli", "data", "hotpotqa", "--output-dir", str(tmp_path / "out")]
        started = time.monotonic()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        seconds = time.monotonic() - started
        assert hub.calls
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert f"cannot reach the hub at {hub.endpoint}" in done.stderr and "HF_HUB_ETAG_TIMEOUT" in done.stderr
    assert seconds < 60, seconds
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*.parquet"))
