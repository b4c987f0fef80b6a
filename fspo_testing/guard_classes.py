"""The command guard's input-door classes (issue 71), generated from what each command declares: its parser's
actions (flags, positionals, help text) and fspo.config.environment.ENVIRONMENT, never from a list of commands.

- model: every option or positional whose name or help names a model, checkpoint, tokenizer or adapter, given a
  weights file cut short at generated offsets, a model whose position table is shorter than the command needs,
  and a PEFT adapter beside the weights whose ``lora_alpha / r`` float32 cannot hold;
- reader: every option or positional whose help names a JSON, JSON Lines, TOML or parquet file (and ``-``
  where the help says it reads stdin), given JSON nested around the parser's depth limit and text that is not
  UTF-8 (Latin-1, UTF-16 with and without a byte-order mark, a cut multi-byte sequence, overlong UTF-8, an
  encoded surrogate);
- environment: every declared variable at the options' bad values;
- output tree: a real run's output tree, each sub-folder at every depth swapped for a link or made read-only;
- kill: a real run killed (SIGKILL) before each file write it makes, found by an audit hook.

Each case's argv is a runnable command: the command's other required inputs get a valid value chosen by what
their help says they hold (:func:`valid_value`); a command that needs an input no valid value fits is reported,
so a new command is covered or named, never skipped in silence.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from fspo_testing.command_guard import _help, snapshot

# ---- what each command declares ----


@dataclasses.dataclass(frozen=True)
class Input:
    """One argument a leaf command takes: its flag (or positional dest), help text, whether it is required."""

    flag: str
    help: str
    required: bool
    positional: bool
    takes_value: bool
    repeat: bool  # nargs '+' / '*' / 2: a positional list, or an option taking several values


def leaf_parser(path: tuple[str, ...]) -> argparse.ArgumentParser | None:
    """The parser that handles ``fspo <path> --help`` (the last one argparse parses with)."""
    seen = []
    original = argparse.ArgumentParser.parse_known_args

    def recording(self, *args, **kwargs):
        seen.append(self)
        return original(self, *args, **kwargs)

    argparse.ArgumentParser.parse_known_args = recording
    try:
        _help(list(path))
    finally:
        argparse.ArgumentParser.parse_known_args = original
    return seen[-1] if seen else None


def inputs(path: tuple[str, ...]) -> list[Input]:
    """The arguments of leaf command ``path`` (``--help`` excepted), from its parser's actions."""
    parser = leaf_parser(path)
    if parser is None:
        return []
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        long_flags = [f for f in action.option_strings if f.startswith("--")]
        flag = long_flags[0] if long_flags else action.dest
        found.append(
            Input(
                flag=flag,
                help=action.help or "",
                required=bool(action.required)
                or (not action.option_strings and (action.nargs is None or action.nargs == "+")),
                positional=not action.option_strings,
                takes_value=action.nargs != 0,
                repeat=action.nargs in ("+", "*") or isinstance(action.nargs, int) and action.nargs > 1,
            )
        )
    return found


MODEL_WORDS = re.compile(r"model|tokenizer|checkpoint|adapter|encoder")
# A name sent to a server is no folder: "the model name sent", "model name sent to the judge".
SERVED_NAME = re.compile(r"model name|name sent|OpenAI|server")
READER_WORDS = re.compile(r"\bJSONL?\b|JSON Lines|\bTOML\b|parquet|\.jsonl?\b|predictions|pairs JSONL", re.I)


def model_inputs(path) -> list[Input]:
    """The arguments that name a model folder (a checkpoint, a tokenizer, an adapter, an encoder): by their flag,
    never one the command writes, nor a name sent to a server."""
    return [
        i
        for i in inputs(path)
        if i.takes_value
        and MODEL_WORDS.search(i.flag)
        and i.flag not in outputs_of(path)
        and not SERVED_NAME.search(i.help)
    ]


def backend_for(item: Input, path) -> dict[str, str]:
    """``--verifier NAME`` where a model argument's help names the backends that read it ("(hhem, nli, ...)"):
    the first one, so that the model is loaded; nothing otherwise."""
    named = re.search(r"\((\w+),", item.help)
    flags = {i.flag for i in inputs(path)}
    return {"--verifier": named.group(1)} if named and "--verifier" in flags else {}


