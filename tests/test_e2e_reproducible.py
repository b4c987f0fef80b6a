"""Same seed, same run: ``grpo_run``'s first run, launched again with the same overrides, logs the same
rollouts, rewards, step labels, per-step metrics and validation answers; another seed samples other rollouts
(compared with ``servers_gone_run``, which samples at seed 3).

The first run is one of a sweep (it joins the test process's Ray cluster, after or beside other runs, its processes
forked from warm interpreters, as benchmarks/fspo_vs_grpo.py's runs are); the second runs alone, as ``fspo
quickstart`` and a GPU user start one: its own Ray, a fresh interpreter, Ray's own workers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.e2e

STEPS = 2  # grpo_run's first run


# What makes a launch from the test process join its cluster and fork from warm servers (conftest's
# warm_ray_workers, fspo_testing.shared_ray.joining_env): a run alone has none of them.
SWEEP_VARIABLES = ("RAY_ADDRESS", "RAY_RUNTIME_ENV_HOOK", "FSPO_WARM_PYTHON", "FSPO_WARM_OWNER")


@pytest.fixture(scope="module")
def seeded_runs(grpo_run, tmp_path_factory):
    """``grpo_run``'s first run and a second launch of its overrides, alone (one more Ray start and tiny run)."""
    import sys

    from fspo.quickstart.launch import launch

    again = tmp_path_factory.mktemp("reproducible")
    with pytest.MonkeyPatch.context() as env:
        for name in SWEEP_VARIABLES:
            env.delenv(name, raising=False)
        records = launch(
            [*grpo_run["first_overrides"](again), "platform=cpu"],
            again / "first.log",
            again / "first.jsonl",
            python=sys.executable,
        )
    assert "Started a local Ray instance" in (again / "first.log").read_text()  # not the test process's cluster
    return {
        "first": {"records": grpo_run["first"], "out": grpo_run["out"]},
        "again": {"records": records, "out": again},
    }


def _jsonl_rows(folder: Path, step: int) -> list[str]:
    """One dump's rows, each as canonical JSON, in a fixed order. verl names a row by its prompt's uid, a
    fresh uuid4 in every run, and writes the rows sorted by it: the uid is left out, the rollout's index in
    its group (``<uid>_<index>_<turn>``) kept, and so are the verifier's seconds."""
    rows = []
    for line in (folder / f"{step}.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if "uid" in row:
                row["uid"] = str(row["uid"]).partition("_")[2]
            kept = {key: value for key, value in row.items() if not measures_the_clock_or_memory(key)}
            rows.append(json.dumps(kept, sort_keys=True))
    return sorted(rows)


def measures_the_clock_or_memory(key: str) -> bool:
    """Wall-clock and memory figures (``timing_s/step``, ``actor/perf/cpu_memory_used_gb``,
    ``fspo/verifier_seconds``, ...): the only ones two runs of the same seed may differ in."""
    return key.startswith(("timing", "perf/")) or "/perf/" in key or "seconds" in key


def step_metrics(records: list[dict]) -> list[dict]:
    """Each logged record's metrics without the clock and memory ones."""
    return [
        {key: value for key, value in record["data"].items() if not measures_the_clock_or_memory(key)}
        for record in records
    ]


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def test_same_seed_gives_the_same_rollouts_and_rewards(seeded_runs):
    first, again = seeded_runs["first"]["out"], seeded_runs["again"]["out"]
    for step in range(1, STEPS + 1):
        rows = _jsonl_rows(first / "rollouts", step)
        assert len(rows) == 8  # 2 prompts x 4 rollouts
        assert rows == _jsonl_rows(again / "rollouts", step), f"step {step}: rollouts differ"


def test_same_seed_gives_the_same_step_labels_and_advantages(seeded_runs):
    first, again = seeded_runs["first"]["out"], seeded_runs["again"]["out"]
    for step in range(1, STEPS + 1):
        one, other = (torch.load(run / "dump" / f"step_{step}.pt") for run in (first, again))
        for key in ("advantages_before", "advantages", "labels", "response_mask"):
            # Row by row: FSPO's trainer puts a batch in the order its prompts were drawn
            # (fspo.training.trainer.canonical_row_order), not in the order verl stored the rollouts.
            assert torch.equal(one[key], other[key]), f"step {step}: {key} differ"


def test_same_seed_gives_the_same_metrics_and_validation_answers(seeded_runs):
    one, other = (step_metrics(seeded_runs[run]["records"]) for run in ("first", "again"))
    assert len(one) == len(other) == STEPS
    for step, (a, b) in enumerate(zip(one, other), start=1):
        assert a.keys() == b.keys()
        differing = {key: (a[key], b[key]) for key in a if not _same(a[key], b[key])}
        assert not differing, f"step {step}: {differing}"
    assert any(key.startswith("val") for key in one[-1])  # the last record holds the validation
    answers = _jsonl_rows(seeded_runs["first"]["out"] / "validation", STEPS)
    assert answers == _jsonl_rows(seeded_runs["again"]["out"] / "validation", STEPS)


def test_another_seed_samples_other_rollouts(seeded_runs, servers_gone_run):
    """``servers_gone_run`` samples step 1 from the same model, prompts, prompt order, temperature and length as
    ``grpo_run``, at seed 3 instead of verl's default (42); what differs after sampling (its verifier, its
    reward's use) cannot reach step 1's rollouts. A seed that did not reach the sampler would give equal outputs."""
    rollouts = [
        _jsonl_rows(seeded_runs["first"]["out"] / "rollouts", 1),
        _jsonl_rows(servers_gone_run["out"] / "rollouts", 1),
    ]
    outputs = [{json.loads(row)["output"] for row in rows} for rows in rollouts]
    assert outputs[0] != outputs[1]


def test_the_runs_leave_the_cluster_they_joined_free(grpo_run):
    """``grpo_run``'s two runs joined this process's Ray cluster (fspo_testing/shared_ray.py), one after another: Ray freed
    each job's placement groups and actors when its driver exited, so the next run found every logical CPU and GPU."""
    import psutil

    from fspo_testing.shared_ray import (
        QUIET_DAEMONS,
        leftovers,
        logs_folder,
        retire_dead_workers_logs,
        shared_cluster,
    )

    assert leftovers() == {}

    # The dead workers' log files leave the folder the log monitor reads every 0.1 s.
    from ray._private.log_monitor import WORKER_LOG_PATTERN

    def dead(path):
        found = WORKER_LOG_PATTERN.match(path.name)
        return found is not None and not Path(f"/proc/{found.group(2)}").exists()

    dead_before = [path.name for path in logs_folder().glob("worker-*") if dead(path)]
    retire_dead_workers_logs()
    assert not [name for name in dead_before if (logs_folder() / name).exists()]
    assert list((logs_folder() / "old").glob("worker-*"))  # kept there, as Ray keeps those it retires itself
    # Its daemons run at the pace set for a long-lived cluster.
    [monitor] = [
        process
        for process in psutil.process_iter(["cmdline"])
        if any(part.endswith("log_monitor.py") for part in process.info["cmdline"] or ())
        and f"--gcs-address={shared_cluster()}" in process.info["cmdline"]
    ]
    assert QUIET_DAEMONS.items() <= monitor.environ().items()
