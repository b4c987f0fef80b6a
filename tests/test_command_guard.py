"""The guard: every `fspo` command (enumerated from the dispatcher), the recipes' dry run and
scripts/merge_checkpoint.sh, driven with generated bad arguments and malformed files.

Each case must end without a traceback, within a time limit, with a non-zero exit and one line saying what is
wrong when it refuses, and without changing any file outside the command's own output folder. The example
count is bounded for CI; ``FSPO_GUARD_EXAMPLES=2000`` runs more (the count is printed).

Every option a command writes through (fspo.utils.output_dir.output_option) is driven with each output-folder class
(fspo_testing.command_guard.OUTPUT_CLASSES): a tampered record, a link swapped in for a listed path, a folder
another process is writing, a read-only folder, a file where the folder is expected.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fspo_testing.command_guard import (
    ALWAYS_BAD,
    BAD_VALUES,
    OUTPUT_CLASSES,
    TAMPERED_ENTRIES,
    build_outside,
    command_paths,
    describe,
    hold_folder,
    linked_folder,
    make_inputs,
    make_read_only,
    message_lines,
    options,
    output_options,
    run_in_process,
    snapshot,
    tampered_folder,
    undo_read_only,
)
from fspo_testing.warm_python import warm_python

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("FSPO_GUARD_EXAMPLES", "120"))
OUTPUT_EXAMPLES = int(os.environ.get("FSPO_GUARD_EXAMPLES", "200"))  # per output-folder class
LIMIT_S = 60.0
COUNT = {"fspo": 0, "recipe": 0, "merge": 0, **{f"output {name}": 0 for name in OUTPUT_CLASSES}}


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, request):
    """The malformed inputs (built once), a working folder, and the commands and their options."""
    root = tmp_path_factory.mktemp("guard")
    (root / "inputs").mkdir()
    inputs = make_inputs(root / "inputs")
    work = root / "work"
    work.mkdir()
    leaves = command_paths()
    commands = {leaf: options(leaf) for leaf in leaves}
    yield {"root": root, "inputs": inputs, "work": work, "commands": commands, "outputs": output_options(leaves)}
    print(f"\ncommand guard: {sum(COUNT.values())} generated cases {COUNT}")


def test_every_command_is_enumerated(guarded):
    """A new command or dataset is covered without editing the guard: the nested ones are found."""
    commands = guarded["commands"]
    assert {("verify",), ("evaluate",), ("quickstart",), ("train",), ("data", "check")} <= set(commands)
    assert ("verifier", "train") in commands and ("verifier", "download") in commands
    assert ("data", "hotpotqa") in commands and ("data", "synthetic") in commands
    assert "--output-dir" in commands[("evaluate",)] and "fspo.verifier.threshold" in commands[("train",)]


def value_strategy(inputs, always_bad=False, files_only=False):
    """A value for an option: a bad word or a malformed file; ``always_bad``: one no option may accept (a path
    only where it is an existing file no command can write into or read: ``files_only``)."""
    malformed = [name for name, path in inputs.items() if path.is_file()]
    files = sorted(malformed if always_bad else inputs)
    paths = st.sampled_from(files).map(lambda name: str(inputs[name]))
    if files_only:
        return paths
    return st.one_of(st.sampled_from(ALWAYS_BAD if always_bad else BAD_VALUES), paths)


@st.composite
def fspo_case(draw, guarded):
    commands = guarded["commands"]
    path = draw(st.sampled_from(sorted(commands)))
    flags = commands[path]
    # quickstart trains for real once its arguments pass: a word like "nan" is a fine --output-dir there.
    bad = value_strategy(guarded["inputs"], always_bad=True, files_only=path == ("quickstart",))
    values = value_strategy(guarded["inputs"])
    argv = list(path)
    if path == ("train",):  # the dry run (in_work); platform=cpu: no line about the platform it picked
        keys = draw(st.lists(st.sampled_from(flags), min_size=1, max_size=3))
        argv += ["platform=cpu", *(f"{key}={draw(bad if i == 0 else values)}" for i, key in enumerate(keys))]
        return argv
    if draw(st.booleans()):
        argv.append(draw(values))  # a positional: a file, a dataset name, a bad word
    # One flag at least with a value no option may take, so that no case runs for real.
    for i, flag in enumerate(draw(st.lists(st.sampled_from(flags), min_size=1, max_size=3))):
        argv += [flag, draw(bad if i == 0 else values)]
    return argv


@pytest.fixture
def in_work(guarded, monkeypatch):
    monkeypatch.chdir(guarded["work"])
    # The train dry run: validate and print, start nothing; no model is looked up on the hub.
    monkeypatch.setenv("FSPO_DRY_RUN", "1")
    monkeypatch.setenv("FSPO_PREFLIGHT", "0")
    return guarded


def check_fspo_case(guarded, argv):
    COUNT["fspo"] += 1
    before = snapshot(guarded["inputs"]["truncated.json"].parent)
    outcome = run_in_process(argv, LIMIT_S)
    shown = describe(argv)
    assert outcome.raised is None, f"fspo {shown} raised {outcome.raised!r}"
    assert "Traceback" not in outcome.stderr, f"fspo {shown}: traceback\n{outcome.stderr[-2000:]}"
    after = snapshot(guarded["inputs"]["truncated.json"].parent)
    assert after == before, f"fspo {shown} changed files outside its output: {set(after.items()) ^ set(before.items())}"
    if outcome.status != 0:
        lines = message_lines(outcome.stderr)
        assert len(lines) == 1, f"fspo {shown} exited {outcome.status} with {len(lines)} lines: {lines[:5]}"


def test_every_fspo_command_refuses_bad_arguments_in_one_line(in_work, capsys):
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(argv=fspo_case(in_work))
    def case(argv):
        check_fspo_case(in_work, argv)

    case()
    with capsys.disabled():
        print(f"\ncommand guard: {COUNT['fspo']} generated cases over {len(in_work['commands'])} commands")


def checkpoint(root: Path, broken: str) -> Path:
    """A run folder as verl saves it, with one part ``broken``."""
    run = root / f"run_{broken}"
    actor = run / "global_step_1" / "actor"
    (actor / "huggingface").mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text("1\n")
    (actor / "fsdp_config.json").write_text('{"FSDP_version": 2, "world_size": 1}')
    (actor / "huggingface" / "config.json").write_text('{"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}')
    (actor / "model_world_size_1_rank_0.pt").write_bytes(b"not a torch file")
    if broken == "latest":
        (run / "latest_checkpointed_iteration.txt").write_text(
            "\udcff".encode("utf-8", "surrogateescape").decode("latin-1")
        )
    elif broken == "fsdp_config":
        (actor / "fsdp_config.json").write_text("{")
    elif broken == "fsdp_list":
        (actor / "fsdp_config.json").write_text("[2]")
    elif broken == "world_size":
        (actor / "fsdp_config.json").write_text('{"world_size": 0}')
    elif broken == "hf_config":
        (actor / "huggingface" / "config.json").write_text("{")
    elif broken == "no_shard":
        (actor / "model_world_size_1_rank_0.pt").unlink()
    elif broken == "zip_shard":  # a whole zip, not a torch file: verl's merger is what fails
        with zipfile.ZipFile(actor / "model_world_size_1_rank_0.pt", "w") as archive:
            archive.writestr("notes.txt", "not tensors")
    return run


MERGE_BREAKS = ("shard", "latest", "fsdp_config", "fsdp_list", "world_size", "hf_config", "no_shard", "zip_shard")


@pytest.mark.parametrize("broken", MERGE_BREAKS)
def test_merge_checkpoint_refuses_a_broken_checkpoint_in_one_line(tmp_path, broken):
    COUNT["merge"] += 1
    run = checkpoint(tmp_path, broken)
    before = snapshot(run)
    result = subprocess.run(
        ["bash", str(REPO / "scripts/merge_checkpoint.sh"), "--target-dir", str(tmp_path / "merged"), str(run)],
        capture_output=True,
        text=True,
        timeout=LIMIT_S * 3,
        env={**os.environ, "PYTHONPATH": str(REPO), "PYTHON": warm_python()},
    )
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode != 0
    # Its progress line ("merging A -> B") may come first; the refusal is one line, the last.
    refusals = [line for line in message_lines(result.stderr) if line.startswith("merge_checkpoint.sh: ")]
    assert len(refusals) == 1 and message_lines(result.stderr)[-1] == refusals[0], result.stderr[-2000:]
    assert snapshot(run) == before
    assert not (tmp_path / "merged").exists()


RECIPE_CASES = (
    ("model_bad_config", "truncated.json", "fspo.verifier.threshold=nan"),
    ("missing", "csv.parquet", "data.train_batch_size=0"),
)


@pytest.mark.parametrize(("model", "data", "override"), RECIPE_CASES)
def test_recipe_dry_run_refuses_bad_inputs_without_a_traceback(guarded, tmp_path, model, data, override):
    COUNT["recipe"] += 1
    inputs = guarded["inputs"]
    before = snapshot(inputs["truncated.json"].parent)
    result = subprocess.run(
        ["bash", str(REPO / "recipes/run_cpu.sh"), override],
        capture_output=True,
        text=True,
        timeout=LIMIT_S * 3,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "PYTHON": warm_python(),  # the dry run forks from an interpreter that imported verl once
            "FSPO_DRY_RUN": "1",
            "FSPO_PREFLIGHT": "0",
            "MODEL_PATH": str(inputs[model]),
            "TRAIN_FILES": f"[{inputs[data]}]",
            "VAL_FILES": f"[{inputs[data]}]",
            "CKPT_DIR": str(tmp_path / "ckpt"),
        },
    )
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode != 0, result.stderr[-2000:]
    assert snapshot(inputs["truncated.json"].parent) == before


# What the guard found on the code before this round (each was a traceback or Hydra's several lines):
FOUND = [
    pytest.param(["quickstart", "--output-dir", "{bad.toml}"], "is a file, not a folder", id="quickstart-output-file"),
    pytest.param(["quickstart", "--fresh", "\udcff"], "not Unicode text", id="quickstart-surrogate-override"),
    pytest.param(["quickstart", "{truncated.json}"], "is not a Hydra override", id="quickstart-path-as-override"),
    pytest.param(["train", "platform=cpu", "fspo.dump_dir=="], "is not a Hydra override", id="train-bad-override"),
    pytest.param(["train", "platform=cpu", "fspo.flip=a\ud800b"], "not Unicode text", id="train-surrogate"),
    pytest.param(["data", "math500", "--tokenizer", "{list_line.jsonl}"], "cannot load the tokenizer", id="data-tok"),
    pytest.param(["data", "check", "--require-evidence", "\udcff"], "cannot train", id="data-check-surrogate-name"),
    # transformers' message for a hub id it cannot reach offline is several lines
    pytest.param(["data", "check", "0", "--tokenizer", "nan"], "cannot load the tokenizer 'nan'", id="data-check-tok"),
]


@pytest.mark.parametrize(("argv", "message"), FOUND)
def test_what_the_guard_found_is_one_line(in_work, argv, message):
    inputs = in_work["inputs"]
    argv = [inputs[arg[1:-1]].as_posix() if arg.startswith("{") else arg for arg in argv]
    outcome = run_in_process(argv, LIMIT_S)
    assert outcome.raised is None and "Traceback" not in outcome.stderr, (outcome.raised, outcome.stderr[-2000:])
    assert outcome.status != 0
    lines = message_lines(outcome.stderr)
    assert len(lines) == 1 and message in lines[0], lines


@pytest.mark.parametrize(
    "override",
    [
        "data.max_prompt_length=0",
        "data.max_response_length=-1",
        "data.max_response_length=nan",
        "trainer.total_training_steps=inf",
        "trainer.total_training_steps=0",
        "trainer.total_epochs=0",
    ],
)
def test_the_dry_run_refuses_the_sizes_the_run_trips_on(in_work, override):
    """Was: the dry run accepted these (found by driving it with every edge value), and the run failed in verl."""
    outcome = run_in_process(["train", "platform=cpu", override], LIMIT_S)
    assert outcome.status == 2 and outcome.raised is None
    assert message_lines(outcome.stderr) == [f"fspo: {override} must be a positive integer"], outcome.stderr[-1500:]


# ---- Record kinds, line separators and numeric options (issue 45: the reader, the schemas, the numbers) ----
# Each class is generated from what the code declares (the record schemas, the parsers' numeric options, the
# config dataclasses' numeric fields), so a new record kind, option or key is covered without editing this file.

from fspo_testing.command_guard import (  # noqa: E402 - this section's own imports, kept beside it
    BAD_NUMBERS,
    LINE_SEPARATORS,
    config_numbers,
    corrupted_records,
    jsonl_bytes,
    must_refuse,
    numeric_options,
    record_examples,
    record_kinds,
    with_separator,
)

COUNT_45 = {
    "record-field": 0,
    "record-command": 0,
    "separator": 0,
    "numeric-option": 0,
    "config-number": 0,
    "config-number-dry-run": 0,
}


def record_commands(path: Path, work: Path, model: Path) -> dict[str, list[str]]:
    """The command that reads each record kind, given a file of that kind (kinds only read inside a longer
    command, the judge's verdicts, verl's dumps, are covered at the reader: test_every_record_kind_...)."""
    return {
        "Prediction": ["fdpo", "build-pairs", str(path), "--pairs", str(work / "pairs.jsonl"), "--verifier", "lexical"],
        "Pair": ["fdpo", "train", "--model", str(model), "--pairs", str(path), "--output-dir", str(work / "dpo")],
        "LabelledClaim": ["verify", "--labelled", str(path), "--verifier", "lexical"],
        "VerifyRow": ["verify", str(path), "--verifier", "lexical"],
    }


@pytest.fixture(scope="module")
def fake_model(tmp_path_factory):
    """A folder that passes the model-folder check (config and a weights file), for commands that check the
    model before they read their records."""
    model = tmp_path_factory.mktemp("model")
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    (model / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")  # a header the model door reads
    return model


def test_every_record_kind_has_an_example():
    assert sorted(record_examples()) == record_kinds()
    for schema, record in record_examples().values():
        assert fits_schema(schema, record)


def fits_schema(schema, record):
    from fspo_testing.command_guard import fits

    return fits(schema, record)


def test_every_record_kind_refuses_a_bad_field_in_one_line_naming_it(tmp_path):
    """null, NaN, inf, float32 overflow, 2**64, a wrong type in every field, and every required field dropped,
    of every record kind: the reader refuses each naming the file, the line and the field."""
    from fspo.utils.input_files import InputFileError, read_json, read_jsonl

    for kind, (schema, record) in record_examples().items():
        for broken, bad in corrupted_records(schema, record):
            COUNT_45["record-field"] += 1
            path = tmp_path / f"{kind}.jsonl"
            path.write_bytes(jsonl_bytes([record, bad]))
            with pytest.raises(InputFileError) as refused:
                read_jsonl(path, schema=schema)
            message = str(refused.value)
            field = broken.removeprefix("no ").split("=")[0]
            assert "\n" not in message and f"{path}, line 2: " in message and field in message, (kind, broken, message)
            if kind == "Provenance":  # a JSON file, not JSON Lines
                path.write_text(json.dumps(bad))
                with pytest.raises(InputFileError, match=field):
                    read_json(path, schema=schema)


def test_commands_refuse_a_bad_record_field_in_one_line(in_work, fake_model, tmp_path):
    """The commands that read a record kind refuse a corrupted one (a sample per kind: each kind's fields in
    turn) in one line naming the line and the field, and change no file."""
    for kind, command in record_commands(tmp_path / "records.jsonl", tmp_path, fake_model).items():
        schema, record = record_examples()[kind]
        cases = corrupted_records(schema, record)
        for broken, bad in cases[:: max(1, len(cases) // 12)]:
            COUNT_45["record-command"] += 1
            (tmp_path / "records.jsonl").write_bytes(jsonl_bytes([record, bad]))
            before = snapshot(tmp_path)
            outcome = run_in_process(command, LIMIT_S)
            assert outcome.raised is None and "Traceback" not in outcome.stderr, (kind, broken, outcome.stderr[-1500:])
            lines = message_lines(outcome.stderr)
            field = broken.removeprefix("no ").split("=")[0]
            assert outcome.status == 2 and len(lines) == 1, (kind, broken, lines)
            assert "line 2" in lines[0] and field in lines[0], (kind, broken, lines)
            assert snapshot(tmp_path) == before


@pytest.mark.parametrize("separator", LINE_SEPARATORS)
def test_line_separators_bom_and_crlf_read_back_every_record(tmp_path, separator):
    """Every record kind, its text holding a character str.splitlines splits on, after a byte-order mark and
    with CRLF endings, reads back record for record; an unescaped NUL is refused naming its line."""
    from fspo.utils.input_files import InputFileError, read_jsonl

    for kind, (schema, record) in record_examples().items():
        COUNT_45["separator"] += 1
        records = [with_separator(record, separator), record]
        for bom, crlf in ((False, False), (True, False), (True, True)):
            path = tmp_path / f"{kind}.jsonl"
            path.write_bytes(jsonl_bytes(records, bom=bom, crlf=crlf))
            assert read_jsonl(path, schema=schema) == records, (kind, bom, crlf)
        written = jsonl_bytes(records)
        if separator.encode() not in written:  # a kind with no text field (the trainer's metrics)
            continue
        path.write_bytes(written.replace(separator.encode(), b"\x00", 1))
        with pytest.raises(InputFileError, match=r", line 1: not valid JSON"):
            read_jsonl(path, schema=schema)


@pytest.mark.parametrize("separator", ["\u2028", "\u0085"])
def test_verify_reads_every_row_whatever_its_text_holds(in_work, tmp_path, separator):
    """Was: a row with U+2028 in its response split in two (a JSON error), a BOM'd first row dropped."""
    COUNT_45["separator"] += 1
    schema, record = record_examples()["VerifyRow"]
    path = tmp_path / "rows.jsonl"
    path.write_bytes(jsonl_bytes([with_separator(record, separator), record, record], bom=True))
    outcome = run_in_process(["verify", str(path), "--verifier", "lexical"], LIMIT_S)
    assert outcome.status == 0, outcome.stderr[-1500:]
    assert "3 rows" in outcome.stdout


