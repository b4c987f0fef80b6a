"""A stand-in for ``sys.executable`` that runs ``-m fspo.training.main`` (and the other :data:`SERVED_MODULES`, and a
program on stdin) from a warm, forked interpreter.

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
for it (``FSPO_WARM_OWNER``) or after :data:`IDLE_S` seconds without a request or a child. Whatever ends the owner
(a signal, ``kill -9``), a reaper it starts (:func:`reap`) then kills every process still marked with its pid (servers,
their children, a Ray cluster and its workers) and removes its folders.

The same server starts Ray's workers (:func:`warm_ray_workers`): Ray runs ``py_executable default_worker.py ...`` for
each worker, and with :func:`ray_runtime_env_hook` (``RAY_RUNTIME_ENV_HOOK``) that executable is this shim. A worker
server has imported the libraries every worker imports (:data:`PRELOADS`), and for a trainer run's workers the task
runner's module with verl and its plugins, Ray's random ids kept unseeded (:func:`_actor_class_ids_from_urandom`).
Ray tracks the worker by the pid it registers (the forked child); a caller that goes away (Ray killed the process it
started) takes its child with it. A worker server serves one Ray job; every job brings one.

Servers are themselves forked. A core server, keyed without Ray's, Hugging Face's and the other variables its
libraries do not read (:data:`NOT_READ_BY_CORE_PREFIXES`), imports torch and the other :data:`CORE_LIBRARIES` (~7
CPU-s); a base server, its child keyed without Ray's, adds the :data:`HUB_LIBRARIES`
(transformers, datasets, ...; ~3 CPU-s), which read Hugging Face's variables at import; each module or worker server
is a base's child, which adds Ray, verl and fspo. Tests differ mostly in their Hugging Face caches, hubs and tokens:
in a CI run, 16 core servers (median 7.7 CPU-s) served 35 base servers (3.1 CPU-s each).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import json
import os
import runpy
import select
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The modules a test or a script it runs starts with `python -m` and that import verl (~9 CPU-s): the trainer, the
# CLI, and verl's merger and the LoRA fold of scripts/merge_checkpoint.sh. A program on stdin (`python -`: the merge
# script's checks, one of which loads the merged model with transformers, ~11 CPU-s cold) is served too.
SERVED_MODULES = ("fspo.training.main", "fspo.cli", "verl.model_merger", "fspo.training.lora_fold")
RAY_WORKER_SCRIPT = os.path.join("ray", "_private", "workers", "default_worker.py")
# Ray starts every worker of a job with a runtime env (verl's jobs have one) as `python setup_worker.py ...`, which
# imports ray (~0.7 CPU-s) to apply the env and exec the worker's interpreter. A test cluster's raylet runs
# SETUP_WORKER_STAND_IN in its place: it has the same script run, forked from a server that imported ray once.
RAY_SETUP_SCRIPT = os.path.join("ray", "_private", "workers", "setup_worker.py")
SETUP_WORKER_STAND_IN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm_setup_worker.py")
# The libraries that verl, the CLI and every Ray worker of a test import, Ray aside (~10 CPU-s): the base server
# (BASE) has imported them, and the module and Ray worker servers are forked from it. Ray stays out: what Ray fixes
# at import belongs to one job, so a Ray worker server serves one job, and Ray and verl are what it adds (~2 CPU-s).
# The core server (CORE), the base's parent, imports those that read no Hugging Face variable (HUB_PREFIXES).
CORE_LIBRARIES = (
    "torch", "torch.distributed", "tensordict", "pandas", "pyarrow", "aiohttp", "fastapi", "uvicorn", "hydra",
    "omegaconf", "torchdata", "zmq",
)  # fmt: skip
HUB_LIBRARIES = ("transformers", "transformers.modeling_utils", "peft", "accelerate", "datasets")
LIBRARIES = (*CORE_LIBRARIES, *HUB_LIBRARIES)
CORE = "core"
BASE = "base"
# The server each kind of server is forked from; a server that is a parent serves only the servers it forks.
PARENTS = {"module": BASE, "ray-worker": BASE, BASE: CORE}
# What a server imports before it forks, per kind of request (see _request_kind).
PRELOADS = {
    CORE: CORE_LIBRARIES,
    BASE: LIBRARIES,
    "module": (
        *LIBRARIES,
        *SERVED_MODULES,
        "verl.model_merger.base_model_merger",
        "verl.model_merger.fsdp_model_merger",
    ),
    "ray-worker": (*LIBRARIES, "ray", "ray._private.worker"),
    "ray-setup": ("ray._private.ray_logging", "ray._private.runtime_env.context", "ray.core.generated.common_pb2"),
}
# A trainer run's Ray workers (task runner, FSDP workers, rollout and reward servers) each import the task runner's
# module and verl with it, ~3 s on top of torch: their server imports it first. The runtime env hook marks a trainer
# run's workers (a driver that imported the module), so a cluster of verifier actors alone does not pay for it.
TRAINER_MODULE = "fspo.training.main"
PRELOAD_ENV = "FSPO_WARM_PRELOAD"
# The Hugging Face libraries' variables (caches, hub, tokens, offline switches), read at import by HUB_LIBRARIES only.
HUB_PREFIXES = ("HF_", "HUGGINGFACE", "TRANSFORMERS", "TOKENIZERS", "DATASETS", "SAFETENSORS", "ACCELERATE")
IMPORT_TIME_PREFIXES = (
    *HUB_PREFIXES, "TORCH", "PYTORCH", "CUDA", "NCCL",
    "NVIDIA", "OMP_", "MKL", "KMP_", "OPENBLAS", "GOTO", "VERL", "VLLM", "RAY_", "HYDRA", "WANDB", "PYTHON", "LD_",
    "PATH", "HOME", "XDG_", "TMP", "TEMP", "LANG", "LC_", "TZ", "USER", "NO_PROXY", "HTTP", "MALLOC",
)  # fmt: skip
# Seconds a server without children waits for a request. A Ray worker server holds ~400 MB and serves one cluster
# (it also ends with the cluster's raylet), so it ends sooner.
IDLE_S = {CORE: 600.0, BASE: 600.0, "module": 600.0, "ray-worker": 180.0, "ray-setup": 180.0}
# Ray kills a test cluster's workers when 95% of the machine's memory is in use, and two trainer runs at once take
# ~12 of this machine's 24 GB. Idle servers held ~4 GB (PSS) at a CI run's peak of 20.4 GB: while less than
# KEEP_AVAILABLE of the memory is available, a server ends once it has been idle for SHORT_MEMORY_IDLE_S.
KEEP_AVAILABLE = 1 / 3
SHORT_MEMORY_IDLE_S = 10.0
_SHIM = """#!/bin/sh
exec {python} -S {client} "$@"
"""


# Read only when called (verl's file logger reads its path as a run starts its tracker; breakpoint() reads its hook,
# which ray.init sets in the driver), so runs that log to different files share a server, and so do clusters
# started before and after another one.
READ_WHEN_CALLED = ("VERL_FILE_LOGGER_PATH", "PYTHONBREAKPOINT", "PYTHON")  # PYTHON: the recipes' interpreter
# Set by verl per worker of a group and read only when the worker runs, so the workers of a group share a server.
# RAY_RAYLET_PID and RAY_JOB_ID stay in the key: a worker forked from a server started under another cluster took
# that cluster's raylet for its own ("the local raylet failed. Raylet pid: <the old one>") and exited at once.
PER_WORKER_RAY_VARIABLES = ("RAY_LOCAL_RANK", "RAY_LOCAL_WORLD_SIZE")


def environment_key(env: dict[str, str]) -> str:
    """The servers' key: a hash of the variables of ``env`` that a library may read at import."""
    kept = sorted(
        (k, v)
        for k, v in env.items()
        if (k.upper().startswith(IMPORT_TIME_PREFIXES) and k not in (*PER_WORKER_RAY_VARIABLES, *READ_WHEN_CALLED))
        or k == PRELOAD_ENV
    )
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:20]


