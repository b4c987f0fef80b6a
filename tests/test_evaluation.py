"""The evaluation pipeline: real tiny model, real tokenizer, real scorers and the lexical verifier."""

from __future__ import annotations

import csv
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fspo.config.verifier import verifier_config
from fspo.data.io import read_rows, write_parquet
from fspo.data.synthetic import make_rows
from fspo.evaluation import evaluate_model, results_table, supported_step_rate, write_results
from fspo.evaluation.cli import main, named_path
from fspo.evaluation.generation import GenerationSettings, hf_generation_config, vllm_sampling_options
from fspo.evaluation.records import read_records
from fspo.utils.input_files import InputFileError
from fspo.utils.output_dir import release_output_folders
from fspo.utils.record_schemas import Prediction
from fspo.verifiers import build_verifier

FAST = ["--max-new-tokens", "4", "--batch-size", "2"]


def assert_refused(capsys, argv: list[str], pattern: str, after_loading: bool = False) -> None:
    """`fspo evaluate argv` exits 2 with one line on stderr that matches ``pattern`` (before it, only the
    model's loading progress when the refusal comes ``after_loading``)."""
    import re

    capsys.readouterr()
    try:
        assert main(argv) == 2
    finally:
        release_output_folders()  # what the fspo dispatcher does as a command ends (main is called directly)
    err = capsys.readouterr().err
    assert err.endswith("\n") and re.search(pattern, err.splitlines()[-1]), err
    assert after_loading or err.count("\n") == 1, err


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from fspo_testing.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "synth.parquet"
    write_parquet(make_rows(4, seed=0, split="test"), path)
    return path


def test_cli_writes_predictions_table_and_chart(tiny_dir, bench, tmp_path):
    out = tmp_path / "out"
    code = main(
        [
            "--model",
            f"first={tiny_dir}",
            "--model",
            f"second={tiny_dir}",
            "--data",
            str(bench),
            "--data",
            f"again={bench}",
            "--output-dir",
            str(out),
            "--limit",
            "1",
            *FAST,
        ]
    )
    assert code == 0
    for model in ("first", "second"):
        for benchmark in ("synth", "again"):
            records = read_records(out / "predictions" / f"{model}__{benchmark}.jsonl", Prediction)
            assert [r["index"] for r in records] == [0]
            assert all(len(r["responses"]) == 1 and 0.0 <= r["score"] <= 1.0 for r in records)
    with open(out / "results.csv", newline="") as handle:
        table = list(csv.reader(handle))
    assert table[0] == ["model", "synth", "again"]
    assert [row[0] for row in table[1:]] == ["first", "second"]
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"first", "second"} and results["first"]["synth"]["n"] == 1
    markdown = (out / "results.md").read_text()
    assert "| first |" in markdown and "| second |" in markdown and "synth" in markdown
    assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_generates_each_row_once(tiny_dir, bench, tmp_path):
    out = tmp_path / "out"
    args = ["--model", f"m={tiny_dir}", "--data", str(bench), "--output-dir", str(out), *FAST]
    main([*args, "--limit", "1"])
    jsonl = out / "predictions" / "m__synth.jsonl"
    first_line = jsonl.read_text().splitlines()[0]
    main([*args, "--limit", "2"])
    lines = jsonl.read_text().splitlines()
    assert lines[0] == first_line  # the finished row was kept, not regenerated
    assert [json.loads(line)["index"] for line in lines] == [0, 1]
    assert json.loads((out / "results.json").read_text())["m"]["synth"]["generated"] == 1


def test_resume_drops_a_half_written_line(tmp_path):
    path = tmp_path / "p.jsonl"
    record = {"index": 0, "prompt": "p", "responses": ["r"], "sample_scores": [1.0], "score": 1.0}
    path.write_text(json.dumps(record) + '\n{"index": 1, "sc')
    assert read_records(path, Prediction) == [record]
    # Only a cut-short last line: one in the middle, or a record that does not fit, names its line.
    path.write_text('{"index": 1, "sc\n' + json.dumps(record) + "\n")
    with pytest.raises(InputFileError, match="p.jsonl, line 1: not valid JSON"):
        read_records(path, Prediction)
    path.write_text(json.dumps({**record, "sample_scores": [None]}) + "\n")
    with pytest.raises(InputFileError, match=r"line 1: field sample_scores\[0\]: expected `float`, got `null`"):
        read_records(path, Prediction)


