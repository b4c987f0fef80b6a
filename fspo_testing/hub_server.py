"""A local stand-in for the Hugging Face hub's HTTP interface, for tests (the real hub is not reachable here).

It answers the requests huggingface_hub makes to resolve and download a model repo: ``/api/models/<repo>/
revision/<rev>`` (repo info), ``/api/models/<repo>/tree/<rev>`` (the file list), ``HEAD``/``GET``
``/<repo>/resolve/<rev>/<file>`` (metadata and content), with the hub's error codes: ``RepoNotFound``
(401), ``GatedRepo`` (401 without a token, 403 with a token not granted access) and ``EntryNotFound``
(404). ``outage`` (e.g. 503, or 429) makes it answer every request with that status, as the hub does when
it is down or rate-limiting; ``silent`` makes it accept every connection and never answer (a hung proxy or
load balancer), until it is closed. Point huggingface_hub at it with ``HF_ENDPOINT`` (read at import: set it for a subprocess) or an
``endpoint=`` argument.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse


class StandInHub:
    """Serves ``repos`` (hub id -> folder); ``gated`` repos only to a Bearer token in ``granted``.

    Use as a context manager; ``endpoint`` is its root URL, ``requests`` the paths it was asked for and
    ``calls`` each request as ``(method, path, bearer token or "")``.
    """

    def __init__(
        self,
        repos: dict[str, str | Path],
        gated: set[str] = frozenset(),
        granted: set[str] = frozenset(),
        outage: int | None = None,
        silent: bool = False,
    ):
        self.repos = {repo: Path(folder) for repo, folder in repos.items()}
        self.gated, self.granted = set(gated), set(granted)
        self.outage, self.silent = outage, silent
        self._closed = threading.Event()
        self.requests: list[str] = []
        self.calls: list[tuple[str, str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> StandInHub:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._closed.set()  # silent handlers return (without answering) so the server can stop
        self._server.shutdown()
        self._server.server_close()

    def commit(self, repo: str) -> str:
        names = sorted(p.name for p in self.repos[repo].iterdir() if p.is_file())
        return hashlib.sha1((repo + "".join(names)).encode()).hexdigest()

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body: bytes = b"", headers: dict | None = None, head: bool = False):
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _error(self, status: int, code: str, head: bool):
                headers = {"X-Error-Code": code} if code else {}
                self._send(status, json.dumps({"error": code or "unavailable"}).encode(), headers, head)

            def _route(self, head: bool):
                path = unquote(urlparse(self.path).path)
                hub.requests.append(path)
                token = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                hub.calls.append(("HEAD" if head else "GET", path, token))
                if hub.silent:
                    hub._closed.wait()
                    self.close_connection = True
                    return None
                if hub.outage:
                    return self._error(hub.outage, "", head)
                api = path.startswith("/api/models/")
                parts = path.removeprefix("/api/models/" if api else "/").split("/")
                repo, rest = "/".join(parts[:2]), parts[2:]
                if repo not in hub.repos:
                    return self._error(401, "RepoNotFound", head)
                if repo in hub.gated:
                    if token not in hub.granted:
                        return self._error(403 if token else 401, "GatedRepo", head)
                folder, commit = hub.repos[repo], hub.commit(repo)
                files = sorted(p for p in folder.iterdir() if p.is_file())
                if api and rest[:1] == ["revision"]:
                    info = {"id": repo, "sha": commit, "siblings": [{"rfilename": p.name} for p in files]}
                    return self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, head)
                if api and rest[:1] == ["tree"]:
                    tree = [
                        {
                            "type": "file",
                            "path": p.name,
                            "size": p.stat().st_size,
                            "oid": hashlib.sha1(p.read_bytes()).hexdigest(),
                        }
                        for p in files
                    ]
                    return self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, head)
                if not api and rest[:1] == ["resolve"] and len(rest) >= 3:
                    file = folder / "/".join(rest[2:])
                    if not file.is_file():
                        return self._error(404, "EntryNotFound", head)
                    data = file.read_bytes()
                    etag = f'"{hashlib.sha256(data).hexdigest()}"'
                    return self._send(200, data, {"X-Repo-Commit": commit, "ETag": etag}, head)
                return self._error(404, "EntryNotFound", head)

            def do_HEAD(self):
                self._route(head=True)

            def do_GET(self):
                self._route(head=False)

        return Handler
