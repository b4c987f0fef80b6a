"""A client of an OpenAI-compatible ``/v1/chat/completions`` endpoint (vLLM, SGLang, a hosted API).

Shared by the ``llm_judge`` verifier (training) and the evaluation judge (`fspo evaluate --judge`), so both
send the same requests and give up the same way: a timeout, connection error or 408/429/5xx is retried
with jittered exponential backoff; any other HTTP error, or a response that is not a chat completion, is
given up at once. A failed request yields ``None``, never an exception: callers count it and go on, and
the one warning it logs names the endpoint (and, after timeouts, the setting to raise).

Each attempt has a deadline, ``timeout_s`` for the whole exchange: the socket's own timeout bounds each
read, but a server that answers a byte at a time would hold a read-by-read limit forever.

```python
client = ChatClient("http://localhost:8000/v1", model="Qwen/Qwen2.5-72B-Instruct", timeout_s=30)
reply = client.reply([{"role": "user", "content": "Is water wet? Answer yes or no."}])  # str, or None
```
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import threading
import time
import urllib.error
import urllib.request

from fspo.utils.input_files import parse_json_bytes

logger = logging.getLogger(__name__)

_THINK_RE = re.compile(r"<think>.*?(</think>|$)", re.DOTALL | re.IGNORECASE)
RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


def without_thinking(reply: str) -> str:
    """`reply` with every ``<think>...</think>`` block (and an unclosed trailing one) replaced by a space."""
    return _THINK_RE.sub(" ", reply)


def chat_url(url: str) -> str:
    """Accepts a server root, a ``/v1`` base or the full chat-completions URL."""
    url = url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    return url + ("/chat/completions" if url.endswith("/v1") else "/v1/chat/completions")


class ChatClient:
    """Sends chat-completion requests with retries; thread-safe (one request per call, no shared state).

    Args:
        url: server root, ``.../v1`` base or full ``.../v1/chat/completions`` URL.
        model: model name sent in the request.
        api_key_env: environment variable holding the API key (sent as a Bearer token), if any.
        timeout_s: seconds per request before it counts as failed.
        max_retries: retries after a timeout, connection error or 408/429/5xx, with exponential
            backoff (``backoff_s * 2**attempt``, jittered).
        backoff_s: first backoff, in seconds.
        max_tokens: completion budget (room for a reasoning model's ``<think>`` block).
        temperature: sampling temperature (0: deterministic answers).
        log_name: prefix of the warnings a failed request logs.
        timeout_setting: the setting that sets ``timeout_s``, named when requests time out.

    Raises:
        ValueError: a setting is out of range, or `api_key_env` names an unset variable.
    """

    def __init__(
        self,
        url: str,
        model: str = "default",
        api_key_env: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 1.0,
        max_tokens: int = 16,
        temperature: float = 0.0,
        log_name: str = "chat",
        timeout_setting: str = "timeout_s",
    ):
        if timeout_s <= 0 or max_retries < 0 or backoff_s < 0 or max_tokens < 1:
            raise ValueError("timeout_s > 0, max_retries >= 0, backoff_s >= 0 and max_tokens >= 1 are required")
        self.url = chat_url(url)
        self.model = model
        self.headers = {"Content-Type": "application/json"}
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ValueError(f"api_key_env={api_key_env!r} but that environment variable is not set")
            self.headers["Authorization"] = f"Bearer {key}"
        self.timeout_s, self.max_retries, self.backoff_s = timeout_s, max_retries, backoff_s
        self.max_tokens, self.temperature = max_tokens, temperature
        self.log_name, self.timeout_setting = log_name, timeout_setting

    def request_body(self, messages: list[dict]) -> dict:
        return {
            "model": self.model,
            "messages": messages,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
        }

    def _post(self, body: dict) -> dict:
        request = urllib.request.Request(self.url, data=json.dumps(body).encode(), headers=self.headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            return parse_json_bytes(self.url, response.read())

    def _post_within_deadline(self, body: dict) -> dict:
        """`_post` in a daemon thread, given up (TimeoutError) once ``timeout_s`` has passed; a thread left
        behind ends with its socket's timeout, or with the process."""
        outcome: dict = {}

        def post() -> None:
            try:
                outcome["value"] = self._post(body)
            except BaseException as error:  # noqa: BLE001 - re-raised in the caller's thread
                outcome["error"] = error

        worker = threading.Thread(target=post, name=f"{self.log_name}-request", daemon=True)
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            raise TimeoutError(f"no complete answer within {self.timeout_s:g} s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def reply(self, messages: list[dict]) -> str | None:
        """The assistant's reply to `messages`, or None when none could be had (logged as a warning)."""
        body = self.request_body(messages)
        timeouts = 0
        for attempt in range(self.max_retries + 1):
            try:
                content = self._post_within_deadline(body)["choices"][0]["message"]["content"]
                if not isinstance(content, str):
                    raise TypeError("content is not text")
                return content
            except urllib.error.HTTPError as error:
                if error.code not in RETRY_STATUS:
                    logger.warning("%s: HTTP %s from %s, giving up", self.log_name, error.code, self.url)
                    return None
                failure = f"HTTP {error.code}"
            except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as error:
                failure = repr(error)
                timeouts += isinstance(error, TimeoutError) or isinstance(getattr(error, "reason", None), TimeoutError)
            except (ValueError, KeyError, IndexError, TypeError):  # not JSON / not a chat completion
                # Not retried: the server answered, and would most likely answer the same way again.
                logger.warning("%s: malformed response from %s", self.log_name, self.url)
                return None
            if attempt < self.max_retries:
                time.sleep(self.backoff_s * 2**attempt * (0.5 + random.random() / 2))
        attempts = self.max_retries + 1
        if timeouts == attempts:
            logger.warning(
                "%s: %s gave no answer within %g s in %d attempts, giving up (raise %s if the server is only slow)",
                self.log_name,
                self.url,
                self.timeout_s,
                attempts,
                self.timeout_setting,
            )
        else:
            logger.warning("%s: %s from %s after %d attempts, giving up", self.log_name, failure, self.url, attempts)
        return None