def test_cli_with_lexical_verifier_reports_supported_step_rate(tiny_dir, bench, tmp_path):
    out = tmp_path / "out"
    main(
        [
            "--model",
            f"m={tiny_dir}",
            "--data",
            str(bench),
            "--output-dir",
            str(out),
            "--limit",
            "1",
            "--verifier",
            "lexical",
            *FAST,
        ]
    )
    metrics = json.loads((out / "results.json").read_text())["m"]["synth"]
    assert {"supported_step_rate", "supported_steps", "verified_steps"} <= set(metrics)
    assert "Supported step rate" in (out / "results.md").read_text()


def test_supported_step_rate_counts_supported_verifiable_steps():
    rows = make_rows(2, seed=1)
    supported = " ".join(rows[0]["extra_info"]["gold_facts"])
    records = [
        {
            "evidence": rows[0]["extra_info"]["evidence"],
            "responses": [f"<think>{supported} Zorblax quintuple vexes marmalade.</think><answer>x</answer>"],
        },
        {"evidence": "", "responses": ["<think>Not checked: no evidence.</think><answer>y</answer>"]},
    ]
    result = supported_step_rate(records, build_verifier(verifier_config({"name": "lexical"})))
    facts = len(rows[0]["extra_info"]["gold_facts"])
    assert result["verified_steps"] + result["unverifiable_steps"] == facts + 1
    assert result["supported_steps"] == facts
    assert math.isclose(result["supported_step_rate"], facts / result["verified_steps"])


def test_evaluate_model_api_returns_means(tiny_dir, tmp_path):
    rows = make_rows(2, seed=0)
    metrics = evaluate_model(tiny_dir, rows, max_new_tokens=4, backend="hf", predictions_path=tmp_path / "p.jsonl")
    assert metrics["n"] == 2 and metrics["generated"] == 2
    assert {"score", "acc", "em", "f1", "format_ok"} <= set(metrics)
    paths = write_results({"tiny": {"synth": metrics}}, tmp_path / "res")
    assert all(path.exists() for path in paths.values())


def test_bad_inputs_name_what_to_fix(tiny_dir, bench, tmp_path, capsys):
    assert_refused(
        capsys,
        ["--model", str(tiny_dir), "--data", str(tmp_path / "missing.parquet"), "--output-dir", str(tmp_path)],
        "does not exist",
    )
    assert_refused(
        capsys,
        ["--model", f"a={tiny_dir}", "--model", f"a={tiny_dir}", "--data", str(bench), "--output-dir", str(tmp_path)],
        "share a name",
    )
    # A number out of its declared range is argparse's refusal (fspo.config.numeric_options): exit 2, its last line.
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["--model", str(tiny_dir), "--data", str(bench), "--output-dir", str(tmp_path), "--top-p", "0"])
    release_output_folders()
    assert exit_.value.code == 2
    assert "argument --top-p: must be in (0, 1]" in capsys.readouterr().err.splitlines()[-1]
    with pytest.raises(ValueError, match="no scorer for data_source 'nope'"):
        evaluate_model(tmp_path / "not-loaded", [{**read_rows(bench)[0], "data_source": "nope"}])
    with pytest.raises(ValueError, match="ground_truth"):
        evaluate_model(tmp_path / "not-loaded", [{**read_rows(bench)[0], "reward_model": {}}])


@given(
    st.dictionaries(
        st.sampled_from(["m1", "m2", "m3"]),
        st.dictionaries(
            st.sampled_from(["a", "b", "c"]), st.fixed_dictionaries({"score": st.floats(0, 1)}), min_size=1
        ),
        min_size=1,
    )
)
def test_results_table_has_one_row_per_model_and_column_per_benchmark(results):
    header, rows = results_table(results)
    benchmarks = {b for per in results.values() for b in per}
    assert header[0] == "model" and set(header[1:]) == benchmarks and len(header) == len(benchmarks) + 1
    assert [row[0] for row in rows] == list(results)
    for row in rows:
        for benchmark, value in zip(header[1:], row[1:]):
            expected = results[row[0]].get(benchmark, {}).get("score")
            assert math.isnan(value) if expected is None else value == expected


