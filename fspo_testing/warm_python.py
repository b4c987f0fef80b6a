"""A stand-in for ``sys.executable`` that runs ``-m fspo.training.main`` from a warm, forked interpreter.

A config check (``FSPO_DRY_RUN=1``, a recipe's dry run, a refused override) spends ~7 s importing verl and
under a second on the check. :func:`warm_python` returns the path of an executable that tests use as their
interpreter (``PYTHON=`` for the recipes, or in place of ``sys.executable``): for ``-m fspo.training.main ...`` it asks a
server that imported ``fspo.training.main`` once to fork, and the child runs the module as ``python -m`` would, on the
caller's own stdin, stdout and stderr (passed over a Unix socket), in its working folder, with its environment
and arguments; anything else ``exec``s the real interpreter.

What a fresh interpreter reads at import time must be what the server read: a server serves only callers whose
environment agrees with the one it started with on every variable a library may read at import
(:data:`IMPORT_TIME_PREFIXES`: Hugging Face's, torch's, verl's, Ray's, Python's, PATH, ...), and a caller that
differs there starts a server of its own. fspo reads its own ``FSPO_*`` variables only when called, so they and
a recipe's variables may differ per call. What importing changed in the environment (the CPU plugin sets
``VERL_PLATFORM``) is applied again on top of each caller's environment. A server ends with the process that asked
for it (``FSPO_WARM_OWNER``) or after :data:`IDLE_S` seconds without a request.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import runpy
import select
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVED_MODULES = ("fspo.training.main", "fspo.cli")
IMPORT_TIME_PREFIXES = (
    "HF_", "HUGGINGFACE", "TRANSFORMERS", "TOKENIZERS", "DATASETS", "SAFETENSORS", "TORCH", "PYTORCH", "CUDA", "NCCL",
    "NVIDIA", "OMP_", "MKL", "KMP_", "OPENBLAS", "GOTO", "VERL", "VLLM", "RAY_", "HYDRA", "WANDB", "PYTHON", "LD_",
    "PATH", "HOME", "XDG_", "TMP", "TEMP", "LANG", "LC_", "TZ", "USER", "NO_PROXY", "HTTP", "ACCELERATE",
)  # fmt: skip
IDLE_S = 600.0
_SHIM = """#!/bin/sh
exec {python} -S {client} "$@"
"""


def environment_key(env: dict[str, str]) -> str:
    """The servers' key: a hash of the variables of ``env`` that a library may read at import."""
    kept = sorted((k, v) for k, v in env.items() if k.upper().startswith(IMPORT_TIME_PREFIXES))
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:20]


@functools.cache
def warm_python() -> str:
    """The path of an executable to use as the interpreter (made once per process; its servers end with it)."""
    folder = Path(tempfile.mkdtemp(prefix="fspo-warm-python-"))
    shim = folder / "python"
    shim.write_text(_SHIM.format(python=sys.executable, client=Path(__file__).resolve()))
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.environ["FSPO_WARM_OWNER"] = str(os.getpid())
    return str(shim)


# --- the client: what the shim runs (``python -S``, so it must import nothing heavy) ------------------------------


def _exec_cold(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *argv])


def _connect(path: Path, deadline: float) -> socket.socket | None:
    while time.monotonic() < deadline:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            client.connect(str(path))
            return client
        except (FileNotFoundError, ConnectionRefusedError):
            client.close()
            time.sleep(0.05)
    return None


