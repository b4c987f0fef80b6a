"""Same seed, same run: two CPU runs of the real trainer at one seed log the same rollouts, rewards, step
labels, per-step metrics and validation answers; another seed samples other rollouts (compared with the shared
``grpo_run``, which samples at verl's default seed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.e2e

STEPS = 2


def _launch(setup: dict, out: Path, seed: int, steps: int) -> dict:
    from fspo.quickstart.launch import launch
    from fspo_testing.tiny_run import tiny_run_overrides

    overrides = tiny_run_overrides(setup, out, steps) + [
        f"actor_rollout_ref.rollout.seed={seed}",
        # verl writes each step's rollouts (prompt, response, reward) and each validation's answers
        # (with the verifier's figures) as JSON lines; FSPO's dump holds each step's labels and advantages.
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        f"trainer.validation_data_dir={out / 'validation'}",
        f"trainer.test_freq={steps}",
    ]
    out.mkdir(parents=True)
    records = launch(overrides, out / "train.log", out / "metrics.jsonl")
    return {"records": records, "out": out}


@pytest.fixture(scope="module")
def seeded_runs(tiny_reasoner, tmp_path_factory):
    """Two runs at seed 3 (each a Ray start and a tiny run)."""
    root = tmp_path_factory.mktemp("reproducible")
    return {
        "first": _launch(tiny_reasoner, root / "first", seed=3, steps=STEPS),
        "again": _launch(tiny_reasoner, root / "again", seed=3, steps=STEPS),
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
            # (fspo.trainer.canonical_row_order), not in the order verl stored the rollouts.
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


def test_another_seed_samples_other_rollouts(seeded_runs, grpo_run):
    """``grpo_run``'s first run samples step 1 from the same model, prompts, prompt order, temperature and length
    as the seed-3 run, at verl's default sampling seed (42); what differs after sampling (its reward, its
    checkpoint) cannot reach step 1's rollouts. A seed that did not reach the sampler would give equal outputs."""
    rollouts = [
        _jsonl_rows(seeded_runs["first"]["out"] / "rollouts", 1),
        _jsonl_rows(grpo_run["out"] / "rollouts", 1),
    ]
    outputs = [{json.loads(row)["output"] for row in rows} for rows in rollouts]
    assert outputs[0] != outputs[1]