@given(st.from_regex(r"[A-Za-z0-9_]{1,10}", fullmatch=True), st.from_regex(r"[a-z]{1,8}", fullmatch=True))
def test_named_path_splits_name_and_path(name, stem):
    if "__" in name:  # the separator of <model>__<benchmark>.jsonl
        with pytest.raises(Exception, match="not '__'"):
            named_path(f"{name}=/x/{stem}.parquet")
        return
    assert named_path(f"{name}=/x/{stem}.parquet") == (name, __import__("pathlib").Path(f"/x/{stem}.parquet"))
    assert named_path(f"/x/{stem}.parquet")[0] == stem


def test_named_path_names_a_split_file_after_its_folder():
    assert named_path("data/gsm8k/test.parquet")[0] == "gsm8k"
    assert named_path("run/global_step_2/merged")[0] == "global_step_2"
    with pytest.raises(Exception, match="may only hold"):
        named_path("a b=data/x.parquet")


def test_cli_verifier_without_its_required_option_stops_with_the_fix(tiny_dir, bench, tmp_path, capsys):
    base = ["--model", str(tiny_dir), "--data", str(bench), "--output-dir", str(tmp_path / "out")]
    assert_refused(capsys, [*base, "--verifier", "nli"], "needs fspo.verifier.model_path")
    assert_refused(capsys, [*base, "--verifier", "lexical", "--verifier-option", "cache_size"], "KEY=VALUE")


def test_row_evidence_joins_paragraphs_and_finds_the_released_column():
    # Training, `fspo data check` and evaluation all read evidence through fspo.evidence.row_evidence.
    from fspo.evidence import evidence_text, row_evidence

    row = {"extra_info": {"evidence": ["Ann was born in Oslo.", "  ", "Oslo is in Norway."]}}
    assert row_evidence(row) == evidence_text(row["extra_info"]) == "Ann was born in Oslo.\n\nOslo is in Norway."
    # A released FSPO file keeps it in a top-level column.
    released = {"extra_info": {"index": 0, "split": "test"}, "knowledge": "Ann was born in Oslo."}
    assert row_evidence(released, "knowledge") == "Ann was born in Oslo."
    assert row_evidence(released) == ""


def test_evaluation_accepts_the_released_and_verl_source_names():
    from fspo.evaluation.pipeline import check_rows, score_record

    row = {"prompt": [{"role": "user", "content": "q"}], "reward_model": {"ground_truth": "18"}}
    check_rows([{**row, "data_source": "GSM8K"}, {**row, "data_source": "openai/gsm8k"}])
    assert score_record({**row, "data_source": "GSM8K"}, ["<answer>18</answer>"])["acc"] == 1.0
    assert score_record({**row, "data_source": "openai/gsm8k"}, ["#### 18"])["acc"] == 1.0


# --- Resume keyed by what produced the predictions; results accumulate (issue 12) ---


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory):
    """Two different models saved where scripts/merge_checkpoint.sh puts them: both named `merged`."""
    from fspo_testing.tiny_model import build_tiny_model

    run = tmp_path_factory.mktemp("run")
    return [build_tiny_model(run / f"global_step_{step}" / "merged", seed=step) for step in (1, 2)]


def test_two_merged_checkpoints_are_not_confused(two_steps, bench, tmp_path):
    out = tmp_path / "out"
    common = ["--data", str(bench), "--output-dir", str(out), "--limit", "2", *FAST]
    main(["--model", str(two_steps[0]), *common])
    main(["--model", str(two_steps[1]), *common, "--prompt-format", "qwen-base"])
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"global_step_1", "global_step_2"}  # named after the step, both kept in the table
    assert results["global_step_2"]["synth"]["generated"] == 2


