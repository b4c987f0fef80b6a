"""The three-arm benchmark's tables: mean ± std per arm, the base model from the runs' first validation."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.evaluation.intervals import t_interval, t_quantile

_spec = importlib.util.spec_from_file_location(
    "fspo_vs_grpo", Path(__file__).parents[1] / "benchmarks" / "fspo_vs_grpo.py"
)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def _run(arm, seed, f1, hallucinated, before_f1=0.1):
    after = {
        "answer_f1": f1,
        "hallucinated_step_rate": hallucinated,
        "lexical_supported_step_rate": 0.9,
        "embedding_supported_step_rate": 0.8,
        "copy_rate": 0.5,
        "steps": 0 if hallucinated is None else 64,
        "answers": 32,
    }
    before = {**after, "answer_f1": before_f1}
    return {"arm": arm, "seed": seed, "seconds": 10.0, "before": before, "after": after}


def test_mean_std_skips_missing_values():
    assert bench.mean_std([0.2, None, 0.4]) == (pytest.approx(0.3), pytest.approx(math.sqrt(0.02)), 2)
    assert bench.mean_std([0.5]) == (0.5, 0.0, 1)
    mean, std, count = bench.mean_std([None])
    assert math.isnan(mean) and math.isnan(std) and count == 0


def test_summary_per_arm_and_the_base_model_once_per_seed():
    results = [
        _run("fspo", 0, 0.4, 0.1, before_f1=0.0),
        _run("grpo", 0, 0.3, 0.4, before_f1=0.0),
        _run("fspo", 1, 0.6, 0.3, before_f1=0.2),
        _run("grpo", 1, 0.3, None, before_f1=0.2),
    ]
    summary = bench.summarise(results)
    assert list(summary) == ["base model", "fspo", "grpo"]
    assert summary["base model"]["answer_f1"][:1] + summary["base model"]["answer_f1"][2:] == (pytest.approx(0.1), 2)
    assert summary["fspo"]["answer_f1"][0] == pytest.approx(0.5)
    assert summary["grpo"]["hallucinated_step_rate"] == (0.4, 0.0, 1)
    table = bench.markdown_table(summary, steps=12, val_rows=32, run_s=600)
    assert "| fspo | 2 | 0.500 ± 0.141 | 0.200 ± 0.141 |" in table
    # grpo's seed 1 wrote no reasoning: its step figures are over one run, and say so; its length is 0.
    assert "| grpo | 2 | 0.300 ± 0.000 | 0.400 ± 0.000 (n=1) |" in table
    assert summary["grpo"]["steps_per_answer"] == (pytest.approx(1.0), pytest.approx(math.sqrt(2)), 2)
    assert "mean ± std over each arm's runs (one per seed); 10.0 min of runs" in table


def test_chart_is_written(tmp_path):
    summary = bench.summarise([_run("fspo", 0, 0.4, 0.1), _run("grpo", 0, 0.3, None)])
    bench.plot(summary, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").stat().st_size > 5000


def test_bad_budget_exits_2(capsys):
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--seeds", "0"])
    assert stopped.value.code == 2 and "--seeds, --steps and --val-rows must be at least 1" in capsys.readouterr().err


def test_an_override_that_drops_the_validation_before_training_exits_2(capsys, tmp_path):
    """The base model's figures come from each seed's first run's validation before training (the later arms take
    them): an override turning it off is refused in one line, before any run."""
    with pytest.raises(SystemExit) as stopped:
        bench.main(["--output-dir", str(tmp_path), "trainer.val_before_train=false"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "trainer.val_before_train=false: each seed's first run validates" in err
    assert not any(tmp_path.iterdir())


# Student's t quantiles at 0.975 from the standard table.
@pytest.mark.parametrize(("df", "expected"), [(1, 12.706), (2, 4.303), (4, 2.776), (9, 2.262), (29, 2.045)])
def test_t_quantile_matches_the_table(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-3)


def test_t_quantile_approaches_the_normal_and_refuses_nonsense():
    assert t_quantile(0.975, 10_000) == pytest.approx(1.960, abs=1e-3)
    assert t_quantile(0.5, 3) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError):
        t_quantile(0.975, 0)


values_lists = st.lists(st.floats(-1, 1, allow_nan=False), min_size=2, max_size=12)


@given(values=values_lists, scale=st.floats(0.1, 10), shift=st.floats(-5, 5))
def test_t_interval_is_centred_on_the_mean_and_moves_with_the_data(values, scale, shift):
    mean, low, high, n = t_interval(values)
    assert n == len(values) and low <= mean <= high
    assert mean - low == pytest.approx(high - mean, abs=1e-9)
    moved = t_interval([scale * v + shift for v in values])
    for this, that in zip(moved[:3], (mean, low, high)):
        assert this == pytest.approx(scale * that + shift, abs=1e-6)


@settings(deadline=None)  # a new confidence level's t quantile is integrated afresh
@given(values=values_lists)
def test_a_higher_confidence_gives_a_wider_interval(values):
    _, low_90, high_90, _ = t_interval(values, confidence=0.90)
    _, low_95, high_95, _ = t_interval(values)
    assert low_95 <= low_90 + 1e-12 and high_90 <= high_95 + 1e-12


def test_t_interval_covers_the_true_mean_95_percent_of_the_time():
    import numpy as np

    rng = np.random.default_rng(0)
    trials = 4000
    covered = 0
    for _ in range(trials):
        _, low, high, _ = t_interval(list(rng.normal(0.3, 0.1, size=3)))
        covered += low <= 0.3 <= high
    assert 0.935 <= covered / trials <= 0.965


def test_t_interval_of_one_or_no_value_has_no_bounds():
    mean, low, high, n = t_interval([0.2])
    assert (mean, n) == (0.2, 1) and math.isnan(low) and math.isnan(high)
    assert t_interval([])[3] == 0


def test_paired_differences_pair_arms_by_seed_and_skip_missing_figures():
    results = [
        _run("fspo", 0, 0.4, 0.1),
        _run("grpo", 0, 0.3, 0.4),
        _run("fspo", 1, 0.6, 0.3),
        _run("grpo", 1, 0.3, None),  # no closed reasoning: no hallucinated-step rate
        _run("fspo", 2, 0.4, 0.2),
        _run("grpo", 2, 0.5, 0.2),
    ]
    assert bench.paired_differences(results, "fspo", "grpo", "hallucinated_step_rate") == [
        (0, pytest.approx(-0.3)),
        (2, pytest.approx(0.0)),
    ]
    rows = bench.comparisons(results)
    assert [(r["arm"], r["figure"], r["seeds"]) for r in rows] == [
        ("fspo", "hallucinated_step_rate", 2),
        ("fspo", "answer_f1", 3),
    ]  # no factuality-reward arm ran
    f1 = rows[1]
    assert f1["per_seed"] == {0: pytest.approx(0.1), 1: pytest.approx(0.3), 2: pytest.approx(-0.1)}
    assert f1["mean"] == pytest.approx(0.1)
    half = 4.3027 * 0.2 / math.sqrt(3)  # t(0.975, 2) x sd / sqrt(n)
    assert (f1["low"], f1["high"]) == (pytest.approx(0.1 - half, abs=1e-4), pytest.approx(0.1 + half, abs=1e-4))
    table = bench.comparison_table(rows)
    assert "| fspo − grpo | answer F1 | +0.100 | [-0.397, +0.597] | 3 | no |" in table
    per_seed = bench.per_seed_table(results)
    assert "| 1 | grpo | 0.300 | n/a |" in per_seed and per_seed.count("base model") == 3


def test_a_result_is_kept_only_under_the_configuration_it_was_trained_with(tmp_path, monkeypatch):
    """A finished run is reused when its recorded configuration (the quickstart's overrides, the arm's, seed,
    sizes, model, dtype) is this invocation's; one without a record (bf16 runs of older code) or under another
    configuration (another verifier setting passed through) is trained again."""
    args = bench._parser().parse_args(["--output-dir", str(tmp_path)])
    done = tmp_path / "fspo" / "seed0"
    done.mkdir(parents=True)
    kept = {**_run("fspo", 0, 0.4, 0.1), "dtype": "float32", "config": bench.run_config("fspo", 0, args)}
    (done / "result.json").write_text(json.dumps(kept))
    # A result written before live steps were recorded gets them from its metrics log (none here).
    assert bench.run_once("fspo", 0, args, tmp_path / "model", clock=0.0) == {**kept, "live_steps": None}

    def train(*_args, **_kwargs):
        raise RuntimeError("trains")

    monkeypatch.setattr(bench, "train", train)
    other = bench._parser().parse_args(["--output-dir", str(tmp_path), "fspo.verifier.threshold=0.5"])
    with pytest.raises(RuntimeError, match="trains"):
        bench.run_once("fspo", 0, other, tmp_path / "model", clock=0.0)
    assert bench.run_config("fspo", 1, args) != bench.run_config("fspo", 0, args)
    assert bench.run_config("grpo", 0, args) != bench.run_config("fspo", 0, args)
    done.mkdir(parents=True, exist_ok=True)  # the retrained run above started afresh
    (done / "result.json").write_text(json.dumps(_run("fspo", 0, 0.4, 0.1)))  # no configuration recorded
    with pytest.raises(RuntimeError, match="trains"):
        bench.run_once("fspo", 0, args, tmp_path / "model", clock=0.0)


def test_each_run_records_the_commit_it_was_trained_on_and_the_table_lists_them():
    assert bench.code_version() != ""
    results = [
        {**_run("fspo", 0, 0.4, 0.1), "code_version": "abc"},
        {**_run("grpo", 0, 0.3, 0.1), "code_version": "abc"},
    ]
    results.append({**_run("fspo", 1, 0.4, 0.1), "code_version": "def-dirty"})
    assert bench.code_versions(results) == "abc (2 runs), def-dirty (1 run)"


def test_an_fdpo_run_gives_no_base_model_figures():
    """F-DPO's run answers with its trained model only: the base model's row comes from the other arms."""
    fdpo = {**_run("fdpo", 0, 0.5, 0.2), "before": None}
    results = [fdpo, _run("grpo", 0, 0.3, 0.4, before_f1=0.05)]
    summary = bench.summarise(results)
    assert summary["base model"]["answer_f1"][0] == pytest.approx(0.05)
    assert summary["fdpo"]["answer_f1"][0] == pytest.approx(0.5)
    table = bench.per_seed_table(results)
    assert table.count("| 0 | base model |") == 1 and "| 0 | fdpo | 0.500 |" in table
    assert [row["arm"] for row in bench.comparisons(results)] == ["fdpo", "fdpo"]


def test_the_fdpo_arm_labels_its_pairs_with_the_verifier_the_rl_arms_train_with():
    """F-DPO's pairs are built by `fspo fdpo build-pairs` with the arguments the benchmark gives it; read as that
    command reads them, they are the verifier settings every RL arm's run gets (its fspo.verifier.* overrides)."""
    from fspo.cli.fdpo import build_parser
    from fspo.verifier_tools.verify import verifier_options

    setup = {"model": "m", "train": "t", "val": "v"}
    trained_with = {
        key.removeprefix("fspo.verifier."): value
        for key, value in (override.split("=", 1) for override in bench.run_overrides(setup, Path("run"), 12))
        if key.startswith("fspo.verifier.")
    }
    args = build_parser().parse_args(
        ["build-pairs", "samples.jsonl", "--pairs", "pairs.jsonl", *bench.fdpo_pair_verifier()]
    )
    built_with = {"name": args.verifier, "threshold": str(args.threshold)}
    built_with.update({key: str(value) for key, value in verifier_options(args.verifier_option, args.verifier).items()})
    assert built_with == trained_with
    assert trained_with["evidence_unit"] == "sentence"  # not the whole evidence, which F-DPO's pairs once used


