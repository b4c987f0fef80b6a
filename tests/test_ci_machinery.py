"""What makes the suite fit CI's budget: the xdist grouping and order, the build cache, the warm interpreter and
the trainer-run ledger (fspo_testing/scheduling.py, build_cache.py, warm_python.py; fspo/training/run_ledger.py)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fspo.training.run_ledger import LEDGER_ENV, ledger_entry
from fspo_testing import background, build_cache, shared_ray
from fspo_testing import warm_python as warm
from fspo_testing.allocator import ALLOCATOR_VARIABLES, reuse_freed_memory
from fspo_testing.scheduling import (
    THREAD_VARIABLES,
    ordered_by_cost,
    share_the_cores,
    shared_fixture_groups,
    threads_per_worker,
)
from fspo_testing.warm_python import (
    BASE,
    CORE,
    PRELOAD_ENV,
    TRAINER_MODULE,
    base_environment,
    core_environment,
    environment_key,
    ray_runtime_env_hook,
    warm_python,
)

# --- scheduling: stand-ins carry exactly the attributes of a pytest item the scheduler reads ------------------------


def _item(nodeid: str, module: str, fixtures: dict[str, str], e2e: bool = False):
    """A test item using ``fixtures`` (name -> scope) of the project's own (non-empty baseid)."""
    definitions = {name: [SimpleNamespace(scope=scope, baseid="tests")] for name, scope in fixtures.items()}
    return SimpleNamespace(
        nodeid=nodeid,
        module=SimpleNamespace(__name__=module),
        fixturenames=[*fixtures, "tmp_path"],
        _fixtureinfo=SimpleNamespace(
            name2fixturedefs={**definitions, "tmp_path": [SimpleNamespace(scope="function", baseid="")]}
        ),
        get_closest_marker=lambda name, e2e=e2e: object() if (e2e and name == "e2e") else None,
    )


def test_tests_sharing_an_expensive_fixture_share_a_group_transitively():
    items = [
        _item("a.py::1", "a", {"run": "module"}),
        _item("a.py::2", "a", {"run": "module", "other": "module"}),
        _item("a.py::3", "a", {"other": "module"}),
        _item("a.py::4", "a", {}),
        _item("b.py::1", "b", {"run": "module"}),  # another module's fixture of the same name: another instance
        _item("c.py::1", "c", {"grpo": "session"}),
        _item("d.py::1", "d", {"grpo": "session", "cheap": "session"}),
        _item("e.py::1", "e", {"cheap": "session"}),
    ]
    groups = shared_fixture_groups(items, cheap=["cheap"])
    assert groups["a.py::1"] == groups["a.py::2"] == groups["a.py::3"]
    assert "a.py::4" not in groups and "e.py::1" not in groups
    assert groups["b.py::1"] != groups["a.py::1"]
    assert groups["c.py::1"] == groups["d.py::1"]


@given(st.lists(st.tuples(st.integers(0, 5), st.floats(0, 1000), st.booleans()), max_size=30))
def test_work_goes_out_longest_unit_first_and_no_test_is_lost(spec):
    items = [_item(f"t{i}", "m", {}, e2e) for i, (_, _, e2e) in enumerate(spec)]
    groups = {f"t{i}": f"g{g}" for i, (g, _, _) in enumerate(spec) if g}
    seconds = {f"t{i}": s for i, (_, s, _) in enumerate(spec)}
    ordered = ordered_by_cost(items, groups, seconds)
    assert sorted(i.nodeid for i in ordered) == sorted(i.nodeid for i in items)
    units, costs = [], []
    for item in ordered:
        unit = groups.get(item.nodeid, item.nodeid)
        if not units or units[-1] != unit:
            assert unit not in units, "a group's tests must go out together"
            units.append(unit)
            costs.append(0.0)
        costs[-1] += seconds[item.nodeid]
    assert costs == sorted(costs, reverse=True)


# --- the build cache ------------------------------------------------------------------------------------------------


def _slow_builder(output_dir, size: int = 3, source: Path | None = None) -> dict:
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / "sub").mkdir(exist_ok=True)
    (output_dir / "sub" / "data.txt").write_text("x" * size + (source.read_text() if source else ""))
    (output_dir / "link").symlink_to("sub/data.txt")
    with open(os.environ["FSPO_TEST_BUILD_COUNT"], "a") as count:
        count.write("built\n")
    return {"root": output_dir, "data": output_dir / "sub" / "data.txt", "sizes": [size]}