def loads_weights(item: Input) -> bool:
    """Whether a model argument's weights are read (a tokenizer's are not: a cut weights file is no error there)."""
    return "tokenizer" not in item.flag


def outputs_of(path) -> dict[str, str]:
    from fspo.utils.output_dir import OUTPUT_OPTIONS

    inputs(path)  # builds the parser, which declares its output options
    return OUTPUT_OPTIONS.get("fspo " + " ".join(path), {})


def reader_inputs(path) -> list[Input]:
    """The arguments that name a JSON, JSON Lines, TOML or parquet file the command reads (not one it writes)."""
    return [
        i
        for i in inputs(path)
        if i.takes_value
        and READER_WORDS.search(i.help)
        and re.search(r"file|parquet|predictions|pairs", i.help)
        and i.flag not in outputs_of(path)
    ]


def reads_stdin(path) -> Input | None:
    return next((i for i in inputs(path) if "stdin" in i.help), None)


# ---- the valid inputs a runnable case starts from ----


def build_pool(root: Path) -> dict[str, Path]:
    """One valid file of every kind a command reads, and a tiny model (the cached build), under ``root``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fspo_testing.tiny_model import build_tiny_model

    root.mkdir(parents=True, exist_ok=True)
    model = build_tiny_model(
        root / "model", hidden_size=8, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=16
    )
    row = {
        "data_source": "hotpotqa",
        "prompt": [{"role": "user", "content": "Where is the Eiffel Tower?"}],
        "reward_model": {"style": "rule", "ground_truth": "Paris"},
        "extra_info": {"index": 0, "split": "test", "evidence": "The Eiffel Tower is in Paris."},
    }
    pq.write_table(pa.Table.from_pylist([row]), root / "bench.parquet")
    think = "<think>The Eiffel Tower is in Paris.</think> Paris"
    claims = [
        {"evidence": "The Eiffel Tower is in Paris.", "claim": "It is in Paris.", "label": 1},
        {"evidence": "The Eiffel Tower is in Paris.", "claim": "It is in Rome.", "label": 0},
    ]
    rows = [{"evidence": "The Eiffel Tower is in Paris.", "response": think}]
    prediction = {
        "index": 0,
        "row_key": "k0",
        "data_source": "hotpotqa",
        "prompt": "Where is the Eiffel Tower?",
        "evidence": "The Eiffel Tower is in Paris.",
        "responses": [think, "<think>The Eiffel Tower is in Rome.</think> Rome"],
        "sample_scores": [1.0, 0.0],
        "score": 0.5,
        "acc": 0.5,
        "scorer_timeouts": 0,
    }
    pair = {
        "prompt": "Where is the Eiffel Tower?",
        "chosen": think,
        "rejected": "<think>It is in Rome.</think> Rome",
        "fdpo_margin_weight": 1,
        "chosen_hallucinated": 0,
        "rejected_hallucinated": 1,
        "flipped": False,
        "chosen_score": 1.0,
        "rejected_score": 0.0,
    }
    for name, records in (("claims", claims), ("rows", rows), ("predictions", [prediction]), ("pairs", [pair])):
        (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return {
        "model": model,
        "parquet": root / "bench.parquet",
        "claims": root / "claims.jsonl",
        "rows": root / "rows.jsonl",
        "predictions": root / "predictions.jsonl",
        "pairs": root / "pairs.jsonl",
    }


# Which pool entry fits an argument, by what its help says it holds (first match wins).
VALID_BY_HELP = (
    (re.compile(r"predictions"), "predictions"),
    (re.compile(r"pairs JSONL"), "pairs"),
    (re.compile(r"claim, label|labelled claims"), "claims"),
    (re.compile(r"evidence, response"), "rows"),
    (re.compile(r"parquet"), "parquet"),
    (MODEL_WORDS, "model"),
)
# A choice the help lists first ("the backend: hhem, nli, ..."): the first one is a valid value.
LISTED_CHOICE = re.compile(r"^the \w+: (\w+),")


def valid_value(item: Input, pool: dict[str, Path]) -> str | None:
    if listed := LISTED_CHOICE.match(item.help):
        return listed.group(1)
    for pattern, kind in VALID_BY_HELP:
        if pattern.search(item.help) or (kind == "model" and pattern.search(item.flag)):
            return str(pool[kind])
    return None


def runnable_argv(
    path, pool, out: Path, given: dict[str, str], small: bool = True, every_output: bool = False
) -> list[str] | None:
    """``fspo <path>`` with ``given`` (flag -> value) and a valid value for every other required input (the output
    options pointed under ``out``: the required ones, or ``every_output``); None where a required input has no valid value. ``small``: the cheapest run
    (one new token, one step, one row) where the command declares such an option."""
    from fspo.utils.output_dir import OUTPUT_OPTIONS

    arguments = inputs(path)  # builds the parser, which declares its output options
    outputs = OUTPUT_OPTIONS.get("fspo " + " ".join(path), {})
    positional, flagged = [], []
    for item in arguments:
        if item.flag in given:
            value = given[item.flag]
        elif item.flag in outputs and (item.required or every_output):
            value = str(out / ("out.png" if outputs[item.flag] == "file" else "out"))
            if outputs[item.flag] == "file" and "pairs" in item.help:
                value = str(out / "pairs.jsonl")
        elif item.required or (item.positional and valid_value(item, pool)):
            value = valid_value(item, pool)
            if value is None:
                return None
        elif small and item.flag in CHEAPEST:
            value = CHEAPEST[item.flag]
        else:
            continue
        if item.positional:
            positional.append(value)
        else:
            flagged += [item.flag, value]
    return [*path, *flagged, *positional]


# Options that make a real run as short as it can be, by name (any command that declares one).
CHEAPEST = {
    "--max-new-tokens": "2",
    "--steps": "1",
    "--size": "2",
    "--test-size": "2",
    "--limit": "1",
    "--epochs": "1",
    "--batch-size": "1",
    "--max-length": "64",
    "--verifier": "lexical",
}


# ---- the model class ----


def cut_model(model: Path, folder: Path, fraction: float) -> Path:
    """``model`` copied to ``folder``, its weights file cut to ``fraction`` of its bytes."""
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(model, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    for weights in model.glob("*.safetensors"):
        data = weights.read_bytes()
        (folder / weights.name).write_bytes(data[: int(len(data) * fraction)])
    return folder


def short_model(model: Path, folder: Path, positions: int) -> Path:
    """``model`` copied to ``folder`` with a position table of ``positions``."""
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(model, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": positions}))
    return folder


def adapter_model(model: Path, folder: Path, rank: int, alpha: float) -> Path:
    """``model`` with a PEFT LoRA adapter beside it whose scale ``alpha / rank`` is given (its weights ones)."""
    import torch
    from safetensors.torch import save_file

    shutil.rmtree(folder, ignore_errors=True)
    # The model's own files and an adapter beside them: transformers, with peft installed, loads the adapter it
    # finds in a model folder (transformers/modeling_utils.py: find_adapter_config_file), scale and all.
    shutil.copytree(model, folder)
    config = json.loads((model / "config.json").read_text())
    hidden = config["hidden_size"]
    adapter = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(model),
        "r": rank,
        "lora_alpha": alpha,
        "target_modules": ["q_proj"],
        "lora_dropout": 0.0,
        "bias": "none",
    }
    (folder / "adapter_config.json").write_text(json.dumps(adapter))
    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    save_file(
        {
            f"{prefix}.lora_A.weight": torch.ones(rank, hidden),
            f"{prefix}.lora_B.weight": torch.ones(hidden, rank),
        },
        str(folder / "adapter_model.safetensors"),
    )
    return folder


# ---- the reader class ----


# Bytes that are not UTF-8 text, by name: each a file's whole content around one JSON string (the record's
# fields are irrelevant: the reader must refuse before it reads a field).
def encoded_variants(text: str) -> dict[str, bytes]:
    """``text`` (ASCII JSON holding "Zürich") in each encoding that is not UTF-8, and UTF-8 broken each way."""
    utf8 = text.encode("utf-8")
    at = utf8.index("ü".encode())
    return {
        "latin-1": text.encode("latin-1"),
        "utf-16-bom": text.encode("utf-16"),
        "utf-16le": text.encode("utf-16-le"),
        "utf-16be": text.encode("utf-16-be"),
        "cut-multibyte": utf8[: at + 1] + utf8[at + 2 :],  # the first byte of ü, then the next character
        "overlong": utf8[:at] + b"\xc0\xaf" + utf8[at + 2 :],  # "/" in two bytes
        "surrogate": utf8[:at] + b"\xed\xa0\x80" + utf8[at + 2 :],  # U+D800 encoded
        "cut-at-end": utf8.rstrip(b"\n")[:-1] + b"\xc3",  # the file ends inside a character
    }


def nested_json(record: dict, depth: int) -> str:
    """``record`` with one more field holding lists nested ``depth`` deep (a schema ignores a field it does not
    name: what reads the record next meets the depth)."""
    return json.dumps(record)[:-1] + ', "extra": ' + "[" * depth + "]" * depth + "}"


# Depths around CPython's recursion limit (1000) and json's C scanner, and far past it.
DEPTHS = (10, 500, 900, 950, 990, 1000, 1010, 2000, 100_000)
# At CI: one the parser reads (the command then runs for real), the limit, and far past it.
CI_DEPTHS = (950, 1000, 100_000)


def valid_record(item: Input, pool: dict[str, Path]) -> dict:
    """The first record of the valid file that fits a reader argument (a generic one where none is JSON)."""
    value = valid_value(item, pool)
    if value and value.endswith((".json", ".jsonl")):
        return json.loads(Path(value).read_text().splitlines()[0])
    return {"evidence": "Paris is in France.", "response": "<think>Paris is in France.</think> yes"}


def reader_content(extension: str, record: dict, variant: str, depth: int | None) -> bytes:
    """A file of ``extension`` holding ``record``: with a field nested ``depth`` deep, or (depth None) with a
    field "Zürich" encoded as ``variant`` (:func:`encoded_variants`)."""
    end = "\n" if extension in ("jsonl", "toml") else ""
    if depth is not None:
        return (nested_json(record, depth) + end).encode()
    text = json.dumps({**record, "place": "Zürich"}, ensure_ascii=False) + end
    return encoded_variants(text)[variant]


def reader_extension(item: Input) -> str:
    text = item.help.lower()
    if "jsonl" in text or "json lines" in text or "predictions" in text or "pairs" in text:
        return "jsonl"
    if "parquet" in text and "json" not in text:
        return "parquet"
    if "toml" in text:
        return "toml"
    return "json" if "json" in text else "jsonl"


# ---- running a case and what it must hold ----


@dataclasses.dataclass
class Result:
    status: int | None
    stderr: str
    problem: str | None  # None: the case held the guard's invariant


def check_outcome(outcome, must_refuse: bool, changed: str | None) -> str | None:
    """What broke the guard's invariant in a run's outcome, in one line; None where it held."""
    from fspo_testing.command_guard import message_lines

    if outcome.raised is not None:
        return f"raised {type(outcome.raised).__name__}: {str(outcome.raised)[:160]}"
    if "Traceback" in outcome.stderr:
        last = [line for line in outcome.stderr.splitlines() if line.strip()][-1:]
        return f"traceback: {last[0][:200] if last else ''}"
    if changed:
        return f"changed files: {changed}"
    if outcome.status == 0:
        return "exit 0 (a silent wrong result)" if must_refuse else None
    lines = message_lines(outcome.stderr)
    if len(lines) != 1:
        return f"exit {outcome.status} with {len(lines)} lines: {[line[:120] for line in lines[:3]]}"
    return None


@contextlib.contextmanager
def environment(values: dict[str, str]):
    """This process's environment with ``values`` set (restored after)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def can_be_environment(value: str) -> bool:
    """Whether an environment can hold ``value``: bytes that are not UTF-8 arrive as U+DC80-U+DCFF; a lone
    U+D800 cannot arrive at all."""
    try:
        os.fsencode(value)
    except UnicodeEncodeError:
        return False
    return "\x00" not in value


