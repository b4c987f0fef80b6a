"""One validation before training per seed: a later arm takes the first arm's figures when, and only when, the
overrides that decide that validation are the same (fspo.quickstart.shared_validation)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fspo.data.io import write_parquet
from fspo.quickstart import cli
from fspo.quickstart.shared_validation import (
    DELETED,
    TRAINING_ONLY,
    composed,
    sharing_refusal,
    validates_before_training,
    validation_differences,
)
from fspo.utils.output_dir import HELD_ENV

ROOT = Path(__file__).parents[1]
_spec = importlib.util.spec_from_file_location("fspo_vs_grpo", ROOT / "benchmarks" / "fspo_vs_grpo.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

# Keys that decide a validation before training: the model, the held-out file, the seeds, the validation's own
# sampling and data settings, the verifier.
DECIDING = [
    "actor_rollout_ref.model.path",
    "data.val_files",
    "data.val_batch_size",
    "data.max_response_length",
    "data.seed",
    "actor_rollout_ref.rollout.seed",
    "actor_rollout_ref.rollout.val_kwargs.temperature",
    "actor_rollout_ref.rollout.val_kwargs.do_sample",
    "fspo.verifier.threshold",
]
values = st.text("abc019.", min_size=1, max_size=3)
overrides = st.lists(
    st.tuples(st.sampled_from(["", "+", "++", "~"]), st.sampled_from(DECIDING + list(TRAINING_ONLY)), values).map(
        lambda parts: f"{parts[0]}{parts[1]}" + ("" if parts[0] == "~" else f"={parts[2]}")
    ),
    max_size=8,
)
training_only = st.lists(st.tuples(st.sampled_from(list(TRAINING_ONLY)), values).map("=".join), max_size=4)


@given(overrides)
def test_composed_reads_each_key_as_hydra_does_and_the_last_one_wins(given_overrides):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    expected = {}
    for override in given_overrides:
        parsed = parser.parse_override(override)
        expected[parsed.key_or_group] = DELETED if parsed.is_delete() else override.split("=", 1)[1]
    assert composed(given_overrides) == expected


@given(overrides, training_only, training_only)
def test_runs_that_differ_only_in_training_validate_alike(base, mine, theirs):
    assert validation_differences([*base, *mine], [*base, *theirs]) == []
    assert sharing_refusal("fspo", [*base, *mine], [*base, *theirs]) is None


@given(overrides, st.sampled_from(DECIDING), values, training_only)
def test_a_change_to_a_key_that_decides_the_validation_is_named_and_refused(base, key, value, mine):
    is_a_change = composed(base).get(key) != value
    changed = [*base, *mine, f"{key}={value}"]
    differences = validation_differences(base, changed)
    assert differences == ([key] if is_a_change else [])
    assert differences == validation_differences(changed, base)
    refusal = sharing_refusal("fspo", base, changed)
    assert (refusal is None) == (not is_a_change)
    if refusal:
        assert refusal == f"{key} differs from fspo's run"


def test_validating_before_training_is_verls_default_and_an_override_turns_it_off():
    # verl 0.9.1 trainer/ppo/v1/trainer_base.py line 439: config.trainer.get("val_before_train", True).
    assert validates_before_training([])
    assert not validates_before_training(["trainer.val_before_train=False"])
    assert validates_before_training(["trainer.val_before_train=false", "~trainer.val_before_train"])
    assert validates_before_training(["trainer.val_before_train=false", "trainer.val_before_train=true"])


def _quickstart_overrides(name: str, extra: list[str]) -> list[str]:
    setup = {"model": "/m", "train": "/d/train.parquet", "val": "/d/test.parquet"}
    return cli.train_overrides(name, setup, Path("/out") / name, 12, 0, extra)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        (None, None),
        ("actor_rollout_ref.rollout.val_kwargs.temperature=0.5", "actor_rollout_ref.rollout.val_kwargs.temperature"),
        ("data.val_batch_size=4", "data.val_batch_size"),
        ("fspo.verifier.threshold=0.5", "fspo.verifier.threshold"),
    ],
)
def test_the_quickstarts_grpo_run_shares_fspos_validation_unless_an_override_of_its_own_decides_it(override, named):
    grpo = _quickstart_overrides("grpo", ["fspo.flip=false", *([override] if override else [])])
    refusal = sharing_refusal("fspo", _quickstart_overrides("fspo", []), grpo)
    assert refusal == (None if named is None else f"{named} differs from fspo's run")


def test_the_benchmark_shares_exactly_where_the_committed_runs_figures_before_training_are_identical(tmp_path):
    """Every arm that validates the base model agrees with FSPO's run on what decides that validation, and on
    every seed of the committed comparison those arms' figures before training are identical, per question."""
    committed = json.loads((ROOT / "benchmarks" / "results" / "quickstart_2026-11-26.json").read_text())
    before: dict[int, list[dict]] = {}
    for run in committed["runs"]:
        if run["before"] is not None:
            before.setdefault(run["seed"], []).append(run["before"])
    assert sorted(before) == list(range(8)) and all(len(runs) >= 2 for runs in before.values())
    assert all(runs.count(runs[0]) == len(runs) for runs in before.values())
    sharing = {run["arm"] for run in committed["runs"] if run["before"] is not None}

    args = bench._parser().parse_args(["--output-dir", str(tmp_path)])
    setup = {"model": "/m", "train": "/d/train.parquet", "val": "/d/test.parquet"}

    def arm_overrides(arm):
        name, out, extra = bench.run_arguments(arm, 0, args)
        return bench.train_overrides(name, setup, out, 12, 0, extra)

    for arm in bench.ARMS:
        refusal = sharing_refusal("fspo", arm_overrides("fspo"), arm_overrides(arm), bench.SHARING_IGNORES)
        assert (refusal is None) == (arm in sharing), arm