@pytest.mark.parametrize(
    "change, named",
    [
        (["--model", "m={step2}"], "model"),
        (["--max-new-tokens", "5"], "max_new_tokens"),
        (["--prompt-format", "qwen-base"], "prompt_format"),
        (["--samples", "2"], "samples"),
        (["--temperature", "0.7"], "temperature"),
    ],
)
def test_resume_refuses_predictions_made_otherwise(two_steps, bench, tmp_path, capsys, change, named):
    out = tmp_path / "out"
    common = ["--data", str(bench), "--output-dir", str(out), "--limit", "1"]
    main(["--model", f"m={two_steps[0]}", *common, *FAST])
    before = (out / "predictions" / "m__synth.jsonl").read_text()
    changed = [c.format(step2=two_steps[1]) for c in change]
    if changed[0] != "--model":
        changed = ["--model", f"m={two_steps[0]}", *changed]
    # the change comes last: it wins over FAST
    assert_refused(
        capsys, [*changed[:2], *common, *FAST, *changed[2:]], f"made with other settings.*{named}", after_loading=True
    )
    assert (out / "predictions" / "m__synth.jsonl").read_text() == before  # nothing lost
    main(["--model", f"m={two_steps[0]}", *common, *FAST])  # unchanged: resumes
    assert json.loads((out / "results.json").read_text())["m"]["synth"]["generated"] == 0


def test_a_rebuilt_data_file_regenerates_only_the_rows_that_changed(tiny_dir, tmp_path):
    data, out = tmp_path / "synth.parquet", tmp_path / "out"
    rows = make_rows(3, seed=0, split="test")
    write_parquet(rows, data)
    main(["--model", f"m={tiny_dir}", "--data", str(data), "--output-dir", str(out), *FAST])
    rows[1] = make_rows(3, seed=7, split="test")[1]
    write_parquet(rows, data)
    main(["--model", f"m={tiny_dir}", "--data", str(data), "--output-dir", str(out), *FAST])
    assert json.loads((out / "results.json").read_text())["m"]["synth"]["generated"] == 1
    records = read_records(out / "predictions" / "m__synth.jsonl", Prediction)
    assert sorted(r["index"] for r in records) == [0, 1, 2]  # the stale row 1 is gone, not duplicated


