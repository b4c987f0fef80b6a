"""Train -> merge -> evaluate on CPU, the way docs/quickstart.md tells a user to, with the real scripts.

One step of `recipes/run_cpu.sh` on the session's tiny model, `scripts/merge_checkpoint.sh` on its
checkpoint, then `fspo evaluate` comparing the merged model with the starting one on a few rows of
two synthetic benchmarks. The step trains on rows in the schema of the paper's released parquet files
(fspo_testing/released_schema.py): data_source `HotpotQA`, the evidence in a top-level `knowledge` column, the
prompt already rendered to text in one user message (the passthrough chat template). The recipe names the
model by hub id, as the GPU recipes do, on an offline node (``HF_HUB_OFFLINE=1``) with the model in its HF
cache: the run accepts what the preflight accepts.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fspo_testing.tiny_run import run_logged
from fspo_testing.warm_python import warm_python

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
LIMIT = 3
REPO_ID = "fspo-test/tiny-reasoner"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _env(**extra: str) -> dict[str, str]:
    # The scripts run $PYTHON (passed below); the venv first on PATH keeps anything else they start in it.
    return {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def _run(command: list[str], env: dict[str, str], log: Path, timeout: int) -> subprocess.CompletedProcess:
    return run_logged(command, env, log, timeout, cwd=REPO)


def _markdown_rows(markdown: str) -> list[list[str]]:
    """Cells of the first Markdown table (header first, separator dropped)."""
    table = []
    for line in markdown.splitlines():
        if line.startswith("|"):
            table.append([cell.strip() for cell in line.strip("|").split("|")])
        elif table:
            break
    return [row for row in table if not all(set(cell) <= {"-"} for cell in row)]


def released_files(tiny_reasoner, released_schema, out: Path) -> tuple[Path, Path]:
    """The tiny reasoner's train/val rows in the released files' schema, prompts rendered as it learned them."""
    from fspo.data.io import read_rows
    from fspo.training.prompt_formats import render_prompt

    def render(messages):
        return render_prompt([dict(m) for m in messages], "qwen-base")

    return tuple(
        released_schema.write_released(
            released_schema.from_fspo_rows(read_rows(tiny_reasoner[split]), render), out / f"released_{split}.parquet"
        )
        for split in ("train", "val")
    )


@pytest.fixture(scope="module")
def pipeline(tiny_reasoner, released_schema, tmp_path_factory):
    from fspo_testing.tiny_model import put_in_hub_cache

    out = tmp_path_factory.mktemp("recipe_pipeline")
    run_dir = out / "run"
    released_train, released_val = released_files(tiny_reasoner, released_schema, out)
    snapshot = put_in_hub_cache(out / "hf" / "hub", REPO_ID, tiny_reasoner["model"])
    env = _env(
        MODEL_PATH=REPO_ID,
        HF_HOME=str(out / "hf"),
        HF_HUB_OFFLINE="1",
        TRAIN_FILES=str(released_train),
        VAL_FILES=str(released_val),
        STEPS="1",
        # The recipe's driver and the merge script's interpreters fork from one that imported verl once; the
        # evaluation below runs the installed `fspo` command.
        PYTHON=warm_python(),
        EXPERIMENT="recipe_pipeline",
        LOGGER="[console,file]",
        VERL_FILE_LOGGER_PATH=str(out / "metrics.jsonl"),
    )
    train = _run(
        [
            "bash",
            str(REPO / "recipes" / "run_cpu.sh"),
            f"trainer.default_local_dir={run_dir}",
            f"fspo.dump_dir={out / 'dump'}",
            # The recipe runs from the repository root: keep Hydra's run folder out of it.
            f"hydra.run.dir={out / 'hydra'}",
            # The sizes of fspo_testing.tiny_run.tiny_run_overrides: the recipe's own fit a real small model.
            "data.max_prompt_length=192",
            "data.max_response_length=40",
            # One step asserts steps and labels: at temperature 1 none of the 8 rollouts closed </think> within
            # 40 tokens in one CI run (the tiny model does in 1 to 5); 0.7 samples nearer its taught format.
            "actor_rollout_ref.rollout.temperature=0.7",
            # The evaluation below generates on held-out rows; the trainer's own validation would repeat it.
            "trainer.test_freq=-1",
            # The released files as they are: evidence in the `knowledge` column, prompts already text.
            "fspo.evidence_key=knowledge",
            "actor_rollout_ref.model.custom_chat_template=${fspo_chat_template:passthrough}",
        ],
        env,
        out / "train.log",
        timeout=1500,
    )
    merge = _run(["bash", str(REPO / "scripts" / "merge_checkpoint.sh"), str(run_dir)], env, out / "merge.log", 600)
    merged = Path(merge.stdout.strip().splitlines()[-1])

    benchmarks = {"synth_val": tiny_reasoner["val"], "synth_train": tiny_reasoner["train"]}
    models = {"trained": merged, "start": Path(tiny_reasoner["model"])}
    eval_dir = out / "eval"
    evaluate = _run(
        [
            str(VENV_BIN / "fspo"),
            "evaluate",
            *[arg for name, path in models.items() for arg in ("--model", f"{name}={path}")],
            *[arg for name, path in benchmarks.items() for arg in ("--data", f"{name}={path}")],
            "--output-dir",
            str(eval_dir),
            "--backend",
            "hf",
            "--limit",
            str(LIMIT),
            "--max-new-tokens",
            "16",
        ],
        env,
        out / "evaluate.log",
        900,
    )
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {
        "run_dir": run_dir,
        "snapshot": snapshot,
        "merged": merged,
        "eval_dir": eval_dir,
        "models": list(models),
        "benchmarks": list(benchmarks),
        "train": train,
        "evaluate": evaluate,
        "metrics": metrics,
    }


def test_recipe_trains_one_step_and_saves_it(pipeline):
    run_dir = pipeline["run_dir"]
    assert (run_dir / "global_step_1" / "actor").is_dir()
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert not (run_dir / "global_step_2").exists()
    # The recipe's KL loss (the paper's 0.001 low_var_kl) ran: it needs the reference model, which
    # verl wraps in FSDP2's CPU offload policy (fspo.cpu.patches makes that work without an accelerator).
    assert re.search(r"actor/kl_loss:[-0-9.e]+", pipeline["train"].stdout + pipeline["train"].stderr)


def test_an_offline_node_trains_a_cached_hub_model(pipeline):
    log = pipeline["train"].stdout + pipeline["train"].stderr
    # The preflight resolved the hub id to the snapshot in the offline node's cache, and the step trained on it.
    assert f"actor_rollout_ref.model.path: {pipeline['snapshot']}" in log
    assert [record["step"] for record in pipeline["metrics"]] == [1]


def test_released_schema_rows_train_with_step_labels(pipeline):
    # Every rollout found its row's evidence in the `knowledge` column (verl carried the column to the
    # reward manager), the verifier judged its steps, and tokens were labelled.
    [record] = pipeline["metrics"]
    metrics = record["data"]
    assert record["step"] == 1
    assert metrics["fspo/evidence_rollout_frac"] == 1.0
    assert metrics["fspo/steps_per_response"] > 0
    # Labelled, unless every step of the step's few closed reasonings was unverifiable (NaN, label 0: a
    # step without a content word for `lexical`), as once in CI with one step in 8 rollouts.
    assert metrics["fspo/labelled_frac"] > 0 or metrics["fspo/unverifiable_step_rate"] == 1.0
    assert metrics["fspo/verifier_failures"] == 0


def test_merge_writes_a_hugging_face_model(pipeline):
    merged = pipeline["merged"]
    assert merged == pipeline["run_dir"] / "global_step_1" / "merged"
    assert (merged / "config.json").is_file()
    weights = list(merged.glob("*.safetensors")) + list(merged.glob("*.bin"))
    assert weights and all(path.stat().st_size > 0 for path in weights)
    # Marked as the script's own output (a re-merge may replace it), staged beside it and renamed: no leftovers.
    assert (merged / ".fspo_merged_from").read_text().strip().endswith("global_step_1/actor")
    assert not [p.name for p in merged.parent.iterdir() if ".merging." in p.name]


def test_results_table_has_one_row_per_model_and_a_column_per_benchmark(pipeline):
    eval_dir, models, benchmarks = pipeline["eval_dir"], pipeline["models"], pipeline["benchmarks"]

    results = json.loads((eval_dir / "results.json").read_text())
    assert sorted(results) == sorted(models)
    for model in models:
        assert sorted(results[model]) == sorted(benchmarks)
        for metrics in results[model].values():
            assert metrics["n"] == LIMIT and metrics["generated"] == LIMIT
            assert 0.0 <= metrics["score"] <= 1.0

    with open(eval_dir / "results.csv", newline="") as handle:
        header, *rows = list(csv.reader(handle))
    assert header[0] == "model" and sorted(header[1:]) == sorted(benchmarks)
    assert sorted(row[0] for row in rows) == sorted(models)
    assert all(len(row) == len(header) for row in rows)
    for row in rows:
        for benchmark, cell in zip(header[1:], row[1:]):
            assert float(cell) == pytest.approx(results[row[0]][benchmark]["score"], abs=1e-6)

    md_header, *md_rows = _markdown_rows((eval_dir / "results.md").read_text())
    assert md_header == header
    assert sorted(row[0] for row in md_rows) == sorted(models)
    assert all(len(row) == len(md_header) for row in md_rows)


def test_chart_is_a_png(pipeline):
    chart = pipeline["eval_dir"] / "results.png"
    data = chart.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5000, "the chart is too small to hold bars, axes and a legend"


def test_predictions_hold_limit_rows_per_model_and_benchmark(pipeline):
    predictions = pipeline["eval_dir"] / "predictions"
    expected = {f"{m}__{b}.jsonl" for m in pipeline["models"] for b in pipeline["benchmarks"]}
    assert {path.name for path in predictions.glob("*.jsonl")} == expected
    for name in expected:
        records = [json.loads(line) for line in (predictions / name).read_text().splitlines() if line.strip()]
        assert [record["index"] for record in records] == list(range(LIMIT))
        for record in records:
            assert len(record["responses"]) == 1 and isinstance(record["responses"][0], str)
            assert record["ground_truth"] and record["prompt"]