# The stand-in trainer's answers (the synthetic world of tests/test_benchmark_fspo_vs_grpo.py).
EVIDENCE = "Ada Lin works for Sun Co. Sun Co is headquartered in Pell."
ROW = {
    "data_source": "synthetic_multihop",
    "prompt": [{"role": "user", "content": f"Context:\n{EVIDENCE}\nQuestion: ?"}],
    "extra_info": {"evidence": EVIDENCE, "gold_facts": ["Ada Lin works for Sun Co."]},
    "reward_model": {"ground_truth": "Pell"},
}
INVENTING = "Ada Lin works for Kip Co. </think> <answer> Pell </answer>"
FAITHFUL = "Ada Lin works for Sun Co. Sun Co is headquartered in Pell. </think> <answer> Pell </answer>"


def _stand_in_trainer(launched: list[list[str]]):
    """``launch`` without a trainer: it logs one record per step and, as verl does, a validation before training
    unless ``trainer.val_before_train=false`` and one after the last step, each with its answers dumped. Its
    answers before training name the run (F1 0.25 for FSPO's, 0.75 for any other), so that two runs' figures
    before training agree only when one took the other's."""

    def launch(overrides, log_path, metrics_path, on_step=None, on_poll=None, **_):
        launched.append(list(overrides))
        config = composed(overrides)
        steps, name = int(config["trainer.total_training_steps"]), config["trainer.experiment_name"]
        records = [{"step": step, "data": {"training/global_step": step}} for step in range(1, steps + 1)]
        validations = [(steps, records[-1], FAITHFUL, 1.0)]  # verl logs it with the last step's metrics
        if validates_before_training(overrides):
            records.insert(0, {"step": 0, "data": {}})
            validations.append((0, records[0], INVENTING, 0.25 if name.startswith("fspo") else 0.75))
        for step, record, answer, f1 in validations:
            record["data"]["val-core/synthetic_multihop/f1/mean@1"] = f1
            from hydra.core.override_parser.overrides_parser import OverridesParser

            folder = OverridesParser.create().parse_override(f"key={config['trainer.validation_data_dir']}").value()
            dump = Path(folder) / f"{step}.jsonl"  # the override is quoted (fspo.utils.hydra_values)
            dump.parent.mkdir(parents=True, exist_ok=True)
            dump.write_text(json.dumps({"input": ROW["prompt"][0]["content"], "output": answer, "f1": f1}) + "\n")
        for record in records:
            on_step(record)
        return records

    return launch