def base_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` as the base server sees it: without Ray's variables (it does not import Ray; they name one cluster
    and job) and without :data:`PRELOAD_ENV` (it does not import the trainer), so servers of every job share it."""
    return {k: v for k, v in env.items() if not k.upper().startswith("RAY_") and k != PRELOAD_ENV}


# What the core's libraries do not read at import, nor the interpreter at its start: Hugging Face's variables; verl's,
# vLLM's and NCCL's (a trainer run's workers get them from its runtime env, the driver not); PATH (tests put the
# venv or a stand-in's folder first); proxies and the tracker's.
NOT_READ_BY_CORE_PREFIXES = (*HUB_PREFIXES, "VERL", "VLLM", "NCCL", "WANDB", "PATH", "HTTP", "NO_PROXY")


def core_environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` as the core server sees it: the base's, without what the core libraries do not read at import
    (:data:`NOT_READ_BY_CORE_PREFIXES`)."""
    return {k: v for k, v in base_environment(env).items() if not k.upper().startswith(NOT_READ_BY_CORE_PREFIXES)}


# The environment a parent server is keyed by, from its child's.
PARENT_ENVIRONMENT = {BASE: base_environment, CORE: core_environment}


@functools.cache
def warm_python() -> str:
    """The path of an executable to use as the interpreter (made once per process; its servers end with it)."""
    folder = Path(tempfile.mkdtemp(prefix="fspo-warm-python-"))
    shim = folder / "python"
    shim.write_text(_SHIM.format(python=sys.executable, client=Path(__file__).resolve()))
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    owner = os.getpid()
    os.environ["FSPO_WARM_OWNER"] = str(owner)
    _start_reaper(owner, [folder, servers_folder(owner)])
    return str(shim)


def servers_folder(owner: int) -> Path:
    """The folder of ``owner``'s servers: their sockets and logs."""
    return Path(tempfile.gettempdir()) / f"fspo-warm-{owner}"