def test_results_accumulate_and_rebuild_from_the_predictions(tiny_dir, bench, tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from fspo.evaluation.report import results_from_predictions

    loads = []
    load = AutoTokenizer.from_pretrained
    monkeypatch.setattr(AutoTokenizer, "from_pretrained", lambda *a, **k: loads.append(a) or load(*a, **k))
    out = tmp_path / "out"
    for name in ("a", "b"):
        main(["--model", f"{name}={tiny_dir}", "--data", str(bench), "--output-dir", str(out), "--limit", "1", *FAST])
    # One tokenizer load per evaluation: the prompts' check and the generator share it (seconds each, for Qwen's).
    assert len(loads) == 2, loads
    results = json.loads((out / "results.json").read_text())
    assert set(results) == {"a", "b"}
    with open(out / "results.csv", newline="") as handle:
        assert [row[0] for row in csv.reader(handle)][1:] == ["a", "b"]
    rebuilt = results_from_predictions(out / "predictions")
    assert rebuilt["a"]["synth"]["score"] == results["a"]["synth"]["score"] and rebuilt["b"]["synth"]["n"] == 1


def test_a_model_folder_without_config_or_a_data_file_that_is_not_parquet_is_named(tiny_dir, bench, tmp_path, capsys):
    empty = tmp_path / "empty_model"
    empty.mkdir()
    assert_refused(
        capsys, ["--model", str(empty), "--data", str(bench), "--output-dir", str(tmp_path / "o")], "config.json"
    )
    text = tmp_path / "rows.jsonl"
    text.write_text('{"a": 1}\n')
    assert_refused(
        capsys,
        ["--model", str(tiny_dir), "--data", str(text), "--output-dir", str(tmp_path / "o")],
        "not a parquet file",
    )


def test_a_users_results_or_a_link_in_the_output_folder_is_refused_not_replaced(tiny_dir, bench, tmp_path, capsys):
    """fspo.utils.output_dir's rule: `--output-dir D` holding the user's results.md (or a link where fspo writes)
    is refused naming it, before a model loads, and nothing in D changes; a linked D is followed."""
    out = tmp_path / "D"
    out.mkdir()
    (out / "results.md").write_text("my notes")
    argv = ["--model", f"m={tiny_dir}", "--data", str(bench), "--output-dir", str(out), "--limit", "1", *FAST]
    assert_refused(capsys, argv, r"results\.md was not written by fspo")
    assert sorted(p.name for p in out.iterdir()) == ["results.md"] and (out / "results.md").read_text() == "my notes"
    (out / "results.md").unlink()
    (out / "predictions").mkdir()
    (out / "predictions" / "m__synth.jsonl").symlink_to(tmp_path / "elsewhere.jsonl")
    assert_refused(capsys, argv, r"predictions/m__synth\.jsonl is a symbolic link")
    assert not (tmp_path / "elsewhere.jsonl").exists()
    (out / "predictions" / "m__synth.jsonl").unlink()
    linked = tmp_path / "linked"
    linked.symlink_to(out)
    assert main([*argv[:5], str(linked), *argv[6:]]) == 0
    assert linked.is_symlink() and (out / "results.md").is_file()


# --- sampling: one set of parameters for both backends --------------------------------------------

_SETTINGS = st.builds(
    GenerationSettings,
    temperature=st.sampled_from([0.0, 0.6, 1.0]),
    top_p=st.floats(0.05, 1.0),
    top_k=st.integers(0, 50),
    samples=st.integers(1, 4),
)


@given(_SETTINGS)
def test_both_backends_take_the_same_sampling_parameters(settings):
    """vLLM's SamplingParams and transformers' GenerationConfig come from GenerationSettings.sampling() alone."""
    vllm = vllm_sampling_options(settings)
    hf = hf_generation_config(settings, eos_token_id=2, pad_token_id=0)
    assert hf.repetition_penalty == vllm["repetition_penalty"] == 1.0
    assert hf.max_new_tokens == vllm["max_tokens"]
    if settings.temperature == 0:
        assert not hf.do_sample and vllm["temperature"] == 0  # greedy in both: HF decodes once, the caller repeats
        return
    assert hf.num_return_sequences == vllm["n"]
    assert hf.do_sample and (hf.temperature, hf.top_p) == (vllm["temperature"], vllm["top_p"])
    assert (hf.top_k or 0) == max(vllm["top_k"], 0)  # off: HF 0, vLLM -1


def parsed_settings(*options: str) -> GenerationSettings:
    from fspo.evaluation.cli import build_parser, check_arguments

    args = build_parser().parse_args(["--model", "m", "--data", "d", "--output-dir", "o", *options])
    args.data = args.model = []  # the folders are not what this checks
    return check_arguments(args)


def test_top_k_minus_one_and_zero_are_off_as_in_verls_val_kwargs(capsys):
    """verl's val_kwargs.top_k -1 (verl/trainer/config/rollout/rollout.yaml:157-158) is what a recipe passes."""
    assert parsed_settings("--top-k", "-1").top_k == parsed_settings("--top-k", "0").top_k == 0
    assert parsed_settings().sampling()["top_k"] == 0
    assert parsed_settings("--top-k", "20").top_k == 20
    with pytest.raises(SystemExit):
        parsed_settings("--top-k", "-2")
    assert "argument --top-k: must be an integer >= -1 (-1 or 0: off)" in capsys.readouterr().err.splitlines()[-1]


def test_top_k_acts_in_the_transformers_backend(tiny_dir):
    """At temperature 1, `--top-k 1` leaves only the likeliest token: every sample is the greedy response."""
    from fspo.evaluation.generation import HFGenerator

    prompt = ["Question: where is Piobrdell?"]
    greedy_generator = HFGenerator(tiny_dir, GenerationSettings(max_new_tokens=6), device="cpu")
    (greedy,) = greedy_generator.generate(prompt)
    settings = parsed_settings("--temperature", "1", "--top-k", "1", "--samples", "4", "--max-new-tokens", "6")
    (top_1,) = HFGenerator(tiny_dir, settings, device="cpu", tokenizer=greedy_generator.tokenizer).generate(prompt)
    assert top_1 == greedy * 4
    assert vllm_sampling_options(settings)["top_k"] == 1  # and what vLLM is given


def test_a_float32_model_generates_with_ieee_matmuls_whatever_a_verifier_turned_on(tiny_dir, tmp_path):
    """A model verifier's GPU default (tf32) sets torch's process-wide flag; a LoRA fold, stored in float32 to keep
    an update below bf16's resolution, must not generate through TF32's 10-bit mantissa. The flag is restored after."""
    import shutil

    import torch

    from fspo.evaluation.generation import HFGenerator, keeps_float32
    from fspo.verifiers.model_base import resolve_dtype

    model_dir = shutil.copytree(tiny_dir, tmp_path / "model")
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "dtype": "float32", "torch_dtype": "float32"}))
    assert keeps_float32(model_dir)
    generator = HFGenerator(model_dir, GenerationSettings(max_new_tokens=2), device="cpu")
    seen, generate = [], generator.model.generate
    generator.model.generate = lambda **kw: seen.append(torch.backends.cuda.matmul.fp32_precision) or generate(**kw)
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        resolve_dtype("tf32", torch.device("cuda"), "hhem")  # what loading HHEM on a GPU does to the process
        assert matmul.fp32_precision == "tf32"
        generator.generate(["Question: where is Piobrdell?"])
        assert seen == ["ieee"] and matmul.fp32_precision == "tf32"
    finally:
        matmul.fp32_precision = before