def diff(before: dict, after: dict) -> str | None:
    if before == after:
        return None
    changed = sorted({k for k in set(before) | set(after) if before.get(k) != after.get(k)})
    return ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")


# ---- the kill class: a real run in a subprocess, killed before its k-th file write ----

# Run as ``python -c KILL_HOOK <folder> <k> <argv...>``: counts the changes under <folder> (an open for writing, a
# rename or replace into it, a new folder, a removal), prints each to stderr as "WRITE <path>" and, at write number k
# (k > 0), kills itself with SIGKILL before it happens.
KILL_HOOK = r"""
import os, signal, sys
folder, k, argv = os.path.realpath(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
count = 0
def resolved(path, dir_fd=None):
    path = os.fsdecode(path)
    if dir_fd is not None and not os.path.isabs(path):
        path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
    return os.path.realpath(path)
def hook(event, args):
    global count
    try:
        if event == "open":
            path, mode, flags = args
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            target = resolved(path) if writes and isinstance(path, (str, bytes, os.PathLike)) else None
        elif event == "os.rename":
            target = resolved(args[1], args[3])
        elif event in ("os.remove", "os.rmdir"):
            target = resolved(args[0], args[1])
        elif event == "os.mkdir":
            target = resolved(args[0], args[2])
            target = None if os.path.exists(target) else target
        else:
            return
    except (TypeError, ValueError, OSError):
        return
    if target is None or not target.startswith(folder + os.sep) or target.endswith("/.fspo-lock"):
        return
    count += 1
    os.write(2, f"WRITE {count} {event} {target}\n".encode("utf-8", "backslashreplace"))
    if count == k:
        os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(hook)
from fspo.cli import main
sys.exit(main(argv))
"""