def test_baselines_join_the_default_arms(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(
        bench,
        "run_once",
        lambda arm, seed, args, model, clock, earlier, launcher: seen.append(arm) or _run(arm, seed, 0.1, 0.1),
    )
    monkeypatch.setattr(bench, "plot", lambda summary, path: None)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    argv = ["--seeds", "1", "--model", str(tmp_path / "m"), "--output-dir", str(tmp_path / "o")]
    assert bench.main([*argv, "--baseline", "fapo", "--baseline", "fdpo", "--separate-ray"]) == 0
    assert seen == ["fspo", "grpo", "grpo_factuality_reward", "fapo", "fdpo"]


def test_seeds_needed_matches_the_t_table():
    # t(0.975, 11) x 0.078 / sqrt(12) = 0.0496 <= 0.05, and t(0.975, 10) x 0.078 / sqrt(11) = 0.0524 > 0.05.
    assert bench.seeds_needed(0.078, 0.05) == 12
    assert bench.seeds_needed(0.0, 0.05) == 2
    with pytest.raises(ValueError, match="half_width > 0"):
        bench.seeds_needed(0.1, 0.0)


@settings(deadline=None)  # t_quantile's first call per df integrates numerically (cached after)
@given(st.floats(0.001, 0.3), st.floats(0.02, 0.3))
def test_seeds_needed_is_the_fewest_whose_interval_is_narrow_enough(sd, half_width):
    n = bench.seeds_needed(sd, half_width)
    assert t_quantile(0.975, n - 1) * sd / math.sqrt(n) <= half_width
    assert n == 2 or t_quantile(0.975, n - 2) * sd / math.sqrt(n - 1) > half_width


def _with_questions(run, per_question):
    return {**run, "after": {**run["after"], "per_question": per_question}}


def test_question_noise_is_zero_when_the_runs_differ_by_the_same_on_every_question():
    same = {str(i): [1, 4, 0.5] for i in range(8)}
    shifted = {str(i): [1, 4, 0.25] for i in range(8)}
    results = [_with_questions(_run("fspo", 0, 0.5, 0.25), same), _with_questions(_run("grpo", 0, 0.25, 0.25), shifted)]
    assert bench.question_noise_sd(results, "fspo", "grpo", "answer_f1") == pytest.approx(0.0, abs=1e-12)
    assert bench.question_noise_sd(results, "fspo", "grpo", "hallucinated_step_rate") == pytest.approx(0.0, abs=1e-12)
    # A seed without per-question figures (a result from before they were kept) gives no estimate.
    assert (
        bench.question_noise_sd([_run("fspo", 0, 0.5, 0.2), _run("grpo", 0, 0.5, 0.2)], "fspo", "grpo", "answer_f1")
        is None
    )


def test_question_noise_of_one_differing_question_is_the_bootstrap_mean_sd():
    """Runs that differ in F1 by 1 on one of N questions: a resample's difference is (times it is drawn) / N,
    a Binomial(N, 1/N) / N, whose sd is sqrt(1 - 1/N) / N."""
    n = 4
    mine = {str(i): [0, 1, 1.0 if i == 0 else 0.0] for i in range(n)}
    theirs = {str(i): [0, 1, 0.0] for i in range(n)}
    results = [_with_questions(_run("fspo", 0, 0.25, 0.0), mine), _with_questions(_run("grpo", 0, 0.0, 0.0), theirs)]
    expected = math.sqrt(1 - 1 / n) / n
    assert bench.question_noise_sd(results, "fspo", "grpo", "answer_f1", resamples=4000) == pytest.approx(
        expected, rel=0.08
    )


EVIDENCE = [
    "Ada Lin works for Sun Co. Bo Kim works for Rain Ltd. Sun Co is headquartered in Pell. "
    "Rain Ltd is headquartered in Oster.",
    "Cy Moe works for Fen Inc. Fen Inc is headquartered in Vale.",
]
# Row 0's answer: a contradicted step made of one evidence sentence's words (the lexical verifier, by
# sentence, passes it), a step that is no claim, a supported step, and a contradicted step with a word the
# evidence lacks (it fails).
INVENTING = (
    "Sun Co works for Ada Lin. Let me think. Rain Ltd is based in Oster. Ada Lin works for Moon Corp. "
    "</think> <answer> Oster </answer>"
)
COPYING = "Cy Moe works for Fen Inc. Fen Inc is headquartered in Vale. </think> <answer> Vale </answer>"


def _world_rows():
    return [
        {
            "data_source": "synthetic_multihop",
            "extra_info": {"evidence": EVIDENCE[0], "gold_facts": ["Ada Lin works for Sun Co."]},
            "reward_model": {"ground_truth": "Pell"},
        },
        {
            "data_source": "synthetic_multihop",
            "extra_info": {"evidence": EVIDENCE[1], "gold_facts": ["Cy Moe works for Fen Inc."]},
            "reward_model": {"ground_truth": "Vale"},
        },
        {"data_source": "other", "extra_info": {}},
    ]


def _write_dump(path, outputs):
    records = [
        {"input": f"Context:\n{EVIDENCE[1]}\nQuestion: ?", "output": outputs[1], "f1": 1.0},
        {"input": f"Context:\n{EVIDENCE[0]}\nQuestion: ?", "output": outputs[0], "f1": 0.0},
        {"input": "a prompt of other data", "output": "x", "f1": 1.0},
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")


def test_question_figures_count_each_answered_question_by_its_row(tmp_path):
    _write_dump(tmp_path / "12.jsonl", [INVENTING, COPYING])
    figures = bench.question_figures(bench.validation_samples(tmp_path / "12.jsonl", _world_rows()), _world_rows())
    # [contradicted, judged claims, F1, contradicted that the lexical verifier passes, steps, exact match,
    # every gold hop stated as a supported step]
    assert figures == {"0": [2, 3, 0.0, 1, 4, 0, 0], "1": [0, 2, 1.0, 0, 2, 1, 1]}
    assert bench.figure_value({"per_question": figures}, "verifier_blind_rate") == 0.5


def test_a_finished_result_gets_its_per_question_figures_from_its_dumps(tmp_path):
    from fspo.data.io import write_parquet

    args = bench._parser().parse_args(["--output-dir", str(tmp_path)])
    write_parquet(_world_rows()[:2], tmp_path / "data" / "seed0" / "test.parquet")
    out = tmp_path / "fspo" / "seed0"
    _write_dump(out / "validation" / "0.jsonl", [INVENTING, COPYING])
    faithful = "Ada Lin works for Sun Co. Sun Co is headquartered in Pell. </think> <answer> Pell </answer>"
    _write_dump(out / "validation" / "12.jsonl", [faithful, COPYING])
    finished = {**_run("fspo", 0, 0.5, 0.2), "dtype": "float32", "config": bench.run_config("fspo", 0, args)}
    (out / "result.json").write_text(json.dumps(finished))
    result = bench.run_once("fspo", 0, args, tmp_path / "model", clock=0.0)
    assert result["before"]["per_question"]["0"] == [2, 3, 0.0, 1, 4, 0, 0]
    assert result["after"]["per_question"]["0"] == [0, 2, 0.0, 0, 2, 1, 1]
    assert json.loads((out / "result.json").read_text()) == result  # kept: the next summary reads it
    assert bench.figure_value(result["before"], "verifier_blind_rate") == 0.5
    assert bench.figure_value(_run("fspo", 0, 0.5, 0.2)["after"], "verifier_blind_rate") is None


def test_comparisons_size_the_next_measurement_from_three_seeds_on():
    results = [
        _run(arm, seed, f1, 0.2)
        for seed, (a, b) in enumerate([(0.4, 0.3), (0.6, 0.3), (0.4, 0.5)])
        for arm, f1 in (("fspo", a), ("grpo", b))
    ]
    f1 = next(row for row in bench.comparisons(results) if row["figure"] == "answer_f1")
    assert f1["sd"] == pytest.approx(0.2) and f1["seeds_for_target"] == bench.seeds_needed(0.2, 0.05)
    assert f1["question_sd"] is None  # the results carry no per-question figures
    assert "| 3 | no | 0.200 | n/a | 64 |" in bench.comparison_table([f1])
    two = bench.comparisons(results[:4])
    assert all(row["seeds_for_target"] is None for row in two)


@pytest.mark.parametrize("keep", [False, True])
def test_a_judged_run_drops_its_weights_unless_asked_to_keep_them(tmp_path, monkeypatch, keep):
    from fspo.data.io import write_parquet

    val_file = write_parquet(_world_rows()[:2], tmp_path / "val.parquet")
    out = tmp_path / "o" / "fspo" / "seed0"

    def train(name, setup, run_out, steps, seed, overrides, clock, shared_before, python):
        (run_out / "ckpt" / "global_step_1").mkdir(parents=True)
        (run_out / "ckpt" / "global_step_1" / "optim.pt").write_bytes(b"0" * 64)
        dumps = {"before": run_out / "validation" / "0.jsonl", "after": run_out / "validation" / "1.jsonl"}
        return {"seconds": 1.0, "before": {}, "after": {}, "validation_dumps": dumps}

    monkeypatch.setattr(bench, "prepare_data", lambda folder, seed, rows, world: (val_file, val_file))
    monkeypatch.setattr(bench, "train", train)
    monkeypatch.setattr(bench, "figures", lambda dump, rows, f1: {"answer_f1": f1})
    argv = ["--output-dir", str(tmp_path / "o"), *(["--keep-models"] if keep else [])]
    args = bench._parser().parse_args(argv)
    args.output_dir = args.output_dir.resolve()
    bench.run_once("fspo", 0, args, tmp_path / "model", clock=0.0)
    assert (out / "result.json").is_file()
    assert (out / "ckpt").exists() == keep


def test_live_steps_are_read_from_the_metrics_log_and_tabled_per_arm_over_runs(tmp_path):
    log = tmp_path / "metrics.jsonl"
    records = [{"step": 0, "data": {"val-core/f1": 0.1}}]  # validation before training: not a training step
    for step, (high, low) in enumerate([(0.0, 0.0), (1.5, -1.5), (0.0, -0.5), (0.0, 0.0)], start=1):
        records.append({"step": step, "data": {"critic/advantages/max": high, "critic/advantages/min": low}})
    log.write_text("\n".join(json.dumps(record) for record in records) + "\n")
    assert bench.live_steps(log) == [2, 4]
    assert bench.live_steps(tmp_path / "absent.jsonl") is None

    runs = [
        {**_run("fspo", 0, 0.3, 0.2), "live_steps": [6, 12]},
        {**_run("fspo", 1, 0.3, 0.2), "live_steps": [8, 12]},
        {**_run("grpo", 0, 0.3, 0.2), "live_steps": [5, 12]},
        {**_run("fdpo", 0, 0.3, 0.2), "live_steps": None},
    ]
    table = bench.live_steps_table(runs)
    mean, low, high, _ = t_interval([6, 8])
    assert f"| fspo | 2 | 7.0 of 12 | [{low:.1f}, {high:.1f}] | 6/12, 8/12 |" in table
    assert "| grpo | 1 | 5.0 of 12 | n/a | 5/12 |" in table
    assert "fdpo" not in table


def test_table_prints_the_tables_of_a_results_file_and_refuses_another_file_in_one_line(tmp_path, capsys):
    runs = [
        {**_run(arm, seed, 0.3 + seed / 10, 0.2), "live_steps": [6 + seed, 12]}
        for seed in range(3)
        for arm in ("fspo", "grpo")
    ]
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"steps": 12, "seeds": 3, "val_rows": 32, "runs": runs}))
    assert bench.main(["--table", str(results), "--chart", str(tmp_path / "chart.png")]) == 0
    assert capsys.readouterr().out.strip() == bench.report(runs, 12, 32)
    assert (tmp_path / "chart.png").stat().st_size > 1000
    (tmp_path / "other.json").write_text(json.dumps({"repeats": []}))
    assert bench.main(["--table", str(tmp_path / "other.json")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "not a results.json of this script" in error


def test_collect_tabulates_the_finished_runs_and_names_the_missing_ones(tmp_path, capsys):
    """Arms measured with different numbers of seeds make one comparison: --collect trains nothing, takes the
    finished runs trained under this invocation's configuration, and says which runs it left out and why."""
    argv = ["--arms", "fspo", "grpo", "knowrl", "--seeds", "3", "--output-dir", str(tmp_path)]
    args = bench._parser().parse_args(argv)
    finished = [("fspo", 0), ("grpo", 0), ("fspo", 1), ("grpo", 1), ("knowrl", 0), ("fspo", 2)]
    for index, (arm, seed) in enumerate(finished):
        out = tmp_path / arm / f"seed{seed}"
        out.mkdir(parents=True)
        run = {
            **_run(arm, seed, 0.3 + index / 10, 0.2),
            "live_steps": [8, 12],
            "config": bench.run_config(arm, seed, args),
        }
        (out / "result.json").write_text(json.dumps(run))
    # grpo seed 2 finished under another configuration: left out, as a resume would train it again.
    (tmp_path / "grpo" / "seed2").mkdir(parents=True)
    other = {**_run("grpo", 2, 0.3, 0.2), "config": ["seed=2", "fspo.verifier.threshold=0.5"]}
    (tmp_path / "grpo" / "seed2" / "result.json").write_text(json.dumps(other))

    assert bench.main([*argv, "--collect"]) == 0
    err = capsys.readouterr().out
    assert "[grpo seed 2] left out: finished before under another configuration" in err
    assert "[knowrl seed 1] left out: not trained yet" in err and "[knowrl seed 2] left out" in err
    written = json.loads((tmp_path / "results.json").read_text())
    assert [(r["arm"], r["seed"]) for r in written["runs"]] == sorted(finished, key=lambda run: run[1])
    fspo_grpo = next(r for r in written["comparisons"] if (r["arm"], r["baseline"]) == ("fspo", "grpo"))
    assert fspo_grpo["seeds"] == 2
    assert "| fspo | 3 |" in (tmp_path / "results.md").read_text()
    assert "| knowrl | 1 |" in (tmp_path / "results.md").read_text()

    assert bench.main(["--arms", "fdpo", "--seeds", "1", "--output-dir", str(tmp_path), "--collect"]) == 2
    assert "--collect: no finished run of these arms and seeds in" in capsys.readouterr().err


COMMITTED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "fspo_vs_grpo.json"


docs_spec = importlib.util.spec_from_file_location(
    "fspo_vs_grpo_docs", Path(__file__).parents[1] / "benchmarks" / "fspo_vs_grpo_docs.py"
)
docs = importlib.util.module_from_spec(docs_spec)
docs_spec.loader.exec_module(docs)


def test_the_docs_are_what_the_generator_writes_from_the_committed_comparison(capsys):
    """docs/results.md's generated sections are `fspo_vs_grpo_docs.py`'s from the committed results.json files, and
    the page shows `--table`'s per-answer table of the arms verbatim: a figure edited by hand or a stale table fails."""
    assert docs.main(["--check"]) == 0, capsys.readouterr().err
    for results in (docs.RESULTS, docs.OTHERS):
        assert bench.main(["--table", str(results)]) == 0
        answer_table = capsys.readouterr().out.strip().split("\n\n")[-2]
        assert answer_table.startswith("| arm | runs | flawed positives per question |")
        assert answer_table in docs.RESULTS_MD.read_text()


def test_the_lexical_threshold_labels_a_copied_sentence_supported_and_a_bridging_step_not():
    """What results.md says of FSPO's copying: at the quickstart's `lexical` threshold (1.0) a sentence copied
    from the evidence is supported and a step joining two hops in its own words is not."""
    from fspo.quickstart.step_report import TRAINING_VERIFIERS, VERIFIER_THRESHOLDS
    from fspo.verifiers.lexical import LexicalVerifier

    evidence = "Nora Vale works for Bolt Mills. Bolt Mills is headquartered in Lima."
    copied, bridging = "Bolt Mills is headquartered in Lima.", "So Nora Vale's employer is headquartered in Lima."
    verifier = LexicalVerifier(evidence_unit=TRAINING_VERIFIERS["lexical"]["evidence_unit"])
    assert VERIFIER_THRESHOLDS["lexical"] == 1.0
    assert "threshold 1.0" in docs.RESULTS_MD.read_text()
    copied_score, bridging_score = verifier.score([(evidence, copied), (evidence, bridging)])
    assert copied_score >= 1.0 > bridging_score


def _with_seeds(measured: dict, seeds: int) -> dict:
    """The committed FSPO and GRPO runs of seeds 0..``seeds``-1: those committed, the rest repeated from them
    under new seed numbers."""
    runs = [run for run in measured["runs"] if run["arm"] in ("fspo", "grpo")]
    have = sorted({run["seed"] for run in runs})
    return {
        **measured,
        "runs": [
            {**run, "seed": seed} for seed in range(seeds) for run in runs if run["seed"] == have[seed % len(have)]
        ],
    }


def _fspo_without_flawed_positives(measured: dict) -> dict:
    """FSPO's answers with no contradicted step, GRPO's with one in every answer: FSPO's flawed positives per
    question are 0 and GRPO's its exact match."""

    def judged(run: dict, contradicted: bool) -> dict:
        per_question = {
            q: [int(contradicted), max(record[1], int(contradicted)), *record[2:]]
            for q, record in run["after"]["per_question"].items()
        }
        return {**run, "after": {**run["after"], "per_question": per_question}}

    runs = [judged(run, run["arm"] == "grpo") if run["arm"] in ("fspo", "grpo") else run for run in measured["runs"]]
    return {**measured, "runs": runs}


def test_the_docs_say_what_the_interval_says_and_when_the_seeds_are_in():
    """The headline follows the measurement: still open below 8 seeds, a plain "does not show" at 8 when the
    interval spans 0, and "excludes 0" when it does (at any number of seeds)."""
    committed, others = json.loads(COMMITTED.read_text()), json.loads(docs.OTHERS.read_text())
    results_md = docs.RESULTS_MD.read_text()

    eight = _with_seeds(committed, 8)
    spans = docs.Comparison(eight).difference("fspo", "grpo", "flawed_positive_share")
    text = docs.written_docs(eight, others, results_md)
    if docs.spans_zero(spans):
        assert "this benchmark does not show that FSPO lowers them" in text
    quickstart = text[text.index(docs.FSPO_SECTION) :]
    assert "Seeds 0–7 are finished." in quickstart and "the same command resumes" not in quickstart

    lower = _fspo_without_flawed_positives(_with_seeds(committed, 6))
    text = docs.written_docs(lower, others, results_md)
    assert "FSPO's answers hold fewer flawed positives than GRPO's: the 95% interval of flawed positives" in text
    assert "FSPO's flawed positives per question are the fewer on every seed." in text
    assert "Seeds 0–5 of the 8 are finished; the same command resumes at seed 6" in text

    # Only the generated sections change: the rest of the page is kept as it was.
    assert text[text.index(docs.NEXT_SECTION) :] == results_md[results_md.index(docs.NEXT_SECTION) :]
    assert text[: text.index(docs.FSPO_SECTION)] == results_md[: results_md.index(docs.FSPO_SECTION)]


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)


def _with_a_run_field(change: tuple[int, str, object]) -> str:
    measured = json.loads(COMMITTED.read_text())
    index, field, value = change
    measured["runs"][index % len(measured["runs"])][field] = value
    return json.dumps(measured)


@settings(max_examples=25, deadline=None)  # a valid-shaped file costs a bootstrap (~0.3 s)
@given(
    content=st.one_of(
        _json_values.map(json.dumps),
        # A results.json with one of its fields replaced by any JSON value.
        st.tuples(st.sampled_from(["runs", "steps", "val_rows", "dtype"]), _json_values).map(
            lambda field: json.dumps({**json.loads(COMMITTED.read_text()), field[0]: field[1]})
        ),
        # A results.json with one field of one run replaced by any JSON value.
        st.tuples(
            st.integers(min_value=0),
            st.sampled_from(["arm", "seed", "seconds", "live_steps", "before", "after", "code_version"]),
            _json_values,
        ).map(_with_a_run_field),
        st.binary(max_size=40).map(lambda raw: raw.decode("latin-1")),
    )
)
def test_the_docs_generator_refuses_any_file_but_a_results_json_in_one_line(content, tmp_path_factory):
    """Any file that is not a results.json of the benchmark (a JSON value, a results.json with a field of
    another shape, bytes): one line naming it on stderr and exit 2. Reading and computing come before any
    write in both modes, so ``--check`` (which writes nothing) tests the writing mode's guard too."""
    import contextlib
    import io

    path = tmp_path_factory.mktemp("bad") / "results.json"
    path.write_text(content, encoding="latin-1")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = docs.main(["--results", str(path), "--check"])
    # 0 or 1: a field replaced by a value of its own shape still makes a results.json (same docs or others).
    assert code in (0, 1, 2)
    if code == 2:
        assert err.getvalue().count("\n") == 1 and err.getvalue().startswith(f"--results {path}: "), err.getvalue()


def test_a_run_on_another_world_names_it_and_the_default_worlds_configuration_is_unchanged():
    """--world shortcut enters the run's configuration (a default-world run is not reused for it); a default-world
    run's configuration is as before --world existed, so the committed runs stay finished."""
    default = bench.run_config("fspo", 0, bench._parser().parse_args([]))
    shortcut = bench.run_config("fspo", 0, bench._parser().parse_args(["--world", "shortcut"]))
    assert shortcut == [*default, "world=shortcut"]
    assert not any(entry.startswith("world=") for entry in default)


def test_a_later_arm_takes_no_validation_from_a_run_trained_at_other_code(tmp_path, capsys):
    """A finished run of an earlier invocation, at another commit, may have validated differently: the arm
    validates again and says why; at this commit it takes that run's figures."""
    args = bench._parser().parse_args(["--output-dir", str(tmp_path)])
    setup = {"model": tmp_path / "model", "train": tmp_path / "train.parquet", "val": tmp_path / "test.parquet"}
    earlier = {**_run("fspo", 0, 0.4, 0.1), "code_version": "abc123"}
    assert bench.shared_before("grpo", 0, args, setup, [earlier], clock=0.0) is None
    assert (
        "[grpo seed 0] validating before training again: fspo's run was trained at code abc123"
        in capsys.readouterr().out
    )
    earlier["code_version"] = bench.code_version()
    assert bench.shared_before("grpo", 0, args, setup, [earlier], clock=0.0) == ("fspo", earlier["before"])


def test_a_sweep_shares_its_cluster_only_where_a_run_alone_would_be_the_same(monkeypatch):
    """A joined run takes platform=cpu and the shared cluster's size: with an accelerator, or a platform or cluster
    size given, each run starts its own Ray instead."""
    monkeypatch.setenv("VERL_PLATFORM", "cpu")
    assert bench.sweep_refusal(["fspo.verifier.abstain_non_claims=true"]) is None
    assert "platform" in bench.sweep_refusal(["platform=gpu"])
    assert "ray_kwargs.ray_init.num_gpus" in bench.sweep_refusal(["+ray_kwargs.ray_init.num_gpus=2"])
    monkeypatch.setenv("VERL_PLATFORM", "cuda")
    assert "accelerator" in bench.sweep_refusal([])