def test_resume_needs_the_same_top_k_and_a_provenance_from_before_top_k_was_recorded_means_off(tmp_path):
    from fspo.evaluation.pipeline import ProvenanceError, check_provenance

    predictions = tmp_path / "m__synth.jsonl"
    predictions.write_text("")
    made = {"model": "f", "backend": "HFGenerator", "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 8, "seed": 0}
    check_provenance(predictions, made)  # an older fspo's record: no top_k
    check_provenance(predictions, {**made, "top_k": 0})
    with pytest.raises(ProvenanceError, match="top_k 0 -> 20"):
        check_provenance(predictions, {**made, "top_k": 20})


def test_the_transformers_backend_ignores_the_models_sampling_defaults(tiny_dir, tmp_path):
    """A model whose generation_config.json says top_k 1 (greedy in effect) still samples as the settings say, as
    vLLM does: at temperature 1 the samples of one prompt differ."""
    import shutil

    from fspo.evaluation.generation import HFGenerator

    model_dir = shutil.copytree(tiny_dir, tmp_path / "model")
    config_file = model_dir / "generation_config.json"
    config = json.loads(config_file.read_text()) if config_file.exists() else {}
    config_file.write_text(json.dumps({**config, "top_k": 1, "repetition_penalty": 1.3, "do_sample": True}))
    generator = HFGenerator(model_dir, GenerationSettings(temperature=1.0, max_new_tokens=6, samples=6), device="cpu")
    assert (generator.generation_config.top_k, generator.generation_config.repetition_penalty) == (0, 1.0)
    (samples,) = generator.generate(["Question: where is Piobrdell?"])
    assert len(set(samples)) > 1


def test_evaluate_run_sh_runs_without_an_activated_venv_at_the_longest_recipe_length(tiny_dir, bench, tmp_path):
    """evaluate/run.sh finds this checkout's .venv as the recipes do (a bare `fspo` exits 127 without an activated
    environment) and, without RECIPE=, generates up to the longest response a recipe trains (Qwen3's 4096)."""
    import os
    import subprocess
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    if not (repo / ".venv" / "bin" / "python").exists():
        pytest.skip("needs this checkout's .venv (scripts/setup.sh)")
    (tmp_path / "data" / "synth").mkdir(parents=True)
    (tmp_path / "data" / "synth" / "test.parquet").write_bytes(bench.read_bytes())
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHON", "MAX_NEW_TOKENS")}
    env.update(
        PATH="/usr/bin:/bin", DATA_DIR=str(tmp_path / "data"), BENCHMARKS="synth", OUTPUT_DIR=str(tmp_path / "eval")
    )
    command = ["bash", str(repo / "evaluate" / "run.sh"), str(tiny_dir), "--", "--limit", "1", "--backend", "hf"]
    # The last --max-new-tokens wins: the default is read from the script's line, the run kept short.
    process = subprocess.run(
        [*command, "--max-new-tokens", "4"], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert process.returncode == 0, process.stderr[-2000:]
    assert "generating up to 4096 new tokens, the longest data.max_response_length in recipes/" in process.stderr
    assert list((tmp_path / "eval" / "predictions").glob("*.jsonl"))