def _quickstart_without_a_trainer(tmp_path, monkeypatch, launched: list[list[str]]) -> list[str]:
    """The quickstart's arguments for one step on one synthetic question, its trainer the stand-in (merge and
    chart left out)."""
    monkeypatch.setattr(cli, "launch", _stand_in_trainer(launched))
    monkeypatch.setattr(cli, "merge", lambda out, steps: out / "merged")
    monkeypatch.setattr(cli, "plot", lambda runs, path: None)
    monkeypatch.setenv(HELD_ENV, "")  # main holds the output folder in the environment; restored after
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    (model / "model.safetensors").write_bytes(b"")
    data = [write_parquet([ROW], tmp_path / name) for name in ("train.parquet", "val.parquet")]
    return ["--model", str(model), "--data", *map(str, data), "--steps", "1", "--output-dir", str(tmp_path / "out")]


def test_the_quickstarts_grpo_run_ends_with_fspos_figures_before_training(tmp_path, monkeypatch, capsys):
    """`fspo quickstart --baseline grpo`: GRPO's run is launched without a validation before training and its
    summary holds FSPO's figures before training, naming FSPO's run; its figures after training are its own."""
    launched: list[list[str]] = []
    argv = _quickstart_without_a_trainer(tmp_path, monkeypatch, launched)
    out = tmp_path / "out"
    assert cli.main([*argv, "--baseline", "grpo"]) == 0

    summary = json.loads((out / "summary.json").read_text())["runs"]
    assert summary["fspo"]["before"]["answer_f1"] == 0.25 and summary["fspo"]["before"]["hallucinated_step_rate"] == 1.0
    assert summary["grpo"]["before"] == summary["fspo"]["before"] and summary["grpo"]["before_shared_from"] == "fspo"
    assert summary["grpo"]["after"]["answer_f1"] == 1.0 and summary["grpo"]["after"]["hallucinated_step_rate"] == 0.0
    assert "before_shared_from" not in summary["fspo"]
    fspo_run, grpo_run = launched
    assert validates_before_training(fspo_run) and not validates_before_training(grpo_run)
    assert not (out / "grpo" / "validation" / "0.jsonl").exists()
    printed = capsys.readouterr().out
    assert "[grpo] training step 1/1" in printed and "[grpo] validating on 1 held-out questions before" not in printed