def test_every_numeric_option_refuses_nan_inf_float32_overflow_and_64_bits(in_work):
    """Every numeric option of every command (found from the parsers it builds), at each of BAD_NUMBERS:
    refused in one line naming the option. An option parsed with a bare int or float is found too (2**64 passes
    int(), 1e39 passes float())."""
    commands = in_work["commands"]
    for path in commands:
        if path == ("train",):
            continue
        for flag, kind in numeric_options(path).items():
            for value in BAD_NUMBERS:
                COUNT_45["numeric-option"] += 1
                argv = [*path, f"{flag}={value}"]
                outcome = run_in_process(argv, LIMIT_S)
                assert outcome.raised is None and "Traceback" not in outcome.stderr, (argv, outcome.stderr[-1500:])
                lines = message_lines(outcome.stderr)
                # A float option may take 2**64; the case still stops, one line, on the missing arguments.
                named = flag in lines[0] if lines and must_refuse(kind, value) else True
                assert outcome.status == 2 and len(lines) == 1 and named, (argv, lines)


def test_every_config_number_refuses_nan_inf_float32_overflow_and_64_bits(in_work):
    """Every numeric key of the fspo: block (its dataclasses' int and float fields) at each of BAD_NUMBERS it
    must refuse, parsed as Hydra parses an override: the config check the dry run makes refuses it in one line
    naming the key; a sample also through the dry run itself (a few seconds each; every pair with
    FSPO_GUARD_EXAMPLES >= 1000). Was: fspo.fapo_penalty=1e39 passed ("dry run OK") and became -inf in float32."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from fspo.config.fspo_config import fspo_config
    from fspo.config.vocabulary import ConfigError

    parser = OverridesParser.create()
    pairs = [(key, v) for key, kind in config_numbers().items() for v in BAD_NUMBERS if must_refuse(kind, v)]
    for key, value in pairs:
        COUNT_45["config-number"] += 1
        config = OmegaConf.create()
        OmegaConf.update(config, key, parser.parse_override(f"{key}={value}").value(), force_add=True)
        with pytest.raises(ConfigError) as refused:
            fspo_config(config)
        assert key in str(refused.value) and "\n" not in str(refused.value), (key, value)
    step = 1 if EXAMPLES >= 1000 else len(pairs) // 3
    for key, value in [*pairs[::step], ("fspo.fapo_penalty", "1e39")]:
        COUNT_45["config-number-dry-run"] += 1
        outcome = run_in_process(["train", "platform=cpu", f"{key}={value}"], LIMIT_S)
        assert outcome.raised is None and "Traceback" not in outcome.stderr, (key, value, outcome.stderr[-1500:])
        lines = message_lines(outcome.stderr)
        assert outcome.status == 2 and len(lines) == 1 and key in lines[0], (key, value, lines)


def test_every_config_number_is_declared_once():
    """Each numeric key of the fspo: block has its range and dtype in fspo.config.numeric_options (an enumerated one,
    label_outside_reasoning, is checked by its vocabulary)."""
    from fspo.config.numeric_options import FSPO_NUMBERS, VERIFIER_NUMBERS

    declared = {f"fspo.{k}" for k in FSPO_NUMBERS} | {f"fspo.verifier.{k}" for k in VERIFIER_NUMBERS}
    assert set(config_numbers()) - declared == {"fspo.label_outside_reasoning"}


def test_zz_report_counts_45(capsys):
    with capsys.disabled():
        print(f"\ncommand guard (records, separators, numbers): {COUNT_45}")


def test_every_option_that_names_an_output_claims_its_folder(guarded):
    """A command that writes is covered by the output-folder classes without being listed: its output options
    are declared with fspo.utils.output_dir.output_option (found from the dispatcher), and an option named like one
    that is not is a command writing around the rule."""
    outputs = guarded["outputs"]
    assert {("evaluate",), ("quickstart",), ("verifier", "train"), ("fdpo", "train"), ("data", "synthetic")} <= set(
        outputs
    )
    assert ("data", "gsm8k") in outputs and outputs[("verify",)] == {"--chart": "file"}
    for leaf, flags in guarded["commands"].items():
        named_like_an_output = {f for f in flags if re.fullmatch(r"--(out|output-dir|target-dir|chart|save-dir)", f)}
        assert named_like_an_output <= set(outputs.get(leaf, {})), (leaf, named_like_an_output)


@pytest.fixture(scope="module")
def output_world(guarded):
    """What the output-folder classes share: the user's files outside, a folder another process writes, a
    read-only folder, a plain file; let go of (and made writable again) at the end."""
    root = guarded["root"] / "outputs"
    root.mkdir()
    world = {"root": root, "outside": build_outside(root), "cases": root / "cases", "file": root / "a-file"}
    world["cases"].mkdir()
    world["file"].write_bytes(b"a user's file\n")
    world["held"] = root / "held"
    holder = hold_folder(world["held"], "fspo data gsm8k --output-dir held")
    world["holder"] = holder.pid
    world["read-only"] = root / "read-only"
    world["read_only_works"] = make_read_only(world["read-only"])
    yield world
    holder.kill()
    holder.wait()
    undo_read_only(world["read-only"])


FOLDER_NAME = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1, max_size=8
).filter(lambda name: name not in (".", ".."))


@st.composite
def output_case(draw, guarded, klass):
    """A command, one of its output options given a folder of ``klass`` (described here, made by
    :func:`make_case`), and one to three other options (the first with a value no option may take, so that no
    case runs for real whatever the folder check does)."""
    outputs = guarded["outputs"]
    leaf = draw(st.sampled_from(sorted(outputs)))
    flag, kind = draw(st.sampled_from(sorted(outputs[leaf].items())))
    if klass == "record":
        detail = draw(st.sampled_from(TAMPERED_ENTRIES))
    elif klass == "link":
        listed = draw(st.sampled_from(["sub/", "sub/inner.txt", "lora_adapter/adapter.bin", "sub"]))
        detail = (listed, draw(st.booleans()))
    else:
        detail = draw(st.sampled_from(["", "sub"]))  # the folder itself, or one to be made in it
    others = [f for f in guarded["commands"][leaf] if f != flag]
    rest = []
    if others:
        bad = value_strategy(guarded["inputs"], always_bad=True, files_only=leaf == ("quickstart",))
        for i, other in enumerate(draw(st.lists(st.sampled_from(others), min_size=1, max_size=3))):
            rest += [other, draw(bad if i == 0 else value_strategy(guarded["inputs"]))]
    return leaf, flag, kind, draw(FOLDER_NAME), detail, rest


def make_case(world, klass, case) -> tuple[list[str], Path]:
    """The argv of a drawn case and the folder it names, made on disk."""
    leaf, flag, kind, name, detail, rest = case
    command = "fspo " + " ".join(leaf)
    COUNT[f"output {klass}"] += 1
    folder = world["cases"] / f"{klass}-{COUNT[f'output {klass}']}-{name}"
    if klass == "record":
        tampered_folder(folder, world["outside"], detail, command)
    elif klass == "link":
        linked_folder(folder, world["outside"], *detail, command)
    else:
        folder = world[{"lock": "held", "read-only": "read-only", "file": "file"}[klass]] / detail
    value = str(folder / "out.png") if kind == "file" else str(folder)
    if kind == "file" and klass == "file":
        value = str(world["file"] / "out.png")
    return [*leaf, flag, value, *rest], folder


def watched(world, guarded, folder: Path) -> dict:
    """What no case may change: the outside, the inputs, and the folder the case names (or the one above it)."""
    folder = folder if folder.is_dir() else folder.parent
    return {
        "outside": snapshot(world["outside"]),
        "inputs": snapshot(guarded["inputs"]["truncated.json"].parent),
        "folder": snapshot(folder) if folder.is_dir() else None,
    }


@pytest.mark.parametrize("klass", sorted(OUTPUT_CLASSES))
def test_every_output_option_refuses_a_bad_folder_first_in_one_line(in_work, output_world, klass, capsys):
    if klass == "read-only" and not output_world["read_only_works"]:
        pytest.skip("this file system lets this user write a read-only folder")

    @settings(max_examples=OUTPUT_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(case=output_case(in_work, klass))
    def case(case):
        argv, folder = make_case(output_world, klass, case)
        before = watched(output_world, in_work, folder)
        outcome = run_in_process(argv, LIMIT_S)
        shown = describe(argv)
        assert outcome.raised is None, f"fspo {shown} raised {outcome.raised!r}"
        assert "Traceback" not in outcome.stderr, f"fspo {shown}: traceback\n{outcome.stderr[-2000:]}"
        assert watched(output_world, in_work, folder) == before, f"fspo {shown} changed files"
        lines = message_lines(outcome.stderr)
        assert outcome.status != 0 and len(lines) == 1, f"fspo {shown} exited {outcome.status}: {lines[:5]}"
        phrase = OUTPUT_CLASSES[klass] + (f" (pid {output_world['holder']}" if klass == "lock" else "")
        assert phrase in lines[0], f"fspo {shown}: its output folder ({klass}) was not what it refused: {lines[0]}"

    case()
    with capsys.disabled():
        print(
            f"\ncommand guard: {COUNT[f'output {klass}']} generated {klass} cases over {len(in_work['outputs'])} commands"
        )