def remove_with_owner(path: str | Path) -> None:
    """Have the reaper of this process's servers remove ``path`` (a folder under the temp folder) when this process
    ends (a Ray cluster's session folder, which the cluster's own stop leaves where a signal ended the process)."""
    folder = servers_folder(int(os.environ["FSPO_WARM_OWNER"]))
    folder.mkdir(mode=0o700, exist_ok=True)
    with open(folder / REMOVE_LIST, "a") as listed:
        listed.write(f"{Path(path).resolve()}\n")


def warm_ray_workers() -> None:
    """Make Ray runs started from this process (and its children) fork their workers from a warm server."""
    os.environ["FSPO_WARM_PYTHON"] = warm_python()
    os.environ["RAY_RUNTIME_ENV_HOOK"] = f"{__name__}.ray_runtime_env_hook"


def ray_runtime_env_hook(runtime_env: dict | None) -> dict:
    """Ray's ``RAY_RUNTIME_ENV_HOOK``: the job's workers run under the warm shim, unless the job names its own
    interpreter (verl's ``ray_kwargs.ray_init.runtime_env.py_executable``; null is Ray's default). A trainer run's
    workers are marked for a server that has imported its task runner (:data:`TRAINER_MODULE`)."""
    runtime_env = dict(runtime_env or {})
    shim = os.environ.get("FSPO_WARM_PYTHON")
    if shim and os.environ.get("FSPO_WARM_OWNER"):
        setup_workers_forked()
        if runtime_env.get("py_executable") is None:
            runtime_env["py_executable"] = shim
            if _driver_runs_the_trainer():
                runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), PRELOAD_ENV: TRAINER_MODULE}
    return runtime_env