def test_runs_told_not_to_validate_before_training_report_no_figures_before_and_their_own_after(tmp_path, monkeypatch):
    launched: list[list[str]] = []
    argv = _quickstart_without_a_trainer(tmp_path, monkeypatch, launched)
    assert cli.main([*argv, "--baseline", "grpo", "trainer.val_before_train=false"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())["runs"]
    for run in summary.values():
        assert run["before"] == {} and run["after"]["answer_f1"] == 1.0 and "before_shared_from" not in run
    assert not any(validates_before_training(overrides) for overrides in launched)


def test_the_benchmarks_later_arms_end_with_the_first_arms_figures_before_training(tmp_path, monkeypatch, capsys):
    """benchmarks/fspo_vs_grpo.py: of one seed's arms only the first validates before training; each later arm
    whose validation would be the same ends with the first's figures in its result.json and in results.json,
    naming it; an arm whose own override decides the validation validates again and says why."""
    launched: list[list[str]] = []
    monkeypatch.setattr(cli, "launch", _stand_in_trainer(launched))
    val_file = write_parquet([ROW], tmp_path / "val.parquet")
    monkeypatch.setattr(bench, "prepare_data", lambda folder, seed, rows, world: (val_file, val_file))
    # The figures of a dump: its answers and F1 (the world judge and both verifiers are tested on their own).
    monkeypatch.setattr(bench, "figures", lambda dump, rows, f1: {"answer_f1": f1, "answered": dump.read_text()})
    monkeypatch.setattr(bench, "plot", lambda summary, path: None)
    monkeypatch.setitem(bench.ARMS, "fapo", ["fspo.mode=fapo", "actor_rollout_ref.rollout.val_kwargs.n=2"])
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    argv = ["--seeds", "1", "--steps", "1", "--model", str(model), "--output-dir", str(tmp_path / "o")]
    assert bench.main([*argv, "--arms", "fspo", "grpo", "knowrl", "fapo", "--separate-ray"]) == 0

    results = {run["arm"]: run for run in json.loads((tmp_path / "o" / "results.json").read_text())["runs"]}
    first = results["fspo"]["before"]
    assert first["answer_f1"] == 0.25 and "before_shared_from" not in results["fspo"]
    for arm in ("grpo", "knowrl"):
        assert results[arm]["before"] == first and results[arm]["before_shared_from"] == "fspo"
        assert json.loads((tmp_path / "o" / arm / "seed0" / "result.json").read_text()) == results[arm]
    assert results["fapo"]["before"]["answer_f1"] == 0.75 and "before_shared_from" not in results["fapo"]
    assert [validates_before_training(run) for run in launched] == [True, False, False, True]
    printed = capsys.readouterr().out
    assert "[fapo seed 0] validating before training again: actor_rollout_ref.rollout.val_kwargs.n differs" in printed
    assert "[grpo seed 0] validating before training again" not in printed


def test_a_run_that_does_not_validate_before_training_announces_its_first_step_and_validation_after_it(
    tmp_path, capsys
):
    log = tmp_path / "train.log"
    log.write_text("")
    progress = cli.RunProgress("grpo", log, steps=2, questions=32, started=0.0, validates_before=False)
    progress.start()
    progress.on_record({"step": 1, "data": {"training/global_step": 1}})
    log.write_text(f"{progress.VALIDATION_MARK} (global step 2)\n")
    progress.poll()
    phases = [line.split("] ", 1)[1] for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert phases[1:] == [
        "[grpo] training step 1/2: rollouts, verifier, update",
        "[grpo] training step 2/2: rollouts, verifier, update",
        "[grpo] validating on 32 held-out questions after step 2 (greedy answers)",
    ]


def test_a_validation_line_that_arrives_after_its_pass_is_passed_over(tmp_path, capsys):
    # In a sweep joined to one Ray cluster, the trainer's line for the pass before training reached the log after
    # that pass's record, a step into training; it was announced as a validation after step 2 and kept the
    # heartbeat going through the training steps.
    log = tmp_path / "train.log"
    log.write_text("")
    progress = cli.RunProgress("fspo", log, steps=12, questions=64, started=0.0, heartbeat_s=0.0)
    progress.start()
    progress.on_record({"step": 0, "data": {"val-core/x/f1/mean@1": 0.25}})
    progress.on_record({"step": 1, "data": {"training/global_step": 1}})
    log.write_text(f"{progress.VALIDATION_MARK} (global step 0)\n")
    progress.poll()
    progress.poll()
    assert progress.validating_since is None
    with open(log, "a") as handle:
        handle.write(f"{progress.VALIDATION_MARK} (global step 12)\n")
    progress.poll()
    phases = [line.split("] ", 1)[1] for line in capsys.readouterr().out.splitlines() if line.startswith("[")]
    assert phases[1:] == [
        "[fspo] validation done: answer F1 0.250, supported-step rate 0.000",
        "[fspo] training step 1/12: rollouts, verifier, update",
        "[fspo] training step 2/12: rollouts, verifier, update",
        "[fspo] validating on 64 held-out questions after step 12 (greedy answers)",
    ]
