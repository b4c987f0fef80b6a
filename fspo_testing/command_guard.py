"""Every command driven with generated bad arguments and malformed files (``tests/test_command_guard.py``; the
same cases at a larger count: ``FSPO_GUARD_EXAMPLES=2000``).

The commands are enumerated from the dispatcher (:data:`fspo.cli.SUBCOMMANDS`, and the nested ones each
dispatcher lists in its help), their options from their own ``--help``, and ``fspo train``'s from the ``fspo:``
block's dataclasses, so that a new command or option is covered without editing this file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from fspo.cli import main as fspo_main

# Values at the edge of every kind of option: numbers that parse but cannot work, text Python cannot encode.
BAD_VALUES = (
    "0",
    "-1",
    "nan",
    "inf",
    "-inf",
    "1e309",
    "99999999999999999999",
    "",
    " ",
    "\udcff",
    "a\ud800b",
    "x",
    "name=minicheck",
    "=",
    "null",
)
# The values no option may accept: every generated case holds at least one, so none of them runs for real.
ALWAYS_BAD = ("nan", "inf", "-inf", "1e309", "\udcff", "a\ud800b")
# Malformed files: each name maps to its bytes (a folder where the value is None).
BAD_FILES: dict[str, bytes | None] = {
    "truncated.json": b'{"a": 1',
    "list.json": b"[1, 2, 3]",
    "latin1.json": b'{"caf\xe9": 1}',
    "surrogate.json": b'{"evidence": "\\udcff", "response": "\\ud800 x"}',
    "empty.jsonl": b"",
    "bad_line.jsonl": b'{"evidence": "e", "response": "r"}\n{oops\n',
    "list_line.jsonl": b"[1]\n",
    "surrogate.jsonl": b'{"evidence": "\\udcff", "response": "<think>\\ud800 x.</think>"}\n',
    "not_utf8.jsonl": b'{"evidence": "\xff\xfe", "response": "r"}\n',
    "bad.toml": b"[tool\nx = ",
    "csv.parquet": b"question,answer\nWhere?,Paris\n",
    "empty.parquet": b"",
    "a_folder": None,
}
# Model folders that look like one at a glance.
BAD_MODELS: dict[str, dict[str, bytes]] = {
    "model_bad_config": {"config.json": b'{"model_type": ', "model.safetensors": b"\x00" * 8},
    "model_list_config": {"config.json": b"[]", "model.safetensors": b"\x00" * 8},
    "model_no_type": {"config.json": b"{}", "model.safetensors": b"\x00" * 8},
    "model_bad_index": {
        "config.json": b'{"model_type": "qwen2"}',
        "model.safetensors.index.json": b'{"weight_map": [1]}',
    },
    "model_truncated_weights": {"config.json": b'{"model_type": "qwen2"}', "model.safetensors": b"\x00" * 8},
}
# A folder holding the user's own files, given where a command writes.
USER_FILES = {"notes.txt": b"mine\n", "results.md": b"my table\n", "results.csv": b"a,b\n"}


def make_inputs(root: Path) -> dict[str, Path]:
    """Write every malformed file and folder under ``root``; their paths by name."""
    paths = {}
    for name, content in BAD_FILES.items():
        path = root / name
        if content is None:
            path.mkdir()
        else:
            path.write_bytes(content)
        paths[name] = path
    for name, files in BAD_MODELS.items():
        (root / name).mkdir()
        for file, content in files.items():
            (root / name / file).write_bytes(content)
        paths[name] = root / name
    (root / "user_folder").mkdir()
    for file, content in USER_FILES.items():
        (root / "user_folder" / file).write_bytes(content)
    paths["user_folder"] = root / "user_folder"
    paths["missing"] = root / "no_such_file.jsonl"
    return paths


def snapshot(root: Path) -> dict[str, str]:
    """Every file and link under ``root`` (relative path -> a digest of its content, or its link target)."""
    state = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if path.is_symlink():
            state[key] = "link:" + os.readlink(path)
        elif path.is_file():
            state[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            state[key] = "folder"
    return state


def _help(argv: list[str]) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            fspo_main([*argv, "--help"])
        except SystemExit:
            pass
    return out.getvalue() + err.getvalue()


def command_paths() -> list[tuple[str, ...]]:
    """Every leaf command, as the argv prefix that names it: ``("verify",)``, ``("data", "check")``, ...

    A dispatcher's help lists its commands under ``<noun>s:`` (:func:`fspo.utils.subcommands.usage`), names them in its
    usage lines (``fspo verifier train ...``) or is argparse's subparsers (``{build-pairs,train}``); anything
    else is a leaf.
    """
    from fspo.cli import SUBCOMMANDS

    leaves = []
    pending = [(name,) for name in SUBCOMMANDS]
    while pending:
        path = pending.pop(0)
        if path == ("train",):  # Hydra's: its options come from the config (train_keys)
            leaves.append(path)
            continue
        text = _help(list(path))
        prefix = "fspo " + " ".join(path)
        nested = []
        if re.match(rf"usage: {re.escape(prefix)} <\w+>", text):
            section = text.split("s:\n", 1)[1]
            nested = [line.split()[0] for line in section.splitlines() if line.startswith("  ") and line.split()]
        nested += re.findall(rf"{re.escape(prefix)} (\w+) ", text)
        choices = re.match(rf"usage: {re.escape(prefix)} (?:\[-h\] )?\{{([\w,-]+)\}}", text)  # argparse subparsers
        if choices:
            nested += choices.group(1).split(",")
        if nested:
            pending += [(*path, name) for name in dict.fromkeys(nested)]
        else:
            leaves.append(path)
    return leaves


def options(path: tuple[str, ...]) -> list[str]:
    """The long options a leaf command's help names (``--help`` excepted)."""
    if path == ("train",):
        return train_keys()
    found = re.findall(r"(--[a-z][\w-]*[a-z0-9])(?![\w-])", _help(list(path)))
    return sorted(set(found) - {"--help"})


