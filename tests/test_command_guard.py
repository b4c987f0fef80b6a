"""The guard: every `fspo` command (enumerated from the dispatcher), the recipes' dry run and
scripts/merge_checkpoint.sh, driven with generated bad arguments and malformed files.

Each case must end without a traceback, within a time limit, with a non-zero exit and one line saying what is
wrong when it refuses, and without changing any file outside the command's own output folder. The example
count is bounded for CI; ``FSPO_GUARD_EXAMPLES=2000`` runs more (the count is printed).

Every option a command writes through (fspo.utils.output_dir.output_option) is driven with each output-folder class
(fspo_testing.command_guard.OUTPUT_CLASSES): a tampered record, a link swapped in for a listed path, a folder
another process is writing, a read-only folder, a file where the folder is expected.

The input doors (issue 71, fspo_testing.guard_classes): each model argument given a cut weights file, a short
position table and a LoRA adapter scale float32 cannot hold; each reader given deep JSON and text that is not
UTF-8; every declared environment variable at the options' bad values; each real output tree with a linked or
read-only sub-folder; each real run killed before each write. What they still find is KNOWN_FAILING.
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


# ---- Input doors (issue 71): models, readers, environment variables, output trees, a kill between writes ----
# Each class is generated from what each command declares (its parser's arguments and their help, the output
# options, fspo.config.environment.ENVIRONMENT): fspo_testing.guard_classes. A case breaks the guard's invariant
# when it raises or prints a traceback, exits non-zero in more than one line, exits 0 on an input it must refuse,
# or changes a file outside the command's output. KNOWN_FAILING lists (class, command, case kind) found on the
# code of 2026-11-29 and not yet fixed: empty it as they are; a failure outside it fails the test.

import time  # noqa: E402

from fspo_testing import guard_classes as gc  # noqa: E402 - this section's own imports, kept beside it

# Found and fixed on 2026-11-29: an adapter beside a model's weights (now read by the model door) and a record's
# temporary left by a kill (now removed by the next claim).
KNOWN_FAILING: set[tuple[str, str, str]] = set()
COUNT_71: dict[str, list[int]] = {}  # class -> [cases, failures]
FOUND_71: dict[tuple[str, str, str], str] = {}  # (class, command, case kind) -> the first failure, one line
# Cases per (command, argument) at CI; FSPO_GUARD_EXAMPLES raises every class with it.
CUTS = max(2, EXAMPLES // 60)
SLOWEST: list[tuple[float, str]] = []


def record_71(klass: str, command: str, kind: str, problem: str | None) -> None:
    counts = COUNT_71.setdefault(klass, [0, 0])
    counts[0] += 1
    if problem:
        counts[1] += 1
        FOUND_71.setdefault((klass, command, kind), problem)


def assert_only_known(klass: str) -> None:
    new = {
        key: line
        for key, line in FOUND_71.items()
        if key[0] == klass and key not in KNOWN_FAILING and (key[0], "*", key[2]) not in KNOWN_FAILING
    }
    assert not new, "\n".join(f"{' | '.join(key)}: {line}" for key, line in sorted(new.items()))


@pytest.fixture(scope="module")
def pool(guarded):
    return gc.build_pool(guarded["root"] / "pool")


def leaves_but_train(guarded):
    return [leaf for leaf in sorted(guarded["commands"]) if leaf != ("train",)]


RAISED = EXAMPLES >= 1000  # FSPO_GUARD_EXAMPLES raised: every command, case and value below


def one_per_declaration(pairs):
    """``(leaf, argument)`` pairs, at CI the first of those declaring the same argument (flag and help: the data
    builders share one parser); all of them when raised."""
    seen, kept = set(), []
    for leaf, item in pairs:
        if RAISED or (item.flag, item.help) not in seen:
            seen.add((item.flag, item.help))
            kept.append((leaf, item))
    return kept


def run_case(argv, out: Path, watch: list[Path], must_refuse: bool, stdin: bytes | None = None) -> str | None:
    """``fspo argv`` in this process; what broke the invariant (None: it held). ``watch``: folders it may not
    change (the output ``out`` is its own)."""
    import io
    import sys

    before = [snapshot(w) for w in watch]
    saved = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8", errors="surrogateescape")
    try:
        outcome = run_in_process(argv, LIMIT_S)
    finally:
        sys.stdin = saved
        shutil_rmtree(out)
    changed = "; ".join(filter(None, (gc.diff(b, snapshot(w)) for b, w in zip(before, watch, strict=True))))
    return gc.check_outcome(outcome, must_refuse, changed or None)


def shutil_rmtree(path: Path) -> None:
    import shutil

    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        for sub in path.rglob("*"):
            if sub.is_dir() and not sub.is_symlink():
                undo_read_only(sub)
        shutil.rmtree(path, ignore_errors=True)


def test_every_model_argument_refuses_a_cut_short_or_unfit_model(in_work, pool, tmp_path, capsys):
    """Each argument naming a model (found by its flag), in a runnable command: the weights cut at generated
    offsets, a position table of 4, a LoRA adapter scale float32 cannot hold (1e300 / r, and 1e-300)."""
    import random

    draw = random.Random(71)
    cases = 0
    arguments = [(leaf, item) for leaf in leaves_but_train(in_work) for item in gc.model_inputs(leaf)]
    for leaf, item in one_per_declaration([(leaf, item) for leaf, item in arguments if leaf not in REAL_RUN_EXCLUDED]):
        command = "fspo " + " ".join(leaf)
        breaks = [("cut", round(draw.random(), 3)) for _ in range(CUTS)] + [("cut", 0.0)]
        breaks += [("short", 4), ("adapter", 1e300), ("adapter", 1e-300)]
        if not gc.loads_weights(item) and not RAISED:  # a tokenizer reads no weights nor positions
            breaks = [("cut", 0.0), ("adapter", 1e300)]
        for kind, detail in breaks:
            folder = tmp_path / f"model-{cases}"
            cases += 1
            if kind == "cut":
                gc.cut_model(pool["model"], folder, detail)
            elif kind == "short":
                gc.short_model(pool["model"], folder, detail)
            else:
                gc.adapter_model(pool["model"], folder, 8, detail)
            out = tmp_path / f"out-{cases}"
            # every output option under out: a data builder given only --tokenizer wrote its default data/NAME in
            # the working folder (the raised run of 2026-11-29 read that as a changed user file)
            given = {item.flag: str(folder), **gc.backend_for(item, leaf)}
            argv = gc.runnable_argv(leaf, pool, out, given, every_output=True)
            if argv is None:
                record_71("model", command, "no runnable argv", f"{item.flag}: a required input has no valid value")
                continue
            # A tokenizer reads no weights; a position table is checked against the lengths a run needs.
            refuse = gc.loads_weights(item) and kind != "short"
            started = time.monotonic()
            problem = run_case(argv, out, [pool["model"].parent, in_work["work"]], refuse)
            SLOWEST.append((time.monotonic() - started, describe(argv)[:150]))
            record_71("model", command, f"{item.flag} {kind}", problem and f"{describe(argv)}: {problem}")
    with capsys.disabled():
        print(f"\ncommand guard (models): {COUNT_71.get('model')} [cases, failures]")
        print(sorted(SLOWEST)[-8:])
    assert_only_known("model")


def test_every_reader_refuses_deep_nesting_and_text_that_is_not_utf8(in_work, pool, tmp_path, capsys):
    """Each argument naming a JSON, JSON Lines, TOML or parquet file (found by its help), and stdin where a command
    reads it: JSON nested around the parser's depth limit (gc.DEPTHS), and text in Latin-1, UTF-16 with and without
    a byte-order mark, UTF-8 cut inside a character, overlong or holding an encoded surrogate. Not UTF-8 must be
    refused (never read as replaced characters); a depth must be read or refused in one line."""
    cases = 0
    readers = []
    for leaf in leaves_but_train(in_work):
        if leaf not in REAL_RUN_EXCLUDED:
            readers += [(leaf, (item, False)) for item in gc.reader_inputs(leaf)]
            if (stdin := gc.reads_stdin(leaf)) is not None:
                readers.append((leaf, (stdin, True)))
    for leaf, (item, from_stdin) in readers:
        command = "fspo " + " ".join(leaf)
        extension = "jsonl" if from_stdin else gc.reader_extension(item)
        record = gc.valid_record(item, pool)
        variants = [(name, None) for name in gc.encoded_variants('{"a": "Zürich"}\n')]
        variants += [(f"depth {depth}", depth) for depth in (gc.DEPTHS if EXAMPLES >= 1000 else gc.CI_DEPTHS)]
        for name, depth in variants:
            cases += 1
            path = tmp_path / f"input-{cases}.{extension}"
            content = gc.reader_content(extension, record, name, depth)
            path.write_bytes(content)
            out = tmp_path / f"out-{cases}"
            value = "-" if from_stdin else str(path)
            argv = gc.runnable_argv(leaf, pool, out, {item.flag: value})
            if argv is None:
                record_71("reader", command, "no runnable argv", f"{item.flag}: a required input has no valid value")
                continue
            started = time.monotonic()
            problem = run_case(
                argv,
                out,
                [pool["model"].parent, in_work["work"]],
                must_refuse=depth is None,
                stdin=content if from_stdin else None,
            )
            SLOWEST.append((time.monotonic() - started, describe(argv)[:150]))
            record_71("reader", command, f"{item.flag} {name}", problem and f"{describe(argv)}: {problem}")
    with capsys.disabled():
        print(f"\ncommand guard (readers): {COUNT_71.get('reader')} [cases, failures]")
        print(sorted(SLOWEST)[-8:])
    assert_only_known("reader")


def test_every_environment_variable_refuses_the_options_bad_values(in_work, pool, real_runs, tmp_path, capsys):
    """Every declared variable (fspo.config.environment.ENVIRONMENT) at each of BAD_VALUES and BAD_NUMBERS (those an
    environment can hold), each case the next runnable command in turn (the train dry run among them where the
    variable cannot start a real run; a value the declaration accepts only in a command whose real run takes
    under CHEAP_S): a value its declaration refuses is refused in one line naming the variable; nothing is
    written outside the output folder (the working folder included: Hydra's dated folder)."""
    from fspo.config.environment import ENVIRONMENT, EnvironmentVariableError, environment_value
    from fspo_testing.command_guard import BAD_NUMBERS

    out = tmp_path / "out"
    every, cheap = [], [["train", "platform=cpu"]]
    slow = {leaf for leaf, _, _, seconds in real_runs if seconds > CHEAP_S}
    for leaf in leaves_but_train(in_work):
        argv = gc.runnable_argv(leaf, pool, out, {}, every_output=True)  # a default output folder is the cwd's
        if leaf in REAL_RUN_EXCLUDED or argv is None:
            continue
        every.append(argv)
        if leaf not in slow and leaf in {r[0] for r in real_runs} | (
            set(in_work["commands"]) - set(in_work["outputs"])
        ):
            cheap.append(argv)
    values = [v for v in dict.fromkeys([*BAD_VALUES, *BAD_NUMBERS]) if gc.can_be_environment(v)]
    for left in in_work["work"].iterdir():  # what earlier tests left
        shutil_rmtree(left)
    turn = 0
    for name in ENVIRONMENT:
        accepted = 0
        for value in values:
            try:
                environment_value(name, {name: value})
                refused = False
            except EnvironmentVariableError:
                refused = True
            accepted += not refused
            if accepted > 2 and not refused and not RAISED:  # at CI: every refused value, two accepted ones
                continue
            commands = [*every, ["train", "platform=cpu"]] if refused else cheap
            argv = commands[turn % len(commands)]
            turn += 1
            if argv[0] == "train" and name in ("FSPO_DRY_RUN", "FSPO_PREFLIGHT") and not refused:
                argv = cheap[1 + turn % (len(cheap) - 1)]  # the dry run would become a real run
            leaf = next(leaf for leaf in in_work["commands"] if list(leaf) == argv[: len(leaf)])
            pool_before = snapshot(pool["model"].parent)
            with gc.environment({name: value}):
                outcome = run_in_process(argv, LIMIT_S * 3)
            problem = gc.check_outcome(outcome, refused, gc.diff(pool_before, snapshot(pool["model"].parent)))
            if not problem and refused and name not in outcome.stderr:
                problem = f"refused without naming {name}: {message_lines(outcome.stderr)[:1]}"
            shutil_rmtree(out)
            work_left = [p.name for p in in_work["work"].iterdir()]
            if not problem and work_left:
                problem = f"left {work_left[:3]} in the working folder"
            for left in in_work["work"].iterdir():
                shutil_rmtree(left)
            shown = value.encode("utf-8", "backslashreplace").decode()
            record_71(
                "environment",
                "fspo " + " ".join(leaf),
                f"{name}",
                problem and f"{name}={shown!r} {describe(argv)}: {problem}",
            )
    with capsys.disabled():
        print(f"\ncommand guard (environment): {COUNT_71.get('environment')} [cases, failures]")
    assert_only_known("environment")


CHEAP_S = 3.0  # a real run that takes longer is given only values the declaration refuses


# A real run of these would train for minutes: their output folders are covered by the classes above and by
# their own end-to-end tests.
REAL_RUN_EXCLUDED = {("quickstart",): "trains for minutes (tests/test_quickstart*.py run it)"}


def writing_runs(guarded, pool, root: Path) -> list[tuple[tuple[str, ...], list[str], Path, float]]:
    """Every command with an output option that runs for real on the pool's inputs: (leaf, argv, the folder its
    outputs go under, written once, and the seconds it took); a command whose real run fails is recorded in NOT_RUNNABLE."""
    runs, groups = [], set()
    for leaf in sorted(guarded["outputs"]):
        group = frozenset((i.flag, i.help) for i in gc.inputs(leaf))  # the data builders share one parser
        if leaf in REAL_RUN_EXCLUDED or (group in groups and not RAISED):
            continue
        if not RAISED and "--learning-rate" in guarded["commands"][leaf]:  # it trains: 10-20 s a run, raised only
            continue
        out = root / "-".join(leaf)
        argv = gc.runnable_argv(leaf, pool, out, {}, every_output=True)
        if argv is None:
            continue
        started = time.monotonic()
        outcome = run_in_process(argv, LIMIT_S * 3)
        if outcome.status != 0 or outcome.raised is not None:
            lines = message_lines(outcome.stderr)
            NOT_RUNNABLE["fspo " + " ".join(leaf)] = (lines or [repr(outcome.raised)])[-1][:160]
            continue
        runs.append((leaf, argv, out, time.monotonic() - started))
        groups.add(group)  # one that ran: its siblings are skipped at CI
    return runs


def moved(argv: list[str], old: Path, new: Path) -> list[str]:
    """``argv`` with every path under ``old`` moved under ``new``."""
    return [str(new) + a[len(str(old)) :] if a.startswith(str(old)) else a for a in argv]


NOT_RUNNABLE: dict[str, str] = {}


@pytest.fixture(scope="module")
def real_runs(guarded, pool):
    with pytest.MonkeyPatch.context() as patch:  # as in_work sets them, for the whole module
        patch.chdir(guarded["work"])
        patch.setenv("FSPO_DRY_RUN", "1")
        patch.setenv("FSPO_PREFLIGHT", "0")
        return writing_runs(guarded, pool, guarded["root"] / "real-runs")


def test_every_output_tree_refuses_a_linked_or_read_only_sub_folder_at_every_depth(in_work, pool, real_runs, capsys):
    """Each writing command's real output tree, rerun with each sub-folder at every depth swapped for a link to a
    user's folder, or made read-only: nothing is written through the link or into the user's folder, and the
    rerun either completes its tree or refuses in one line with the tree unchanged."""
    import shutil

    outside = build_outside(in_work["root"] / "tree-outside")
    for leaf, argv, out, _ in real_runs:
        command = "fspo " + " ".join(leaf)
        # Under each folder the command claimed (the one named by its option may itself be a link: it is followed).
        claimed = [record.parent.relative_to(out) for record in out.rglob(".fspo-outputs.json")]
        for sub in [str(top / below) for top in claimed for below in gc.sub_folders(out / top)]:
            for kind in ("link", "read-only"):
                case = out.parent / f"case-{kind}"
                shutil_rmtree(case)
                shutil.copytree(out, case, symlinks=True)
                target = case / sub
                if kind == "link":
                    shutil.rmtree(target)
                    target.symlink_to(outside / "dir", target_is_directory=True)
                elif not make_read_only(target):
                    continue
                case_argv = moved(argv, out, case)
                before, outside_before = snapshot(case), snapshot(outside)
                outcome = run_in_process(case_argv, LIMIT_S * 3)
                changed = gc.diff(outside_before, snapshot(outside))
                problem = gc.check_outcome(outcome, False, changed and f"outside: {changed}")
                if not problem and outcome.status != 0 and snapshot(case) != before:
                    problem = f"refused but changed its tree: {gc.diff(before, snapshot(case))}"
                depth = len(Path(sub).parts) - len(next(t for t in claimed if Path(sub).is_relative_to(t)).parts)
                record_71(
                    "output-tree",
                    command,
                    f"{kind} at depth {depth}",
                    problem and f"{describe(case_argv)} ({sub}): {problem}",
                )
                if kind == "read-only":
                    undo_read_only(target)
                shutil_rmtree(case)
    with capsys.disabled():
        print(
            f"\ncommand guard (output trees): {COUNT_71.get('output-tree')} [cases, failures]; not runnable: {NOT_RUNNABLE}"
        )
    assert_only_known("output-tree")


def test_a_kill_between_any_two_writes_leaves_the_old_or_the_new_output(in_work, pool, real_runs, tmp_path, capsys):
    """Each writing command rerun over its earlier output (made with another --seed where it has one) in a
    subprocess killed (SIGKILL) before its k-th file write (an audit hook counts them: fspo_testing.guard_classes
    KILL_HOOK): once the folder is claimed again (as the next command writing it would), it holds the complete old
    set or the complete new set, and no temporary file. At CI one drawn k per command writing two files or more;
    every k of every command with FSPO_GUARD_EXAMPLES raised."""
    import random
    import shutil

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    draw = random.Random(71)
    for leaf, argv, out, seconds in real_runs:
        if not RAISED and (seconds > CHEAP_S or len(gc.visible(out)) < 2):  # at CI: cheap runs writing a set
            continue
        command = "fspo " + " ".join(leaf)
        base = tmp_path / "-".join(leaf)
        old_argv = [*argv, "--seed", "1"] if "--seed" in in_work["commands"][leaf] else argv
        status, err = gc.run_killed(moved(old_argv, out, base / "old"), base / "old", 0, env, in_work["work"])
        if status != 0:
            NOT_RUNNABLE[command] = f"seed 1: {message_lines(err)[-1:]}"
            continue
        shutil.copytree(base / "old", base / "new", symlinks=True)
        status, err = gc.run_killed(moved(argv, out, base / "new"), base / "new", 0, env, in_work["work"])
        written = gc.writes(err)
        old_state, new_state = gc.visible(base / "old"), gc.visible(base / "new")
        ks = list(range(1, len(written) + 1))
        if not RAISED and ks:
            ks = [draw.choice(ks)]
        for k in ks:
            case = base / f"k{k}"
            shutil.copytree(base / "old", case, symlinks=True)
            case_argv = moved(argv, out, case)
            status, err = gc.run_killed(case_argv, case, k, env, in_work["work"])
            killed_state = gc.visible(case)
            pending = gc.next_claim(case)
            state = gc.visible(case)
            # The new set: the new run's files, each changed where the new run changed it.
            complete_new = set(state) == set(new_state) and all(
                state[key] != old_state.get(key) for key in new_state if new_state[key] != old_state.get(key)
            )
            where = written[k - 1].split(" ", 1)[-1].replace(str(base / "new"), "")
            problem = None
            if status != gc.kill_signal_status():
                problem = f"was not killed at write {k} (exit {status})"
            elif state != old_state and not complete_new:
                problem = (
                    f"killed before write {k} of {len(written)} ({where}), then the folder claimed: neither the old nor"
                    f" the new set: {gc.diff(old_state, state)}"
                )
            elif killed_state != old_state and killed_state != state and not pending:
                problem = (
                    f"killed before write {k} ({where}): a mixed set and no journal: {gc.diff(old_state, killed_state)}"
                )
            if left := gc.debris(case):
                record_71(
                    "kill", command, "temporary file left", f"{describe(case_argv)}: killed before {where}: {left}"
                )
            record_71("kill", command, "kill between writes", problem and f"{describe(case_argv)}: {problem}")
            shutil_rmtree(case)
    with capsys.disabled():
        print(f"\ncommand guard (kill): {COUNT_71.get('kill')} [cases, failures]; not runnable: {NOT_RUNNABLE}")
    assert_only_known("kill")


def test_zz_report_counts_71(capsys):
    with capsys.disabled():
        print(f"\ncommand guard (input doors): {COUNT_71} [cases, failures]")
        for key, line in sorted(FOUND_71.items()):
            print(f"  {' | '.join(key)}: {line[-300:]}")
