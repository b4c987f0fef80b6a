"""Every request to a judge ends by its deadline with one line naming the endpoint and the setting to raise:
against a server that accepts and never answers, and one that answers a byte at a time (real local servers)."""

from __future__ import annotations

import logging
import threading
import time

from fspo.chat_client import ChatClient
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
            with caplog.at_level(logging.WARNING, logger="fspo.chat_client"):
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
    from fspo.preflight import HubProbe, ModelNeed, resolve
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