def train_keys() -> list[str]:
    """Every key of the ``fspo:`` block (the dataclasses' fields) and the verl sizes its checks read."""
    from fspo.config.fspo_config import FSPOConfig
    from fspo.config.verifier import VerifierConfig

    keys = [f"fspo.{f.name}" for f in dataclasses.fields(FSPOConfig) if f.name not in ("verifier", "_target_")]
    keys += [f"fspo.verifier.{f.name}" for f in dataclasses.fields(VerifierConfig) if f.name != "_target_"]
    keys += [
        "data.train_batch_size",
        "data.max_prompt_length",
        "data.max_response_length",
        "actor_rollout_ref.rollout.n",
        "trainer.total_training_steps",
    ]
    return keys


class Hang(Exception):
    """A command ran past the guard's time limit."""


@dataclasses.dataclass
class Outcome:
    status: int | None
    stdout: str
    stderr: str
    raised: BaseException | None


def run_in_process(argv: list[str], limit_s: float) -> Outcome:
    """``fspo argv`` in this process, its exit status and output; ``raised`` is what escaped ``main``."""
    # As a terminal's streams encode: stdout strictly (text that is not Unicode fails), stderr escaped.
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)

    def expire(signum, frame):
        raise Hang(f"fspo {' '.join(argv)} ran past {limit_s} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    status, raised = None, None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = fspo_main(argv)
            except SystemExit as exit_:
                status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
                if not isinstance(exit_.code, int | None):
                    print(exit_.code, file=err)
    except BaseException as error:  # noqa: BLE001 - the guard reports whatever escaped
        raised = error
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return Outcome(status, _written(out), _written(err), raised)


def _written(stream: io.TextIOWrapper) -> str:
    stream.flush()
    return stream.buffer.getvalue().decode("utf-8")


def message_lines(stderr: str) -> list[str]:
    """stderr's lines that are not argparse's usage block, warnings or logging (what the user must read)."""
    lines = []
    skipping_usage = False
    for line in stderr.splitlines():
        if line.startswith("usage: "):
            skipping_usage = True
            continue
        if skipping_usage and (line.startswith(" ") or not line.strip()):
            continue
        skipping_usage = False
        if not line.strip() or "Warning" in line or line.startswith(("  warnings.warn", "INFO:", "WARNING:")):
            continue
        lines.append(line)
    return lines


def describe(values: list[str]) -> str:
    return json.dumps(values, ensure_ascii=True)


# ---- Record kinds, line separators and numeric options (issue 45: the reader, the schemas, the numbers) ----

# Characters str.splitlines splits on that are legal, unescaped, inside a JSON string: a reader that splits on
# them cuts a record in two.
LINE_SEPARATORS = ("\u2028", "\u2029", "\u0085", "\x1c", "\x1d", "\x1e")
# Numbers no numeric option may take: NaN, infinities, float32 overflow, 64 bits and beyond.
BAD_NUMBERS = ("nan", "inf", "-inf", "1e39", "-1e39", "1e309", str(2**64), str(2**64 + 1), str(-(2**64)), "9" * 30)
# Of those, what a float option may not take either: 2**64 is a fine float (it fits float32).
BAD_FLOATS = ("nan", "inf", "-inf", "1e39", "-1e39", "1e309")


def number_kind(kind) -> type:
    """int or float: what an argparse ``type`` (int, float, a Number's ``parse``) or a field's type parses to."""
    return getattr(getattr(kind, "__self__", None), "kind", kind)


def must_refuse(kind, value: str) -> bool:
    """Whether an option of ``kind`` must refuse ``value`` (one of :data:`BAD_NUMBERS`)."""
    return number_kind(kind) is int or value in BAD_FLOATS


# Values no number field of a record may hold (a string and a list stand for a wrong type).
BAD_FIELD_VALUES = (None, float("nan"), float("inf"), float("-inf"), 1e39, 2**64, -(2**64), "text", [1], {})


def record_examples() -> dict[str, tuple[object, dict]]:
    """A valid record of every kind in :mod:`fspo.utils.record_schemas` (name -> (schema, record)); a kind without an
    example here fails ``test_every_record_kind_has_an_example``."""
    from fspo.utils import record_schemas as rs

    think = "<think>Paris is the capital of France. It is on the Seine.</think> Paris"
    return {
        "Prediction": (
            rs.Prediction,
            {
                "index": 0,
                "row_key": "k0",
                "data_source": "synthetic",
                "prompt": "Where is Paris?",
                "evidence": "Paris is the capital of France. Paris is on the Seine.",
                "responses": [think, "<think>Paris is in Spain.</think> Spain"],
                "sample_scores": [1.0, 0.0],
                "score": 0.5,
                "acc": 0.5,
                "scorer_timeouts": 0,
            },
        ),
        "Verdict": (rs.Verdict, {"key": "k", "verdict": True, "judge_model": "m", "reply": "yes"}),
        "Pair": (
            rs.Pair,
            {
                "prompt": "Where?",
                "chosen": think,
                "rejected": "no",
                "fdpo_margin_weight": 1,
                "chosen_hallucinated": 0,
                "rejected_hallucinated": 1,
                "flipped": False,
                "chosen_score": 1.0,
                "rejected_score": 0.0,
            },
        ),
        "LabelledClaim": (
            rs.LabelledClaim,
            {"evidence": "Paris is in France.", "claim": "Paris is in France.", "label": 1},
        ),
        "ValidationSample": (rs.ValidationSample, {"input": "q", "output": think, "f1": 0.5, "score": 1.0}),
        "TrainerMetrics": (rs.TrainerMetrics, {"step": 1, "data": {"critic/score/mean": 0.5}}),
        "Provenance": (rs.Provenance, {"model": "m", "temperature": 0.0, "top_p": 1.0, "samples": 2, "seed": 0}),
        "VerifyRow": (rs.verify_row("evidence", "response"), {"evidence": "Paris is in France.", "response": think}),
    }


def record_kinds() -> list[str]:
    """The record kinds :mod:`fspo.utils.record_schemas` declares (its Structs, and ``verify_row``'s)."""
    import msgspec

    from fspo.utils import record_schemas as rs

    kinds = [name for name, value in vars(rs).items() if isinstance(value, type) and issubclass(value, msgspec.Struct)]
    return sorted({*(k for k in kinds if k != "Struct"), "VerifyRow"})


def fits(schema, record) -> bool:
    import msgspec

    try:
        msgspec.convert(record, schema, strict=True)
    except msgspec.ValidationError:
        return False
    return True


def corrupted_records(schema, record: dict) -> list[tuple[str, dict]]:
    """Every way to break ``record`` one field at a time that ``schema`` must refuse: each field set to each of
    :data:`BAD_FIELD_VALUES` (where the schema does not allow it, e.g. null for an optional field), and each
    required field dropped. Each as (what was broken, the record)."""
    cases = []
    for field in record:
        for bad in BAD_FIELD_VALUES:
            broken = {**record, field: bad}
            if not fits(schema, broken):
                cases.append((f"{field}={bad!r}", broken))
        dropped = {k: v for k, v in record.items() if k != field}
        if not fits(schema, dropped):
            cases.append((f"no {field}", dropped))
    return cases


def jsonl_bytes(records: list[dict], bom: bool = False, crlf: bool = False) -> bytes:
    """``records`` as JSON Lines, their text unescaped (as ``ensure_ascii=False`` writers write it)."""
    end = "\r\n" if crlf else "\n"
    text = "".join(json.dumps(r, ensure_ascii=False) + end for r in records)
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")


def with_separator(record: dict, separator: str) -> dict:
    """``record`` with ``separator`` inside every string (nested ones too)."""

    def spread(value):
        if isinstance(value, str):
            return value[: len(value) // 2] + separator + value[len(value) // 2 :]
        if isinstance(value, list):
            return [spread(v) for v in value]
        if isinstance(value, dict):
            return {k: spread(v) for k, v in value.items()}
        return value

    return {k: (spread(v) if k not in ("key", "row_key") else v) for k, v in record.items()}


def numeric_options(path: tuple[str, ...]) -> dict[str, object]:
    """The numeric options of leaf command ``path`` (flag -> its argparse ``type``): those whose type is ``int``,
    ``float`` or a :class:`fspo.config.numeric_options.Number`'s ``parse``, found by recording the parser its ``--help``
    builds."""
    import argparse

    from fspo.config.numeric_options import Number

    found: dict[str, object] = {}
    original = argparse._ActionsContainer.add_argument

    def recording(self, *args, **kwargs):
        kind = kwargs.get("type")
        if kind in (int, float) or isinstance(getattr(kind, "__self__", None), Number):
            found.update({flag: kind for flag in args if flag.startswith("--")})
        return original(self, *args, **kwargs)

    argparse._ActionsContainer.add_argument = recording
    try:
        _help(list(path))
    finally:
        argparse._ActionsContainer.add_argument = original
    return {flag: kind for flag, kind in found.items() if flag in options(path)}


def config_numbers() -> dict[str, type]:
    """Every numeric key of the ``fspo:`` block (its dataclasses' int and float fields, optional ones too; not
    those that also take a name, ``entailment_label``)."""
    import typing

    from fspo.config.fspo_config import FSPOConfig
    from fspo.config.verifier import VerifierConfig

    keys = {}
    for prefix, cls in (("fspo", FSPOConfig), ("fspo.verifier", VerifierConfig)):
        for name, hint in typing.get_type_hints(cls).items():
            kinds = set(typing.get_args(hint)) or {hint}
            if not name.startswith("_") and kinds & {int, float} and not kinds & {bool, str}:
                keys[f"{prefix}.{name}"] = int if int in kinds else float
    return keys


# The output-folder classes: for every option a command declares with fspo.utils.output_dir.output_option, the folder
# it names is made one of these, and the command must refuse it first (the option is read first), in one line
# holding the phrase, changing nothing inside or outside the folder.
OUTPUT_CLASSES = {
    "record": ".fspo-outputs.json",  # a record entry outside the folder, or a name no file can have
    "link": "symbolic link",  # a listed file or folder since replaced by a link to the outside (or to a link)
    "lock": "being written by another command",  # another process holds the folder
    "read-only": "not writable",
    "file": "is a file",  # a file where the folder is expected, or above it
}
# Record entries no command may act on; "@outside" stands for the absolute path of a file outside the folder.
TAMPERED_ENTRIES = (
    "../outside/victim.txt",
    "a/../../outside/victim.txt",
    "../outside/",
    "..",
    "@outside",
    "/",
    "",
    "x\x00y",
    "\ud800",
)


def output_options(leaves) -> dict[tuple[str, ...], dict[str, str]]:
    """``{leaf: {flag: "folder" or "file"}}`` for every leaf command with an output option (the parsers, built
    by :func:`command_paths`, declared them with :func:`fspo.utils.output_dir.output_option`)."""
    from fspo.utils.output_dir import OUTPUT_OPTIONS

    return {
        leaf: OUTPUT_OPTIONS["fspo " + " ".join(leaf)] for leaf in leaves if "fspo " + " ".join(leaf) in OUTPUT_OPTIONS
    }


def build_outside(root: Path) -> Path:
    """Files a tampered record or a swapped-in link points at: the user's, which no command may touch."""
    outside = root / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "victim.txt").write_bytes(b"the user's file\n")
    (outside / "dir" / "inner.txt").write_bytes(b"the user's other file\n")
    (outside / "link").symlink_to(outside / "dir", target_is_directory=True)
    return outside


def tampered_folder(folder: Path, outside: Path, entry: str, command: str) -> None:
    """``folder`` whose record lists ``entry`` as ``command``'s."""
    folder.mkdir(parents=True)
    entry = str(outside / "victim.txt") if entry == "@outside" else entry
    record = {"written": {entry: command, "results.md": command}}
    (folder / ".fspo-outputs.json").write_text(json.dumps(record), encoding="utf-8")
    (folder / "results.md").write_bytes(b"an earlier output\n")


def linked_folder(folder: Path, outside: Path, listed: str, to_link: bool, command: str) -> None:
    """``folder`` whose record lists ``listed`` (``sub/`` or ``sub/file``), ``sub`` now a link to the outside
    (``to_link``: to a link there)."""
    folder.mkdir(parents=True)
    (folder / ".fspo-outputs.json").write_text(json.dumps({"written": {listed: command}}), encoding="utf-8")
    (folder / listed.split("/")[0]).symlink_to(outside / ("link" if to_link else "dir"), target_is_directory=True)


def make_read_only(folder: Path) -> bool:
    """``folder`` unwritable, for this user (root included: the immutable attribute); False where it cannot be."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o555)
    if not os.access(folder, os.W_OK):
        return True
    subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False)
    return not os.access(folder, os.W_OK)


def undo_read_only(folder: Path) -> None:
    subprocess.run(["chattr", "-i", str(folder)], capture_output=True, check=False)
    folder.chmod(0o755)


def hold_folder(folder: Path, command: str) -> subprocess.Popen:
    """Another process writing ``folder``: ``python -m fspo.utils.output_dir hold`` around a sleep, once it holds it."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fspo.utils.output_dir",
            "hold",
            f"--command={command}",
            str(folder),
            "--",
            "sleep",
            "600",
        ],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    for _ in range(400):
        if (folder / ".fspo-lock").exists() and (folder / ".fspo-lock").stat().st_size:
            return holder
        time.sleep(0.025)
    holder.kill()
    raise RuntimeError(f"python -m fspo.utils.output_dir hold did not take {folder}")