def setup_workers_forked() -> None:
    """Clusters this process starts from now on run :data:`SETUP_WORKER_STAND_IN` in place of Ray's setup_worker.py.

    The hook runs in ``ray.init`` before it starts a cluster; Ray takes the script's path from ``RayParams``, which
    ``ray.init`` builds without one (Ray's default fills it in)."""
    from ray._private import parameter

    init = parameter.RayParams.__init__
    if getattr(init, "setup_worker_stand_in", False):
        return

    @functools.wraps(init)
    def with_stand_in(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if self.setup_worker_path is None:
            self.setup_worker_path = SETUP_WORKER_STAND_IN

    with_stand_in.setup_worker_stand_in = True
    parameter.RayParams.__init__ = with_stand_in


def _driver_runs_the_trainer() -> bool:
    """Whether this process imported :data:`TRAINER_MODULE` or runs it (``python -m``: it is ``__main__``)."""
    modules = (sys.modules.get("__main__"), sys.modules.get(TRAINER_MODULE))
    return any(getattr(getattr(module, "__spec__", None), "name", None) == TRAINER_MODULE for module in modules)


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


def _request_kind(argv: list[str]) -> str | None:
    """``module`` for ``-m`` one of :data:`SERVED_MODULES` or a program on stdin (``-``), ``ray-worker`` for Ray's
    worker script, ``ray-setup`` for its setup script, else None (cold)."""
    if (len(argv) >= 2 and argv[0] == "-m" and argv[1] in SERVED_MODULES) or argv[:1] == ["-"]:
        return "module"
    script = argv[1:2] if argv[:1] == ["-u"] else argv[:1]  # Ray runs `py_executable default_worker.py ...`
    if script and script[0].endswith(RAY_WORKER_SCRIPT):
        return "ray-worker"
    if script and script[0].endswith(RAY_SETUP_SCRIPT):
        return "ray-setup"
    return None


def _server(folder: Path, kind: str, env: dict[str, str]) -> socket.socket | None:
    """A connection to the server of ``kind`` for ``env``, started if there is none (one caller starts it, the others
    wait for its socket); None if it did not come up."""
    path = folder / f"{kind}-{environment_key(env)}.sock"
    lock = os.open(f"{path}.lock", os.O_CREAT | os.O_RDWR)
    import fcntl

    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
        connection = _connect(path, time.monotonic() + 0.2)
        if connection is None:
            path.unlink(missing_ok=True)
            _start_server(folder, path, kind, env)
            connection = _connect(path, time.monotonic() + 120)
    finally:
        fcntl.flock(lock, fcntl.LOCK_UN)
        os.close(lock)
    return connection


def _start_server(folder: Path, path: Path, kind: str, env: dict[str, str]) -> None:
    """A server is forked from its parent (:data:`PARENTS`, started first if need be); a core or Ray setup server,
    or one whose parent did not answer, is a fresh interpreter."""
    if kind in PARENTS:
        parent = PARENTS[kind]
        connection = _server(folder, parent, PARENT_ENVIRONMENT[parent](env))
        if connection is not None:
            with connection:
                connection.sendall(_framed({"serve": str(path), "kind": kind, "env": env}))
                if _exit_code(connection) == 0:
                    return
    subprocess.Popen(
        [sys.executable, "-m", "fspo_testing.warm_python", "--serve", str(path), kind],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(f"{path}.log", "ab"),  # noqa: SIM115 - the server's own log, for a failure to start
        start_new_session=True,
        cwd=folder,
        env={**env, ENVIRONMENT_ROOM[0]: "." * ENVIRONMENT_ROOM[1]} if kind in PARENT_ENVIRONMENT else env,
    )


def _framed(request: dict) -> bytes:
    data = json.dumps(request).encode()
    return len(data).to_bytes(8, "big") + data


def _exit_code(connection: socket.socket) -> int | None:
    """The exit status the server sends when its child ends; None if the server went away first."""
    reply = b""
    while len(reply) < 4:
        chunk = connection.recv(4 - len(reply))
        if not chunk:
            return None
        reply += chunk
    return int.from_bytes(reply, "big", signed=True)


def client_main(argv: list[str]) -> None:
    kind = _request_kind(argv)
    if kind is None or not os.environ.get("FSPO_WARM_OWNER"):
        _exec_cold(argv)
    env = dict(os.environ)
    # The servers' own folder is also their working folder: `-m` puts it first on sys.path, and it holds no module.
    folder = servers_folder(int(env["FSPO_WARM_OWNER"]))
    folder.mkdir(mode=0o700, exist_ok=True)
    connection = _server(folder, kind, env)
    if connection is None:
        _exec_cold(argv)
    socket.send_fds(connection, [_framed({"argv": argv, "env": env, "cwd": os.getcwd()})], [0, 1, 2])
    code = _exit_code(connection)
    if code is None:  # the server went away mid-request: say so, as an interpreter that crashed would
        print("fspo warm python: the server closed the connection", file=sys.stderr)
        sys.exit(70)
    sys.exit(code)


# --- the server -------------------------------------------------------------------------------------------------


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    size = int.from_bytes(data[:8], "big")
    data = data[8:]
    while len(data) < size:
        data += connection.recv(size - len(data))
    return json.loads(data), fds


def _fresh_random_state() -> None:
    """Seed numpy's and torch's global generators from the OS, as each new process does (Python's ``random`` reseeds
    itself at fork): forked siblings would otherwise draw the same numbers."""
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()


def _run_child(request: dict, fds: list[int], import_changes: dict[str, str | None]) -> None:
    """In the forked child: become ``python -m MODULE args`` or ``python -u SCRIPT args`` as the caller would have
    run it, then exit."""
    code = 1
    argv = request["argv"]
    try:
        _name_process(os.path.basename(sys.executable))  # the server's name is not the caller's
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        # The streams the interpreter would open on these descriptors: the server's own stand on /dev/null,
        # which is seekable, and a stream that believes so fails reconfigure() (fspo.cli calls it) on a pipe.
        for target, (name, mode) in enumerate((("stdin", "r"), ("stdout", "w"), ("stderr", "w"))):
            old = getattr(sys, name)
            encoding, errors = (old.encoding, old.errors) if old is not None else ("utf-8", "strict")
            line_buffered = 1 if name == "stderr" else -1  # as Python 3.9+ opens stderr
            stream = open(target, mode, line_buffered, encoding, errors, closefd=False)  # noqa: SIM115
            if argv[0] == "-u" and name != "stdin":  # unbuffered, as `python -u`
                stream.reconfigure(write_through=True)
            setattr(sys, name, stream)
        _fresh_random_state()
        os.chdir(request["cwd"])
        _take_environment(request["env"], import_changes)
        try:
            if argv[0] == "-m":
                sys.path[0] = request["cwd"]  # what `python -m` puts first
                sys.argv = [argv[1], *argv[2:]]
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            elif argv[0] == "-":
                sys.path[0] = ""  # what `python -` puts first
                sys.argv = argv
                main = sys.modules["__main__"] = type(sys)("__main__")
                exec(compile(sys.stdin.read(), "<stdin>", "exec"), main.__dict__)  # noqa: S102 - as `python -` runs it
            else:
                script_argv = argv[1:] if argv[0] == "-u" else argv
                sys.path[0] = os.path.dirname(os.path.realpath(script_argv[0]))  # what `python SCRIPT` puts first
                sys.argv = script_argv
                runpy.run_path(script_argv[0], run_name="__main__")
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


def _name_process(name: str) -> None:
    """Set the process's name (``/proc/PID/comm``, what ``ps`` and process accounting show; 15 bytes at most): a
    server forked from its parent has the parent's command line, and its name tells them apart."""
    import ctypes

    ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def _take_environment(env: dict[str, str], import_changes: dict[str, str | None]) -> None:
    """``env`` as this process's environment, with what importing would have changed in it (``import_changes``)."""
    os.environ.clear()
    os.environ.update(env)
    for name, value in import_changes.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# A parent server started afresh gets this much room in its environment block, which /proc/PID/environ shows: a server
# forked from it writes the environment it serves there (see _show_environment).
ENVIRONMENT_ROOM = ("FSPO_WARM_ENVIRONMENT_ROOM", 32768)


def _show_environment(env: dict[str, str]) -> None:
    """Make ``/proc/PID/environ`` of this process and of the children it forks show ``env``.

    The kernel shows the block a process was started with; a server forked from its parent would show the parent's, and
    the trainer-run ledger finds a run's Ray workers by the raylet named there (``RAY_RAYLET_PID``). The block is
    rewritten in place, as setproctitle rewrites argv, after the caller's environment was taken
    (:func:`_take_environment` unset every variable it held, so nothing points into it)."""
    import ctypes

    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    start, end = int(fields[47]), int(fields[48])  # env_start, env_end: fields 50 and 51 of proc(5)'s stat
    block = b"".join(f"{name}={value}".encode() + b"\0" for name, value in env.items())
    if len(block) >= end - start:  # the ledger would not find this server's workers: say so in the server's log
        print(
            f"fspo warm python: {len(block)} bytes of environment do not fit the {end - start} given", file=sys.stderr
        )
        return
    ctypes.memmove(start, block.ljust(end - start, b"\0"), end - start)


def _become_server(request: dict, import_changes: dict[str, str | None]) -> None:
    """In a parent server's forked child: leave a grandchild that serves ``request["kind"]`` at ``request["serve"]``
    in the caller's environment, as a fresh ``--serve`` interpreter would (its own session, its log on stderr), and
    exit, so that the parent answers the caller at once."""
    if os.fork():
        os._exit(0)
    code = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        log = os.open(f"{request['serve']}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        for target, fd in enumerate((null, null, log)):
            os.dup2(fd, target)
        _take_environment(request["env"], import_changes)
        _show_environment(request["env"])
        serve(Path(request["serve"]), request["kind"], import_changes)
        code = 0
    except BaseException:  # noqa: BLE001 - into the server's log, as a fresh interpreter's traceback would go
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


@contextlib.contextmanager
def _actor_class_ids_from_urandom():
    """Within the block, ``ray.remote`` on a class draws its id from ``os.urandom``, not from Ray's C++ generator.

    That generator is one per process, seeded at its first draw; ``ray.remote`` at import (verl declares actor
    classes, transfer_queue's among them) is a draw. Seeded in the server, every forked process would draw the same
    task ids (an async actor called from two such workers failed Ray's check ``erased == 1``); unseeded, each worker
    seeds its own. Class ids only need to be unique, and 28 random bytes are."""
    import ray.actor

    real = ray.actor.ActorClassID

    class ActorClassIDFromURandom:
        @staticmethod
        def from_random():
            return real.from_binary(os.urandom(real.size()))

    ray.actor.ActorClassID = ActorClassIDFromURandom
    try:
        yield
    finally:
        ray.actor.ActorClassID = real


def serve(path: Path, kind: str, inherited_changes: dict[str, str | None] | None = None) -> None:
    """Import :data:`PRELOADS` for ``kind``, then fork a child per request on ``path``'s socket. A server forked from
    a parent passes what the parent's imports changed in the environment (``inherited_changes``)."""
    _name_process(f"fspo-{kind}")
    owner = int(os.environ["FSPO_WARM_OWNER"])
    raylet = int(os.environ.get("RAY_RAYLET_PID", "0"))  # a Ray worker server serves one cluster: it ends with it
    before = dict(os.environ)
    trainer = kind == "ray-worker" and os.environ.get(PRELOAD_ENV) == TRAINER_MODULE
    modules = (*PRELOADS[kind], *((TRAINER_MODULE,) if trainer else ()))
    with contextlib.nullcontext() if kind in PARENT_ENVIRONMENT else _actor_class_ids_from_urandom():
        for module in modules:
            __import__(module)
    hub_modules = [name for name in ("huggingface_hub", *HUB_LIBRARIES) if kind == CORE and name in sys.modules]
    if hub_modules:  # they would keep the core's Hugging Face variables for every base forked from it
        raise SystemExit(f"fspo warm python: the core libraries imported {', '.join(hub_modules)}")
    # A forked child shares the server's pages until it writes to them, and a collection writes to every tracked
    # object's header: frozen, the imported objects stay out of the children's collections and their pages shared.
    gc.collect()
    gc.freeze()
    import_changes = dict(inherited_changes or {})
    import_changes.update({k: v for k, v in os.environ.items() if before.get(k) != v})
    import_changes.update({k: None for k in before if k not in os.environ})
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    children: dict[int, socket.socket] = {}
    last = time.monotonic()
    while True:
        watched = [listener, *children.values()]
        ready, _, _ = select.select(watched, [], [], 0.05 if children else 0.5)
        # A readable caller connection is a closed one (callers send nothing after the request): the caller was
        # killed, and its child goes too, as the caller's own process would have.
        for pid in [pid for pid, connection in children.items() if connection in ready]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if listener in ready:
            connection, _ = listener.accept()
            request, fds = _receive(connection)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                # A group of its own: Ray kills a dead worker's process group, which must not be the server's.
                os.setpgid(0, 0)
                listener.close()
                for other in [connection, *children.values()]:
                    other.close()
                if kind in PARENT_ENVIRONMENT:
                    _become_server(request, import_changes)
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
            last = time.monotonic()
            code = os.waitstatus_to_exitcode(status)
            code = code if code >= 0 else 128 - code  # killed by a signal: as a shell reports it
            try:
                connection.sendall(code.to_bytes(4, "big", signed=True))
            except OSError:
                pass  # the caller is gone (killed at its timeout): nobody to tell
            finally:
                connection.close()
        if not children and (
            _idle_long_enough(kind, time.monotonic() - last) or not _alive(owner) or (raylet and not _alive(raylet))
        ):
            listener.close()
            path.unlink(missing_ok=True)
            return


def _idle_long_enough(kind: str, idle_s: float) -> bool:
    """Whether a server of ``kind`` without children, idle for ``idle_s``, should end (:data:`IDLE_S`, sooner while
    memory is short)."""
    if idle_s > IDLE_S[kind]:
        return True
    return idle_s > SHORT_MEMORY_IDLE_S and available_memory_fraction() < KEEP_AVAILABLE


def available_memory_fraction() -> float:
    """The share of the machine's memory available to new allocations (``MemAvailable / MemTotal``)."""
    import psutil  # in the servers only: the shim's client, run per call, does without it

    memory = psutil.virtual_memory()
    return memory.available / memory.total


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


# --- the reaper -------------------------------------------------------------------------------------------------

# The file in the servers' folder that lists further folders to remove with them (remove_with_owner).
REMOVE_LIST = "remove-with-owner"
# In a reaper's environment: another owner's reaper (a child of an owner that is itself marked) is no target.
REAPER_ENV = "FSPO_WARM_REAPER"
# How long the reaper goes on killing after the owner ended: a process may be starting a child as it is killed.
REAP_S = 30.0
REAP_QUIET_SCANS = 3  # scans in a row that find nothing marked end it sooner


def _start_reaper(owner: int, folders: list[Path]) -> None:
    """Start :func:`reap` for ``owner``: in a session of its own (a signal to the owner's process group misses it),
    with no stdio of the owner's (a caller reading the owner's output to its end would wait for it), without the
    owner's mark and with a reaper's."""
    env = {k: v for k, v in os.environ.items() if k != "FSPO_WARM_OWNER"} | {REAPER_ENV: "1"}
    argv = [sys.executable, "-S", os.path.abspath(__file__), "--reap", str(owner), *map(str, folders)]
    devnull = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    os.posix_spawn(sys.executable, argv, env, file_actions=devnull, setsid=True)


def _start_time(pid: int | str) -> int:
    """A process's start time (clock ticks since boot): with its pid, what names it, though pids are reused."""
    with open(f"/proc/{pid}/stat", "rb") as stat_file:
        return int(stat_file.read().rsplit(b")", 1)[1].split()[19])


def marked_processes(owner: int) -> dict[int, int]:
    """The processes whose environment marks them as ``owner``'s (``FSPO_WARM_OWNER``), and their descendants (a
    process that rewrites its title, as Ray's agents do, loses its environment's text, not its parent), each with its
    start time; reapers are none of them."""
    mark, reaper = f"\0FSPO_WARM_OWNER={owner}\0".encode(), f"\0{REAPER_ENV}=1\0".encode()
    marked, parents, started = set(), {}, {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in (owner, os.getpid()):
            continue
        pid = int(entry.name)
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat_file:
                fields = stat_file.read().rsplit(b")", 1)[1].split()
            with open(f"/proc/{pid}/environ", "rb") as environ_file:
                environ = b"\0" + environ_file.read()
        except (OSError, IndexError):
            continue  # gone, another user's, or a kernel thread
        if reaper in environ:
            continue
        parents[pid], started[pid] = int(fields[1]), int(fields[19])
        if mark in environ:
            marked.add(pid)
    found, frontier = set(marked), set(marked)
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return {pid: started[pid] for pid in found}


def _kill(pid: int, started: int) -> None:
    """SIGKILL ``pid`` if it is still the process that started at ``started`` (a pid is reused once its process is
    reaped: the process found by a scan is held by a pidfd, then checked)."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except OSError:  # no pidfds here: the check and the kill are apart, as they were before pidfds
        with contextlib.suppress(OSError):
            if _start_time(pid) == started:
                os.kill(pid, signal.SIGKILL)
        return
    try:
        if _start_time(pid) == started:
            signal.pidfd_send_signal(handle, signal.SIGKILL)
    except OSError:
        pass  # ended meanwhile
    finally:
        os.close(handle)


def reap(owner: int, folders: list[Path]) -> None:
    """Wait for ``owner`` to end, then kill what it left (:func:`marked_processes`) and remove ``folders`` and those
    listed in them (:func:`remove_with_owner`)."""
    import shutil  # here: the shim imports this module on every call

    try:
        ended = os.pidfd_open(owner)
        select.select([ended], [], [])
    except OSError:  # gone already, or no pidfds here: poll
        while _alive(owner):
            time.sleep(0.5)
    deadline, quiet = time.monotonic() + REAP_S, 0
    while quiet < REAP_QUIET_SCANS and time.monotonic() < deadline:
        left = marked_processes(owner)
        for pid, started in left.items():
            _kill(pid, started)
        quiet = 0 if left else quiet + 1
        time.sleep(0.1)
    listed = [folder / REMOVE_LIST for folder in folders if (folder / REMOVE_LIST).is_file()]
    extra = [Path(line) for path in listed for line in path.read_text().split("\n") if line]
    temp = {Path(tempfile.gettempdir()).resolve(), Path("/tmp").resolve()}  # Ray's folders are in /tmp (short paths)
    for path in [*folders, *extra]:
        if temp & set(path.resolve().parents):  # never anything outside the temp folders, whatever the list says
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(Path(sys.argv[2]), sys.argv[3])
    elif sys.argv[1:2] == ["--reap"]:
        reap(int(sys.argv[2]), [Path(path) for path in sys.argv[3:]])
    else:
        client_main(sys.argv[1:])