_cached_slow_builder = build_cache.cached_build(_slow_builder)


def _build_in_a_process(target: str) -> str:
    return str(_cached_slow_builder(target)["data"])


@given(workers=st.integers(1, 64), cores=st.integers(1, 256))
def test_workers_never_ask_for_more_threads_than_cores_and_each_gets_one(workers, cores):
    threads = threads_per_worker(workers, cores)
    assert threads >= 1
    assert workers * threads <= cores or threads == 1


def test_an_xdist_worker_and_what_it_starts_compute_on_its_share_and_a_users_setting_stays():
    cores = len(os.sched_getaffinity(0))
    env = {"PYTEST_XDIST_WORKER_COUNT": "2", "FSPO_CPU_THREADS": "3"}
    assert share_the_cores(env) == max(1, cores // 2)
    assert {name: env[name] for name in THREAD_VARIABLES} == {
        "OMP_NUM_THREADS": str(max(1, cores // 2)),
        "MKL_NUM_THREADS": str(max(1, cores // 2)),
        "FSPO_CPU_THREADS": "3",
    }
    assert share_the_cores({}) is None  # not under xdist: torch's default
    child = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(child.stdout) == max(1, cores // 2)


# A child that page-faults: a 256 MB block malloc'ed, written and freed twice (glibc's own policy), then, with
# "torch" as its argument, a fresh 64 MB torch tensor. It prints the page faults of each.
_FAULTS_PROBE = """
import ctypes, json, resource, sys
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
found = {}
if sys.argv[1:] == ["torch"]:
    import torch
    before = faults(); tensor = torch.ones(16 << 20); found["torch"] = faults() - before
for cycle in ("first", "second"):
    before = faults(); block = libc.malloc(256 << 20); ctypes.memset(block, 1, 256 << 20); libc.free(block)
    found[cycle] = faults() - before
print(json.dumps(found))
"""


def _faults(env: dict[str, str], *args: str) -> dict[str, int]:
    child = subprocess.run([sys.executable, "-c", _FAULTS_PROBE, *args], env=env, capture_output=True, text=True)
    assert child.returncode == 0, child.stderr
    return json.loads(child.stdout)


def test_what_the_suite_starts_reuses_freed_memory_and_puts_torchs_blocks_on_huge_pages():
    pages = (256 << 20) // 4096
    assert {name: os.environ[name] for name in ALLOCATOR_VARIABLES} == reuse_freed_memory(dict(os.environ))
    suite = _faults(dict(os.environ), "torch")
    assert suite["first"] >= pages // 2  # a block's first use faults its pages in
    assert suite["second"] < pages // 100  # ... and its reuse does not: free() kept it
    assert suite["torch"] < (64 << 20) // 4096 // 10  # 2 MB pages: ~600 faults here, where 4 KiB pages take 16,400
    glibcs_own = _faults({k: v for k, v in os.environ.items() if k not in ALLOCATOR_VARIABLES})
    assert glibcs_own["second"] >= pages // 2  # the probe sees the difference: by default the block went back


def test_cached_build_builds_once_per_key_and_copies_with_paths_moved(tmp_path, monkeypatch):
    monkeypatch.setenv("FSPO_TEST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FSPO_TEST_BUILD_COUNT", str(tmp_path / "count"))
    first = _cached_slow_builder(tmp_path / "one")
    second = _cached_slow_builder(tmp_path / "two")
    assert second == {"root": tmp_path / "two", "data": tmp_path / "two" / "sub" / "data.txt", "sizes": [3]}
    assert first["data"].read_text() == second["data"].read_text() == "xxx"
    assert (tmp_path / "two" / "link").is_symlink() and (tmp_path / "two" / "link").read_text() == "xxx"
    assert (tmp_path / "count").read_text().count("built") == 1
    _cached_slow_builder(tmp_path / "three", size=4)  # another argument, another key
    source = tmp_path / "source.txt"
    source.write_text("a")
    _cached_slow_builder(tmp_path / "four", source=source)
    source.write_text("b")  # the same path with other contents: another key
    assert _cached_slow_builder(tmp_path / "five", source=source)["data"].read_text() == "xxxb"
    assert (tmp_path / "count").read_text().count("built") == 4


def test_concurrent_builders_of_one_key_build_once(tmp_path, monkeypatch):
    monkeypatch.setenv("FSPO_TEST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("FSPO_TEST_BUILD_COUNT", str(tmp_path / "count"))
    with ProcessPoolExecutor(2) as pool:
        paths = list(pool.map(_build_in_a_process, [str(tmp_path / f"out{i}") for i in range(4)]))
    assert all(Path(path).read_text() == "xxx" for path in paths)
    assert (tmp_path / "count").read_text().count("built") == 1


# --- commands run beside the suite ----------------------------------------------------------------------------------


def _counted_command(folder: Path):
    (folder / "input").write_text("made by the builder\n")
    script = 'echo run >> "$COUNT"; cat "$1"; echo to-stderr >&2; exit 3'
    return ["bash", "-c", script, "counted", str(folder / "input")], {
        **os.environ,
        "COUNT": str(folder.parent / "count"),
    }


def _sleeping_command(folder: Path):
    return ["sleep", "600"], dict(os.environ)


def _unbuildable_command(folder: Path):
    raise RuntimeError("no such tool")


def test_a_background_command_runs_once_for_every_process_that_claims_it_and_stops_with_the_session(tmp_path):
    with ProcessPoolExecutor(2) as pool:  # two "workers" collect the same test at once
        started = list(pool.map(background.start, [_counted_command] * 4, [tmp_path] * 4))
    assert started.count(True) == 1
    done = background.result(_counted_command, timeout_s=60, root=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (3, "made by the builder\n", "to-stderr\n")
    assert (tmp_path / "count").read_text() == "run\n"

    failed = background.result(_unbuildable_command, timeout_s=5, root=tmp_path)
    assert failed.returncode == 1 and "no such tool" in failed.stderr

    background.start(_sleeping_command, tmp_path)
    pid = int((background.folder(_sleeping_command, tmp_path) / "pid").read_text())
    background.stop_all(tmp_path, keep_output=True)
    with pytest.raises(TimeoutError):
        background.result(_sleeping_command, timeout_s=2, root=tmp_path)
    with contextlib.suppress(ChildProcessError):  # this process started it: reap it (unless subprocess has)
        os.waitpid(pid, 0)
    assert not psutil.pid_exists(pid)
    background.stop_all(tmp_path, keep_output=False)
    assert not tmp_path.exists()


@pytest.mark.parametrize("pidfds", [True, False])
def test_the_reaper_kills_a_process_only_while_its_start_time_names_it(monkeypatch, pidfds):
    """A pid is reused once its process is reaped: the reaper kills the process its scan found (its start time
    matches), not another that took the pid; with or without pidfds (kernels before 5.3, some sandboxes)."""
    import errno

    if not pidfds:
        monkeypatch.setattr(os, "pidfd_open", mock.Mock(side_effect=OSError(errno.ENOSYS, "no pidfds")))
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) as sleeper:
        started = warm._start_time(sleeper.pid)
        warm._kill(sleeper.pid, started + 1)
        time.sleep(0.2)
        assert sleeper.poll() is None
        warm._kill(sleeper.pid, started)
        assert sleeper.wait(10) == -9


def _owner_command(folder: Path):
    worker = {"FSPO_WARM_OWNER": str(os.getpid()), "FSPO_WARM_PYTHON": "/tmp/x/python", "RAY_RUNTIME_ENV_HOOK": "m.f"}
    return ["bash", "-c", 'echo "$FSPO_WARM_OWNER:$FSPO_WARM_PYTHON:$RAY_RUNTIME_ENV_HOOK"'], {**os.environ, **worker}


def test_a_background_command_is_owned_by_the_sessions_controller(tmp_path, monkeypatch):
    """Its warm-server owner is the controller, which stops it, not the worker that started it: that worker's reaper
    would kill it, and remove the worker's warm interpreter, when xdist shuts the worker down while another worker's
    test still waits for the result."""
    monkeypatch.setenv(background.OWNER_ENV, "4242")
    assert background.result(_owner_command, timeout_s=30, root=tmp_path).stdout == "4242::\n"


# --- the warm interpreter -------------------------------------------------------------------------------------------


def test_the_servers_key_follows_only_what_imports_may_read():
    base = {"PATH": "/bin", "HF_HUB_CACHE": "/a", "FSPO_DRY_RUN": "1", "MODEL_PATH": "/m"}
    assert environment_key(base) == environment_key({**base, "FSPO_DRY_RUN": "0", "MODEL_PATH": "/other"})
    assert environment_key(base) == environment_key({**base, "VERL_FILE_LOGGER_PATH": "/run/metrics.jsonl"})
    assert environment_key(base) != environment_key({**base, "HF_HUB_CACHE": "/b"})
    assert environment_key(base) != environment_key({**base, "VERL_PLATFORM": "cpu"})


@given(
    kind=st.sampled_from(sorted(warm.IDLE_S)),
    idle_s=st.floats(0, 1000),
    later_s=st.floats(0, 1000),
    available=st.floats(0, 1),
    less=st.floats(0, 1),
)
def test_an_idle_server_ends_sooner_only_while_memory_is_short(kind, idle_s, later_s, available, less):
    def ends(idle, fraction):
        with mock.patch.object(warm, "available_memory_fraction", return_value=fraction):
            return warm._idle_long_enough(kind, idle)

    if idle_s <= warm.SHORT_MEMORY_IDLE_S:  # a caller's next request a few seconds later finds it
        assert not ends(idle_s, available)
    if idle_s > warm.IDLE_S[kind]:
        assert ends(idle_s, available)
    if available >= warm.KEEP_AVAILABLE:  # memory to spare: the full idle time
        assert ends(idle_s, available) == (idle_s > warm.IDLE_S[kind])
    if ends(idle_s, available):  # idle longer, or less memory available: ends too
        assert ends(idle_s + later_s, available * less)


def test_available_memory_is_a_share_of_the_machine_s():
    assert 0 < warm.available_memory_fraction() <= 1


def test_a_warm_dry_run_answers_as_a_cold_interpreter_does(tmp_path):
    """The same refusal and exit status; the second call is served by the server the first one started."""
    env = {**os.environ, "FSPO_DRY_RUN": "1"}
    command = ["-m", "fspo.training.main", "platform=cpu", f"actor_rollout_ref.model.path={tmp_path / 'absent'}"]
    cold = subprocess.run([sys.executable, *command], env=env, capture_output=True, text=True, cwd=tmp_path)
    warm = [subprocess.run([warm_python(), *command], env=env, capture_output=True, text=True, cwd=tmp_path)]
    started = time.monotonic()
    warm.append(subprocess.run([warm_python(), *command], env=env, capture_output=True, text=True, cwd=tmp_path))
    served_s = time.monotonic() - started
    for process in warm:
        assert process.returncode == cold.returncode == 2
        assert process.stderr.strip().splitlines()[-1] == cold.stderr.strip().splitlines()[-1]
        assert "does not exist" in process.stderr
    assert served_s < 30, f"a served dry run took {served_s:.1f} s"


def test_a_warm_program_on_stdin_runs_as_python_dash_runs_it(tmp_path):
    """`python - ARGS` (scripts/merge_checkpoint.sh's checks): the same name, argv, path, environment and exit; the
    warm one ran in a server that had imported torch."""
    program = (
        "import os, sys\nprint(__name__, sys.argv, repr(sys.path[0]), os.environ['PROBE'])\n"
        "print('torch' in sys.modules, file=sys.stderr)\nsys.exit(3)\n"
    )
    env = {**os.environ, "PROBE": "given"}
    runs = [
        subprocess.run([python, "-", "a b", "c"], input=program, env=env, capture_output=True, text=True, cwd=tmp_path)
        for python in (sys.executable, warm_python())
    ]
    assert runs[0].returncode == runs[1].returncode == 3, runs[1].stderr[-2000:]
    assert runs[0].stdout == runs[1].stdout == "__main__ ['-', 'a b', 'c'] '' given\n"
    assert (runs[0].stderr, runs[1].stderr) == ("False\n", "True\n")


def test_callers_that_differ_in_variables_the_core_does_not_read_share_a_core_and_each_see_their_own(tmp_path):
    """Two callers with their own hub caches, PATH and vLLM variable: each warm program sees its cache where
    huggingface_hub read it at import, and its own PATH and variable; their base servers are two, forked from one
    core server (which imported no Hugging Face library)."""
    program = (
        "import huggingface_hub.constants as c, os, shutil, sys\n"
        "print(c.HF_HUB_CACHE, shutil.which('probe'), os.environ['VLLM_LOGGING_LEVEL'], 'torch' in sys.modules)\n"
    )
    envs = []
    for name in ("a", "b"):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "probe").write_text("#!/bin/sh\n")
        (folder / "probe").chmod(0o755)
        path = f"{folder}{os.pathsep}{os.environ['PATH']}"
        envs.append({**os.environ, "HF_HUB_CACHE": str(folder), "PATH": path, "VLLM_LOGGING_LEVEL": name})
    runs = [
        subprocess.run([warm_python(), "-"], input=program, env=env, capture_output=True, text=True, cwd=tmp_path)
        for env in envs
    ]
    for run, env, name in zip(runs, envs, ("a", "b"), strict=True):
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout == f"{env['HF_HUB_CACHE']} {tmp_path / name / 'probe'} {name} True\n"
    folder = Path(tempfile.gettempdir()) / f"fspo-warm-{os.environ['FSPO_WARM_OWNER']}"
    bases = {folder / f"{BASE}-{environment_key(base_environment(env))}.sock" for env in envs}
    cores = {folder / f"{CORE}-{environment_key(core_environment(env))}.sock" for env in envs}
    assert len(bases) == 2 and len(cores) == 1
    assert all(path.exists() for path in (*bases, *cores))


def test_only_a_trainer_runs_workers_are_marked_for_a_server_that_imported_verl(monkeypatch):
    import importlib.machinery
    import types

    monkeypatch.setenv("FSPO_WARM_PYTHON", "/shim")
    monkeypatch.setenv("FSPO_WARM_OWNER", "1")
    monkeypatch.delitem(sys.modules, TRAINER_MODULE, raising=False)
    given_env = {"env_vars": {"A": "1"}}
    assert ray_runtime_env_hook(given_env) == {"env_vars": {"A": "1"}, "py_executable": "/shim"}
    main = types.ModuleType("__main__")  # `python -m fspo.training.main`
    main.__spec__ = importlib.machinery.ModuleSpec(TRAINER_MODULE, None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    marked = ray_runtime_env_hook(given_env)
    assert marked["env_vars"] == {"A": "1", PRELOAD_ENV: TRAINER_MODULE} and given_env == {"env_vars": {"A": "1"}}
    assert environment_key(marked["env_vars"]) != environment_key(given_env["env_vars"])
    assert ray_runtime_env_hook({"py_executable": "/own"}) == {"py_executable": "/own"}  # a job's own interpreter


# --- the ledger ----------------------------------------------------------------------------------------------------


def test_the_ledger_records_a_run_with_the_cpu_of_its_children(tmp_path, monkeypatch):
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    burn = "import time\nend = time.process_time() + 3\nwhile time.process_time() < end: pass"
    with ledger_entry("project/run"):
        subprocess.run(
            [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}])"],
            check=True,
        )
    with pytest.raises(RuntimeError), ledger_entry("project/failed"):
        raise RuntimeError("the run failed")
    first, second = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert first["run"] == "project/run" and first["outcome"] == "ok"
    assert first["test"].endswith("test_the_ledger_records_a_run_with_the_cpu_of_its_children")
    assert 1.0 <= first["cpu_s"] and first["wall_s"] >= 1.0
    assert second["outcome"] == "error"


_BURN_BEFORE_AND_DURING = """
import sys, time, pathlib
def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end: pass
burn(2)
folder = pathlib.Path(sys.argv[1])
(folder / "burnt").touch()
while not (folder / "go").exists(): time.sleep(0.05)
burn(2)
(folder / "burnt again").touch()
time.sleep(120)  # alive at the run's last sample: a process that ends between two samples loses up to one interval
"""


def test_a_run_that_joins_a_cluster_counts_its_workers_from_the_run_s_start(tmp_path, monkeypatch):
    """A run that joins a cluster (RAY_ADDRESS) counts the CPU that cluster's workers on this machine spend while it
    runs: found through the raylet whose GCS is at that address, each from its CPU time when the run started."""
    ledger, address = tmp_path / "ledger.jsonl", "10.9.8.7:6379"
    raylet_exe = tmp_path / "raylet"  # a process named as Ray's raylet is, with its --gcs-address
    raylet_exe.symlink_to(sys.executable)
    raylet = subprocess.Popen([str(raylet_exe), "-c", "import time; time.sleep(120)", f"--gcs-address={address}"])
    worker = subprocess.Popen(
        [sys.executable, "-c", _BURN_BEFORE_AND_DURING, str(tmp_path)],
        env={**os.environ, "RAY_RAYLET_PID": str(raylet.pid)},
        start_new_session=True,  # outside this process's tree, as a joined cluster's workers are
    )
    try:
        while not (tmp_path / "burnt").exists():
            time.sleep(0.05)
        monkeypatch.setenv(LEDGER_ENV, str(ledger))
        monkeypatch.setenv("RAY_ADDRESS", address)
        with ledger_entry("project/joined"):
            (tmp_path / "go").touch()
            while not (tmp_path / "burnt again").exists():
                time.sleep(0.05)
    finally:
        for process in (raylet, worker):
            process.kill()
            process.wait()
    [record] = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert 1.8 <= record["cpu_s"] < 3.5, record  # its 2 s during the run, not the 2 s before


def test_no_ledger_no_file(tmp_path, monkeypatch):
    monkeypatch.delenv(LEDGER_ENV, raising=False)
    with ledger_entry("project/run"):
        pass
    assert list(tmp_path.iterdir()) == []


_RAY_DRIVER = """
import gc, json, os, sys, threading, time
import numpy, psutil, ray, torch
from fspo.training.run_ledger import _TreeCPU

def init():
    ray.init(
        num_cpus=1, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
        # As the hook marks a trainer run's workers: their server imports verl (and declares its actor classes) first.
        runtime_env={"env_vars": {"FSPO_PROBE": "1", "FSPO_WARM_PRELOAD": "fspo.training.main"}},
    )


init()


@ray.remote(num_cpus=0)
class Probe:
    def facts(self):
        verl_before = "verl" in sys.modules
        import verl.workers.engine  # noqa: F401 - as the trainer's workers do (it sets TORCH_CUDA_ARCH_LIST)
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_JOB_ID", "RAY_RAYLET_PID")}
        thread_task = []  # Ray gives a new thread a random task id: siblings forked from one server must differ
        worker = threading.Thread(target=lambda: thread_task.append(ray.get_runtime_context().get_task_id()))
        worker.start()
        worker.join()
        return {"pid": os.getpid(), "ppid": os.getppid(), "own_group": os.getpgid(0) == os.getpid(),
                "thread_task": thread_task[0], "numpy": int(numpy.random.randint(2**31)),
                "torch_seed": torch.initial_seed(), "verl_before": verl_before,
                "random_id": ray.ActorClassID.from_random().hex(),
                "argv0": sys.argv[0], "path0": sys.path[0], "cwd": os.getcwd(), "env": env,
                "parent": " ".join(psutil.Process(os.getppid()).cmdline()), "frozen": gc.get_freeze_count(),
                "parent_name": open(f"/proc/{os.getppid()}/comm").read().strip(),
                "name": open("/proc/self/comm").read().strip()}

    def die(self):
        os._exit(3)


def start(**options):
    probe = Probe.options(**options).remote()
    started = time.monotonic()
    return probe, ray.get(probe.facts.remote()), time.monotonic() - started


with _TreeCPU() as tree:
    cold, cold_facts, _ = start(runtime_env={"py_executable": sys.executable})
    first, sibling = Probe.remote(), Probe.remote()  # started together, as verl starts a worker group
    first_facts, sibling_facts = ray.get([first.facts.remote(), sibling.facts.remote()])
    first.die.remote()
    time.sleep(2)
    second, second_facts, second_s = start()
raylet = next(p for p in psutil.Process().children(recursive=True) if p.name() == "raylet")
# The processes Ray started (the setup step's stand-in, which became the worker's shim's caller): killing them, as
# Ray kills a worker's process, must take the forked setup step, its shim and the forked worker with them.
shims = [p for p in raylet.children() if any("warm_" in part for part in p.cmdline())]
for shim in shims:
    shim.kill()
def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# The server sees a killed caller at its next poll (0.05 s); a loaded machine (CI ran it beside a trainer run and
# missed a fixed 3 s once) may delay that, never forever.
deadline = time.monotonic() + 30
while alive(second_facts["pid"]) and time.monotonic() < deadline:
    time.sleep(0.1)
second_alive = alive(second_facts["pid"])
ray.shutdown()
init()  # the same environment, another cluster
_, next_facts, _ = start()
print("RESULT", json.dumps({
    "next": next_facts, "second_alive": second_alive,
    "cold": cold_facts, "first": first_facts, "sibling": sibling_facts, "second": second_facts, "second_s": second_s,
    "counted": sorted(pid for pid, _ in tree._seen), "shims": len(shims),
}))
"""


def test_ray_workers_forked_warm_start_as_cold_ones_and_go_with_the_process_ray_started(tmp_path, monkeypatch):
    """A worker forked from the warm server (tests/conftest.py sets the hook), one that imported verl before forking
    as a trainer run's does, after Ray's setup step forked from a server of its own, sees what a cold one sees and draws its own random ids, is in a
    process group of its own (Ray kills a dead worker's group: the server and its other workers survive), is
    counted by the ledger, and dies with the process Ray started for it; the next cluster gets a server of its own,
    forked, as the first, from the base server that imported the libraries once."""
    monkeypatch.setenv("RAY_TMPDIR", str(Path(tempfile.mkdtemp(prefix="fspo-ray-", dir="/tmp"))))
    process = subprocess.run(
        [sys.executable, "-c", _RAY_DRIVER], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert process.returncode == 0, process.stderr[-3000:]
    facts = json.loads(process.stdout.split("RESULT ", 1)[1].splitlines()[0])
    cold, first, second = facts["cold"], facts["first"], facts["second"]
    assert first["ppid"] == second["ppid"] != cold["ppid"]  # one server forked both; it outlived the first's death
    # Ray's setup step (setup_worker.py, which execs the worker's interpreter) ran forked for the cold one too.
    assert "--serve" in cold["parent"] and "ray-setup-" in cold["parent"], cold["parent"]
    # The worker's server was forked from a base server, itself forked from the core server that imported torch.
    assert first["parent_name"] == "fspo-ray-worker" and " core" in first["parent"], first
    assert first["name"] == cold["name"], (first["name"], cold["name"])  # not the server's
    assert first["own_group"] and second["own_group"]
    for key in ("argv0", "path0", "cwd", "env"):
        assert first[key] == cold[key], key
    sibling = facts["sibling"]
    assert sibling["ppid"] == first["ppid"]
    for key in ("thread_task", "random_id", "numpy", "torch_seed"):  # drawn afresh in each worker, as in a cold one
        assert first[key] != sibling[key], key
    assert first["env"]["FSPO_PROBE"] == "1"
    assert first["verl_before"] and not cold["verl_before"]  # the server had imported it; siblings' ids still differ
    # What the server imported is out of the garbage collector's sight: a collection in a worker would write to every
    # object's header and copy the server's pages into the worker (one twin: 97 -> 86 CPU-s without that).
    assert first["frozen"] > 10_000 and cold["frozen"] == 0
    assert facts["second_s"] < 10, f"a warm worker took {facts['second_s']:.1f} s to answer"
    assert second["pid"] in facts["counted"]  # alive at the ledger's last sample (the first may die between two)
    assert facts["shims"] >= 1 and not facts["second_alive"]
    # The next cluster's worker comes from a server of its own: one started under the first cluster would hand it
    # that cluster's raylet, and the worker would exit at once.
    assert facts["next"]["ppid"] != first["ppid"] and facts["next"]["env"]["FSPO_PROBE"] == "1"
    assert facts["next"]["parent"] == first["parent"]  # both servers forked from the one base server


def test_the_installed_libraries_come_with_their_bytecode():
    """scripts/setup.sh compiles bytecode as it installs (uv's --compile-bytecode): under PYTHONDONTWRITEBYTECODE,
    which CI's machines set, a library without it is compiled afresh in every process that imports it."""
    import importlib.util

    for name in ("torch", "transformers", "verl", "ray"):
        origin = importlib.util.find_spec(name).origin
        assert Path(importlib.util.cache_from_source(origin)).is_file(), f"{name} was installed without bytecode"


# A process that owns warm servers and a shared Ray cluster, busy in a job when it is ended: the sweep of
# benchmarks/fspo_vs_grpo.py as it was killed mid-run.
_OWNER = """
import time

import ray

from fspo_testing import shared_ray
from fspo_testing.warm_python import warm_ray_workers

warm_ray_workers()
ray.init(address=shared_ray.shared_cluster(), logging_level="ERROR", log_to_driver=False)


@ray.remote(num_cpus=0)
class Busy:
    def run(self):
        time.sleep(600)


busy = Busy.remote()
ray.get(busy.__ray_ready__.remote())
busy.run.remote()
cluster_folder = shared_ray._start_shared()[1]
print("READY", cluster_folder, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("end", ["SIGTERM to its process group", "SIGKILL to it alone"])
def test_an_owner_ended_by_a_signal_leaves_no_process_and_no_folder(tmp_path, end):
    """Killed mid-run with SIGTERM to its group, the sweep left its Ray cluster's head hanging on Ray's drain
    (~30 s, its raylet a zombie), and idle workers, warm servers and their forked workers running for good.
    Whatever ends the owner, its reaper kills every process marked with its pid within seconds and removes the
    servers' and the cluster's folders; a process marked with another owner's pid, and one unmarked, live on. The
    actor's worker starts cold here (no torch to import); Ray's setup step for it runs from a warm server."""
    import select
    import signal

    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    unmarked_env = {k: v for k, v in os.environ.items() if k != "FSPO_WARM_OWNER"}
    with (
        open(tmp_path / "owner.err", "wb") as err,
        subprocess.Popen(
            [sys.executable, "-c", _OWNER],
            stdout=subprocess.PIPE,
            stderr=err,
            cwd=tmp_path,
            start_new_session=True,
            # It joins the cluster it starts (shared_ray.JOINING_AUTH: this xdist worker may have token authentication
            # on, after a local ray.init()); idle workers, as in the sweep.
            env={**os.environ, **shared_ray.JOINING_AUTH, "RAY_prestart_worker_first_driver": "1"},
        ) as owner,
        subprocess.Popen(sleep, env={**unmarked_env, "FSPO_WARM_OWNER": "1"}) as other_owners,
        subprocess.Popen(sleep, env=unmarked_env) as unmarked,
    ):
        try:
            ready, _, _ = select.select([owner.stdout], [], [], 240)
            line = owner.stdout.readline().decode() if ready else ""
            assert line.startswith("READY"), (tmp_path / "owner.err").read_text()[-3000:]
            cluster_folder = Path(line.split()[1])
            commands = []
            for pid in warm.marked_processes(owner.pid):
                with contextlib.suppress(psutil.Error):
                    commands.append(" ".join(psutil.Process(pid).cmdline()))
            assert any("gcs_server" in c for c in commands) and any("raylet" in c for c in commands), commands
            assert any("--serve" in c and "ray-setup-" in c for c in commands), commands  # a warm server
            if end.startswith("SIGTERM"):
                os.killpg(owner.pid, signal.SIGTERM)
            else:
                os.kill(owner.pid, signal.SIGKILL)
            owner.wait(30)
            # Ray's own stop waits 30 s on its drain; the reaper kills at once (20 s: a loaded machine).
            deadline = time.monotonic() + 20
            while warm.marked_processes(owner.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not warm.marked_processes(owner.pid)
            deadline = time.monotonic() + 20
            while (warm.servers_folder(owner.pid).exists() or cluster_folder.exists()) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not warm.servers_folder(owner.pid).exists() and not cluster_folder.exists()
            assert other_owners.poll() is None and unmarked.poll() is None
        finally:
            for process in (owner, other_owners, unmarked):
                process.kill()
            for pid in warm.marked_processes(owner.pid):
                with contextlib.suppress(psutil.Error):
                    psutil.Process(pid).kill()