def _start_server(path: Path) -> None:
    subprocess.Popen(
        [sys.executable, "-m", "fspo_testing.warm_python", "--serve", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(f"{path}.log", "ab"),  # noqa: SIM115 - the server's own log, for a failure to start
        start_new_session=True,
        cwd=path.parent,
    )


def client_main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] != "-m" or argv[1] not in SERVED_MODULES or not os.environ.get("FSPO_WARM_OWNER"):
        _exec_cold(argv)
    env = dict(os.environ)
    # The servers' own folder is also their working folder: `-m` puts it first on sys.path, and it holds no module.
    folder = Path(tempfile.gettempdir()) / f"fspo-warm-{env['FSPO_WARM_OWNER']}"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{environment_key(env)}.sock"
    lock = os.open(f"{path}.lock", os.O_CREAT | os.O_RDWR)
    import fcntl

    fcntl.flock(lock, fcntl.LOCK_EX)  # one caller starts the server; the others wait for its socket
    try:
        connection = _connect(path, time.monotonic() + 0.2)
        if connection is None:
            path.unlink(missing_ok=True)
            _start_server(path)
            connection = _connect(path, time.monotonic() + 120)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
    if connection is None:
        _exec_cold(argv)
    request = json.dumps({"argv": argv, "env": env, "cwd": os.getcwd()}).encode()
    socket.send_fds(connection, [len(request).to_bytes(8, "big") + request], [0, 1, 2])
    reply = b""
    while len(reply) < 4:
        chunk = connection.recv(4 - len(reply))
        if not chunk:  # the server went away mid-request: say so, as an interpreter that crashed would
            print("fspo warm python: the server closed the connection", file=sys.stderr)
            sys.exit(70)
        reply += chunk
    sys.exit(int.from_bytes(reply, "big", signed=True))


# --- the server -------------------------------------------------------------------------------------------------


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    size = int.from_bytes(data[:8], "big")
    data = data[8:]
    while len(data) < size:
        data += connection.recv(size - len(data))
    return json.loads(data), fds


def _run_child(request: dict, fds: list[int], import_changes: dict[str, str | None]) -> None:
    """In the forked child: become ``python -m MODULE args`` as the caller would have run it, then exit."""
    code = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        # The streams the interpreter would open on these descriptors: the server's own stand on /dev/null,
        # which is seekable, and a stream that believes so fails reconfigure() (fspo.cli calls it) on a pipe.
        for target, (name, mode) in enumerate((("stdin", "r"), ("stdout", "w"), ("stderr", "w"))):
            old = getattr(sys, name)
            encoding, errors = (old.encoding, old.errors) if old is not None else ("utf-8", "strict")
            line_buffered = 1 if name == "stderr" else -1  # as Python 3.9+ opens stderr
            setattr(sys, name, open(target, mode, line_buffered, encoding, errors, closefd=False))  # noqa: SIM115
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for name, value in import_changes.items():  # as importing would have changed the caller's environment
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        sys.path[0] = request["cwd"]  # what `python -m` puts first
        sys.argv = [request["argv"][1], *request["argv"][2:]]
        try:
            runpy.run_module(request["argv"][1], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback, exit 1
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 - a closed pipe: nothing left to say
                pass
        os._exit(code)


def serve(path: Path) -> None:
    owner = int(os.environ["FSPO_WARM_OWNER"])
    before = dict(os.environ)
    for module in SERVED_MODULES:
        __import__(module)
    import_changes = {k: v for k, v in os.environ.items() if before.get(k) != v}
    import_changes.update({k: None for k in before if k not in os.environ})
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    children: dict[int, socket.socket] = {}
    last = time.monotonic()
    while True:
        ready, _, _ = select.select([listener], [], [], 0.05 if children else 0.5)
        if ready:
            connection, _ = listener.accept()
            request, fds = _receive(connection)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                listener.close()
                connection.close()
                _run_child(request, fds, import_changes)
            for fd in fds:
                os.close(fd)
            children[pid] = connection
            last = time.monotonic()
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = children.pop(pid)
            code = os.waitstatus_to_exitcode(status)
            code = code if code >= 0 else 128 - code  # killed by a signal: as a shell reports it
            try:
                connection.sendall(code.to_bytes(4, "big", signed=True))
            except OSError:
                pass  # the caller is gone (killed at its timeout): nobody to tell
            finally:
                connection.close()
        if not children and (time.monotonic() - last > IDLE_S or not _alive(owner)):
            listener.close()
            path.unlink(missing_ok=True)
            return


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(Path(sys.argv[2]))
    else:
        client_main(sys.argv[1:])
