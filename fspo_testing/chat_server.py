"""A real local HTTP server speaking the OpenAI chat-completions API, for the LLM judge tests.

Used through the ``chat_server`` fixture of tests/conftest.py:

    server = chat_server(answer)   # answer(body) -> str | bytes | int
    client = ChatClient(server.url)
    ...
    server.requests                # every request: {"body": parsed JSON, "auth": Authorization header}

`answer` gets the parsed request body and returns the assistant's reply text (sent as a chat completion),
raw bytes (sent as they are, e.g. a non-JSON page), or an int (sent as that HTTP error status). It runs in
the server's request thread, so it may sleep to play a slow judge.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Answer = Callable[[dict], "str | bytes | int"]


def completion(content: str) -> bytes:
    """A chat-completion response body whose one choice says `content`."""
    choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
    return json.dumps({"id": "x", "object": "chat.completion", "model": "judge", "choices": [choice]}).encode()


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer

    def log_message(self, *args):  # keep pytest output clean
        pass

    def do_POST(self):
        if self.path != "/v1/chat/completions":
            self.send_error(404)
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.server.lock:
            self.server.requests.append({"body": body, "auth": self.headers.get("Authorization")})
        reply = self.server.answer(body)
        if isinstance(reply, int):
            self.send_error(reply)
            return
        payload = reply if isinstance(reply, bytes) else completion(reply)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
            pass


class ChatServer(ThreadingHTTPServer):
    """Serves on 127.0.0.1 in a daemon thread from construction until `close`."""

    daemon_threads = True
    request_queue_size = 128  # the default backlog (5) resets connections under a burst of concurrent clients

    def __init__(self, answer: Answer):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answer, self.requests, self.lock = answer, [], threading.Lock()
        self.url = f"http://127.0.0.1:{self.server_port}"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class TricklingServer:
    """Accepts connections and answers each request with one byte of an HTTP status line every ``interval_s``
    seconds, never finishing (until `close`): a server that is never silent long enough for a socket
    timeout, the case a per-read limit cannot end."""

    def __init__(self, interval_s: float = 0.2):
        import socket

        self.interval_s, self._closed = interval_s, threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._trickle, args=(connection,), daemon=True).start()

    def _trickle(self, connection) -> None:
        with connection:
            connection.recv(65536)
            while not self._closed.wait(self.interval_s):
                try:
                    connection.sendall(b"H")
                except OSError:  # the client gave up
                    return

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
