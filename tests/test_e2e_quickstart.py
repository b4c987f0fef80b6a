"""`fspo quickstart` end to end on CPU, with one step on the session's tiny model."""

from __future__ import annotations

import json

import pytest

from fspo.cli import main as fspo_main
from fspo.data.io import read_rows
from fspo.quickstart.cli import _parser as quickstart_parser
from fspo.quickstart.cli import output_paths
from fspo.quickstart.step_report import validation_samples
from fspo.utils.output_dir import record_outputs


def quickstart(argv: list[str]) -> int:
    """`fspo quickstart ARGV` in this process: the dispatcher lets go of the output folder as the command ends,
    as the process's exit does for a user."""
    return fspo_main(["quickstart", *argv])


@pytest.fixture(scope="module")
def one_step(tiny_reasoner, tmp_path_factory):
    """`fspo quickstart --steps 1` on the session's tiny model, its training rollouts dumped (one trainer run)."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("quickstart") / "run"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = quickstart(
            [
                "--steps",
                "1",
                "--output-dir",
                str(out),
                "--model",
                str(tiny_reasoner["model"]),
                "--data",
                str(tiny_reasoner["train"]),
                str(tiny_reasoner["val"]),
                f"trainer.rollout_data_dir={out.parent / 'rollouts'}",
            ]
        )
    return {"code": code, "out": out, "printed": printed.getvalue(), "rollouts": out.parent / "rollouts"}


@pytest.mark.e2e
def test_quickstart_one_step_writes_its_files(one_step, tiny_reasoner):
    out = one_step["out"]
    assert one_step["code"] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["seconds"] > 0
    assert set(summary) == {"steps", "seconds", "merged_model", "runs"} and set(summary["runs"]) == {"fspo"}
    run = summary["runs"]["fspo"]
    held_out = read_rows(tiny_reasoner["val"])
    assert run["seconds"] > 0
    for when in ("before", "after"):
        figures = run[when]
        assert set(figures) == {
            "answer_f1",
            "supported_step_rate",
            "hallucinated_step_rate",
            "copy_rate",
            "flawed_positive_rate",
        }
        assert 0.0 <= figures["supported_step_rate"] <= 1.0
        # The tiny model's validation answers are synthetic-world questions: the world judge scores them
        # from verl's validation dump, independently of the verifier the run trained against.
        dump = out / "fspo" / "validation" / ("0.jsonl" if when == "before" else "1.jsonl")
        assert len(validation_samples(dump, held_out)) == len(held_out)
        for key in ("hallucinated_step_rate", "copy_rate", "flawed_positive_rate"):
            assert figures[key] is None or 0.0 <= figures[key] <= 1.0
    assert (out / "training_curves.png").stat().st_size > 1000
    merged = out / "fspo" / "merged"
    assert (merged / "config.json").exists() and (merged / "model.safetensors").exists()
    printed = one_step["printed"]
    assert "step   1  reward" in printed and "supported-step rate" in printed
    assert "hallucinated-step rate" in printed and "(world judge)" in printed
    # each phase announced as it starts
    for phase in (
        "[fspo] starting Ray",
        "validating on 8 held-out questions before training",
        "training step 1/1",
        "validating on 8 held-out questions after step 1",
        "merging the FSPO checkpoint",
    ):
        assert phase in printed, phase


@pytest.mark.e2e
def test_dead_steps_benchmark_samples_the_trainers_first_rollouts_token_for_token(one_step, tiny_reasoner):
    """benchmarks/dead_steps.py samples as the quickstart's trainer does (its prompt order, chat template, seeds,
    decoding and dtype): step 1's rollouts, drawn before any update, are the run's own, token for token."""
    import importlib.util
    import json
    from pathlib import Path

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fspo.cpu.compute import torch_compute_dtype
    from fspo.quickstart.cli import PROMPT_FORMAT
    from fspo.training.prompt_formats import chat_template

    path = Path(__file__).parents[1] / "benchmarks" / "dead_steps.py"
    spec = importlib.util.spec_from_file_location("dead_steps", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    prompts = int(bench.quickstart_setting("data.train_batch_size"))
    group = int(bench.quickstart_setting("actor_rollout_ref.rollout.n"))
    rows = read_rows(tiny_reasoner["train"])
    first_step = [rows[index] for index in bench.trainer_order_of(len(rows), seed=0)[:prompts]]
    model_dir = tiny_reasoner["model"]
    samples = bench.sample_as_trainer(
        AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch_compute_dtype()).eval(),
        AutoTokenizer.from_pretrained(model_dir),
        first_step,
        prompts,
        group,
        0,  # the quickstart's --seed
        float(bench.quickstart_setting(bench.TEMPERATURE_KEY)),
        int(bench.quickstart_setting(bench.PROMPT_LENGTH_KEY)),
        int(bench.quickstart_setting(bench.RESPONSE_LENGTH_KEY)),
        chat_template(PROMPT_FORMAT),
    )
    dumped = [json.loads(line) for line in (one_step["rollouts"] / "1.jsonl").read_text().splitlines() if line]
    assert sorted(text for prompt in samples for text, _ in prompt) == sorted(row["output"] for row in dumped)


def test_quickstart_data_carries_the_evidence_and_the_worked_example(tmp_path):
    import pyarrow.parquet as pq

    from fspo.quickstart.cli import EXAMPLE_ANSWER, EXAMPLE_QUESTION, TASK, VAL_ROWS, prepare_data

    train, held_out = prepare_data(tmp_path, seed=3)
    rows = pq.read_table(held_out).to_pylist()
    assert len(rows) == VAL_ROWS
    assert not {r["extra_info"]["question"] for r in rows} & {
        r["extra_info"]["question"] for r in pq.read_table(train).to_pylist()
    }
    for row in rows:
        system, example, worked, user = row["prompt"]
        assert system == {"role": "system", "content": TASK}
        # The worked example is a turn of its own, answered in the format the reward reads (issue 42).
        assert example == {"role": "user", "content": EXAMPLE_QUESTION}
        assert worked == {"role": "assistant", "content": EXAMPLE_ANSWER}
        # The evidence the verifier checks steps against is the context the model reads.
        assert user["role"] == "user"
        assert user["content"].startswith("Context:\n" + row["extra_info"]["evidence"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "0"], "--steps: must be >= 1"),
        (["--model", "no/such/model"], "not a Hugging Face model directory"),
        (["--data", "no/train.parquet", "no/val.parquet"], "no such file"),
    ],
)
def test_bad_options_stop_before_training_with_a_clear_message(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as stopped:
        quickstart([*argv, "--output-dir", str(tmp_path / "out")])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_run_progress_announces_each_phase_and_keeps_talking_during_validation(tmp_path, capsys):
    from fspo.quickstart.cli import RunProgress
    from fspo.training.trainer import VALIDATION_BEGINS, validation_begins_line

    assert RunProgress.VALIDATION_MARK == VALIDATION_BEGINS
    assert RunProgress.VALIDATION_LINE.search(validation_begins_line(12).encode())[1] == b"12"

    log = tmp_path / "train.log"
    log.write_text("Started a local Ray instance.\n")
    progress = RunProgress("fspo", log, steps=2, questions=32, started=0.0, heartbeat_s=0.0)
    progress.start()
    progress.poll()
    with open(log, "a") as handle:
        handle.write("(TaskRunner pid=1) fspo: validation begins (global step 0)\n(TaskRunner pid=1) fspo: valid")
    progress.poll()
    progress.poll()  # no new line: a progress line, since the heartbeat is 0 s
    progress.on_record({"step": 0, "data": {"val-core/x/f1/mean@1": 0.25}})
    progress.poll()  # validation is over: no progress line
    progress.on_record({"step": 1, "data": {"training/global_step": 1, "critic/score/mean": 0.5}})
    with open(log, "a") as handle:
        handle.write("ation begins (global step 2)\n")  # the half-written line completes
    progress.poll()
    progress.on_record({"step": 2, "data": {"training/global_step": 2, "val-core/x/f1/mean@1": 0.5}})
    lines = capsys.readouterr().out.splitlines()
    phases = [line.split("] ", 1)[1] for line in lines if line.startswith("[")]
    assert phases[0].startswith("[fspo] starting Ray")
    assert phases[1] == "[fspo] validating on 32 held-out questions before training (greedy answers)"
    assert phases[2].startswith("[fspo]   validation still generating:")
    assert phases[3] == "[fspo] validation done: answer F1 0.250, supported-step rate 0.000"
    assert phases[4] == "[fspo] training step 1/2: rollouts, verifier, update"
    assert phases[5] == "[fspo] training step 2/2: rollouts, verifier, update"
    assert phases[6] == "[fspo] validating on 32 held-out questions after step 2 (greedy answers)"
    assert phases[7] == "[fspo] validation done: answer F1 0.500, supported-step rate 0.000"
    assert len(phases) == 8
    assert any(line.startswith("step   1  reward +0.500") for line in lines)
    assert all(line[0] in "[s" for line in lines)


def _fake_model(path):
    """A folder that passes the model-folder check (a config naming its type, a weights file), loading nothing."""
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "qwen2"}')
    (path / "model.safetensors").write_bytes(b"")
    return path


def test_an_output_folder_with_another_runs_checkpoint_is_refused_naming_it(tmp_path, capsys):
    # verl's resume_mode=auto would otherwise continue that checkpoint, whatever --model says.
    first, second = _fake_model(tmp_path / "model_a"), _fake_model(tmp_path / "model_b")
    data = [tmp_path / "train.parquet", tmp_path / "val.parquet"]
    for path in data:
        path.write_bytes(b"")
    out = tmp_path / "out"
    (out / "fspo" / "ckpt" / "global_step_3").mkdir(parents=True)
    record_outputs(out, output_paths(quickstart_parser().parse_args(["--output-dir", str(out)])), "fspo quickstart")
    (out / "quickstart_run.json").write_text(
        json.dumps(
            {
                "model": str(first),
                "data": [str(p) for p in data],
                "steps": 3,
                "seed": 0,
                "baseline": None,
                "overrides": [],
            }
        )
    )
    argv = ["--model", str(second), "--data", *map(str, data), "--steps", "3", "--output-dir", str(out)]
    with pytest.raises(SystemExit) as stopped:
        quickstart(argv)
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert "another run" in err and str(first) in err and "--fresh" in err
    (out / "quickstart_run.json").unlink()  # a checkpoint nobody recorded is refused too
    with pytest.raises(SystemExit):
        quickstart(argv)
    assert "no record" in capsys.readouterr().err
    assert (out / "fspo" / "ckpt" / "global_step_3").is_dir()  # nothing was deleted


def test_a_users_file_or_a_link_where_the_quickstart_writes_is_refused_before_anything_runs(tmp_path, capsys):
    """fspo.utils.output_dir's rule: a summary.json the user put in --output-dir, or a link where a run folder goes,
    stops the quickstart at once, naming it, and the folder is left as it was."""
    model = _fake_model(tmp_path / "model")
    data = [tmp_path / "train.parquet", tmp_path / "val.parquet"]
    for path in data:
        path.write_bytes(b"")
    out = tmp_path / "out"
    out.mkdir()
    (out / "summary.json").write_text("mine")
    (out / "fspo").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    argv = ["--model", str(model), "--data", *map(str, data), "--output-dir", str(out)]
    for expected in ("fspo is a symbolic link", "summary.json was not written by fspo"):
        with pytest.raises(SystemExit) as stopped:
            quickstart(argv)
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and expected in err and err.count("\n") == 1, err
        assert (out / "summary.json").read_text() == "mine" and not (tmp_path / "elsewhere").exists()
        (out / "fspo").unlink(missing_ok=True)
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]


def test_fresh_removes_only_the_quickstarts_own_outputs(tmp_path):
    from fspo.quickstart.cli import clear_previous_run

    out = tmp_path / "out"
    for folder in ("fspo/ckpt/global_step_1", "grpo/ckpt/global_step_1", "fspo/merged", "mine/ckpt"):
        (out / folder).mkdir(parents=True)
    (out / "quickstart_run.json").write_text("{}")
    clear_previous_run(out)
    # The run folders, emptied, go too (fspo.utils.output_dir.remove_output); the user's folder stays.
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == ["mine", "mine/ckpt"]


@pytest.mark.e2e
def test_fspo_vs_grpo_counts_a_step_live_exactly_when_its_rewards_differ_within_a_group(one_step):
    """benchmarks/fspo_vs_grpo.py reads each run's steps with a non-zero advantage from its metrics log; on the
    quickstart run that count agrees with the dumped rollouts' rewards (GRPO's advantage is 0 on every token
    exactly when each prompt's rollouts scored alike)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "fspo_vs_grpo.py"
    spec = importlib.util.spec_from_file_location("fspo_vs_grpo", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    dumped = [json.loads(line) for line in (one_step["rollouts"] / "1.jsonl").read_text().splitlines() if line]
    groups: dict[str, set[float]] = {}
    for row in dumped:
        groups.setdefault(row["input"], set()).add(round(float(row["score"]), 6))
    live = any(len(scores) > 1 for scores in groups.values())
    assert bench.live_steps(one_step["out"] / "fspo" / "metrics.jsonl") == [int(live), 1]