def run_killed(argv: list[str], folder: Path, k: int, env: dict, cwd: Path, timeout: float = 300) -> tuple[int, str]:
    """``fspo argv`` in a subprocess, killed before its ``k``-th write under ``folder`` (0: never); (status, stderr)."""
    result = subprocess.run(
        [sys.executable, "-c", KILL_HOOK, str(folder), str(k), *argv],
        capture_output=True,
        timeout=timeout,
        env=env,
        cwd=cwd,
    )
    return result.returncode, result.stderr.decode("utf-8", "backslashreplace")


def writes(stderr: str) -> list[str]:
    return [line.split(" ", 2)[2] for line in stderr.splitlines() if line.startswith("WRITE ")]


def visible(folder: Path) -> dict[str, str]:
    """The files a user sees in ``folder`` (hidden ones left out: the bookkeeping ``.fspo-*`` entries, and a
    killed write's temporary file, which :func:`debris` reports)."""
    if not folder.exists():
        return {}
    return {k: v for k, v in snapshot(folder).items() if not any(p.startswith(".") for p in k.split("/"))}


def debris(folder: Path) -> list[str]:
    """Hidden files in ``folder`` that are no bookkeeping: temporary files a killed write left."""
    bookkeeping = (".fspo-outputs.json", ".fspo-lock")
    return sorted(
        k
        for k in snapshot(folder)
        if any(p.startswith(".") for p in k.split("/")) and k.split("/")[-1] not in bookkeeping
    )


def next_claim(root: Path) -> bool:
    """Claim, then let go of, every output folder under ``root`` (those with a record), as the next command that
    writes one does: it finishes a set a killed command was moving in and removes what it left. Whether any
    set was pending."""
    from fspo.utils.output_dir import JOURNAL, RECORD, claim_output_folder, release_output_folders

    pending = any(root.rglob(JOURNAL))
    for record in sorted(root.rglob(RECORD)):
        claim_output_folder("--output-dir", record.parent, "the command guard")
    release_output_folders()
    return pending


def sub_folders(folder: Path) -> list[str]:
    """Every sub-folder of an output tree, at every depth, relative to it (the bookkeeping ones left out)."""
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_dir() and not p.is_symlink() and not any(s.startswith(".fspo-") for s in p.relative_to(folder).parts)
    )


def kill_signal_status() -> int:
    return -signal.SIGKILL
