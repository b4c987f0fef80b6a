"""One reader per kind of file the project reads (JSON, JSON Lines, TOML, parquet, a safetensors index, a Hugging
Face config.json), each turning every failure into one :class:`InputFileError` naming the file and what is wrong.

A missing or unreadable file, bytes that are not UTF-8, malformed text, the wrong top-level type and text holding
an unpaired surrogate (JSON's ``"\\udcff"`` escape: Python reads it, but cannot encode it to print or write it)
are all refused here, so that no command meets them later as a traceback. JSON nested too deeply to parse is
refused too. Every JSON the package parses goes through :func:`parse_json`, a file, standard input, an option's
value or a server's answer (tests/test_input_doors.py holds it so). ``fspo <command>`` prints the error
as one line and exits 2 (:func:`fspo.utils.subcommands.dispatch`).

JSON Lines are split on ``\\n`` only: ``str.splitlines`` also splits on U+2028, U+2029, U+0085 and others
that are legal inside a JSON string, so a file one command wrote would not read back in another. Given a
``schema`` (:mod:`fspo.utils.record_schemas`), each record is validated on read, and a field that does not fit (a
``null`` or NaN where a number belongs, a wrong type, a missing field) is refused naming the file, the line and
the field.

Every parquet file the package reads goes through :func:`read_parquet`, :func:`read_parquet_rows`,
:func:`read_parquet_schema` or :func:`parquet_row_count` (tests/test_parquet_door.py holds it so); a row schema
per kind: :class:`fspo.training.data_checks.PromptRow` (verl's RL rows) and
:class:`fspo.utils.record_schemas.LabelledClaim`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


class InputFileError(ValueError):
    """A file the project reads that cannot be used, with its path and what is wrong."""


class UnpairedSurrogate(InputFileError):
    """Text that JSON's ``\\ud800``-``\\udfff`` escapes made: Python reads it, no file name or output can hold it."""


def _name(path: str | os.PathLike) -> str:
    # A path from a non-UTF-8 file name carries surrogates: shown escaped, so the message itself can be printed.
    return str(path).encode("utf-8", "backslashreplace").decode("utf-8")


def read_bytes(path: str | os.PathLike, what: str = "file") -> bytes:
    """The bytes of ``path``; a missing file, a folder or an unreadable file is one :class:`InputFileError`."""
    path = Path(path)
    if path.is_dir():
        raise InputFileError(f"{_name(path)} is a folder, not a {what}")
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise InputFileError(f"{_name(path)} does not exist") from None
    except OSError as error:
        raise InputFileError(f"{_name(path)} cannot be read ({error.strerror or error})") from None


def decode_utf8(path: str | os.PathLike, data: bytes, where: str = "") -> str:
    """``data`` (read from ``path``) as UTF-8 text, a byte-order mark dropped; bytes that are not UTF-8 are
    refused, naming the first one's offset: never replaced, so "Zürich" in Latin-1 is no "Z\ufffdrich"."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputFileError(
            f"{_name(path)}{where} is not UTF-8 text (byte {error.start} is {data[error.start : error.start + 1]!r}): "
            "save it as UTF-8"
        ) from None


def read_text(path: str | os.PathLike, what: str = "text file") -> str:
    """The UTF-8 text of ``path`` (a byte-order mark dropped); bytes that are not UTF-8 are refused."""
    return decode_utf8(path, read_bytes(path, what))


def read_stdin_text(stream=None) -> str:
    """Standard input as UTF-8 text, read as bytes and decoded strictly (:func:`decode_utf8`), whatever the locale:
    a text stream would decode by the locale and turn bad bytes into surrogates."""
    return decode_utf8("<stdin>", (stream or sys.stdin.buffer).read())


def unpaired_surrogate(value: Any) -> str | None:
    """The first string in ``value`` (nested lists and dicts, keys too) that UTF-8 cannot encode, or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value
        return None
    if isinstance(value, dict):
        items = [*value.keys(), *value.values()]
    elif isinstance(value, list | tuple):
        items = value
    else:
        return None
    for item in items:
        found = unpaired_surrogate(item)
        if found is not None:
            return found
    return None


def _check_encodable(path, value: Any, where: str = "") -> None:
    bad = unpaired_surrogate(value)
    if bad is not None:
        shown = bad.encode("utf-8", "backslashreplace").decode("utf-8")[:60]
        raise UnpairedSurrogate(
            f"{_name(path)}{where}: text {shown!r} holds an unpaired surrogate (a \\ud800-\\udfff escape), which "
            "is not Unicode text and cannot be written out: fix or drop it"
        )


def _type_name(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false"}.get(type(value), "a number")


def parse_json(path: str | os.PathLike, text: str, expect: type | None = dict, where: str = "") -> Any:
    """``text`` (read from ``path``) as JSON of type ``expect`` (None: any), with its strings encodable."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputFileError(
            f"{_name(path)}{where or f', line {error.lineno}'}: not valid JSON ({error.msg})"
        ) from None
    except RecursionError:
        raise InputFileError(f"{_name(path)}{where}: JSON nested too deeply to read") from None
    if expect is not None and not isinstance(value, expect):
        wanted = "an object {...}" if expect is dict else "a list [...]" if expect is list else expect.__name__
        raise InputFileError(f"{_name(path)}{where}: holds {_type_name(value)}, expected {wanted}")
    _check_encodable(path, value, where)
    return value


def parse_json_bytes(path: str | os.PathLike, data: bytes, expect: type | None = dict, where: str = "") -> Any:
    """``data`` (read from ``path``) as strict UTF-8 (:func:`decode_utf8`), then as JSON (:func:`parse_json`)."""
    return parse_json(path, decode_utf8(path, data, where), expect, where)


def validate(path: str | os.PathLike, value: Any, schema: Any, where: str = "") -> Any:
    """``value`` when it fits msgspec type ``schema``; else one :class:`InputFileError` naming the field."""
    import msgspec

    try:
        msgspec.convert(value, schema, strict=True)
    except msgspec.ValidationError as error:
        raise InputFileError(f"{_name(path)}{where}: {_field_problem(str(error), value)}") from None
    return value


def _field_problem(message: str, value: Any) -> str:
    """msgspec's ``Expected `float`, got `null` - at `$.score[0]``` as ``field score[0]: expected ..., got None``."""
    reason, _, at = message.partition(" - at `$")
    at = at.rstrip("`")
    if not at:
        return reason[0].lower() + reason[1:]
    found = _at(value, at)
    shown = "" if found is _MISSING or "got `" in reason or "enum value" in reason else f", got {found!r:.60}"
    return f"field {at.lstrip('.')}: {reason[0].lower() + reason[1:]}{shown}"


_MISSING = object()


def _at(value: Any, path: str) -> Any:
    """The part of ``value`` at msgspec's path (``.a[0].b``), or ``_MISSING``."""
    import re

    for key, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        try:
            value = value[key] if key else value[int(index)]
        except (KeyError, IndexError, TypeError):
            return _MISSING
    return value


def read_json(path: str | os.PathLike, expect: type | None = dict, schema: Any = None) -> Any:
    """A JSON file whose top level is ``expect`` (an object by default; None: any), fitting ``schema`` if given."""
    value = parse_json(path, read_text(path, "JSON file"), expect)
    return value if schema is None else validate(path, value, schema)


def jsonl_lines(text: str) -> list[str]:
    """The lines of JSON Lines ``text``: split on ``\\n`` only (a ``\\r`` before it is JSON whitespace), a
    leading byte-order mark dropped."""
    return text.removeprefix("\ufeff").split("\n")


def parse_jsonl(
    path: str | os.PathLike, lines: list[str], schema: Any = None, drop_partial_last: bool = False
) -> list[dict]:
    """The objects of JSON Lines ``lines`` (read from ``path``), one per non-blank line, each fitting ``schema``.

    ``drop_partial_last`` is for a command resuming its own output, and only for it: a last line that does not
    parse and does not end in a newline is its write cut short (a crash, a full disk), dropped, and the drop is
    said on stderr. A consumer of a file keeps the default: a cut-short last line is refused like any other.
    """
    ended = not lines or not lines[-1]  # the text ended with "\n"
    last = max((n for n, line in enumerate(lines) if line.strip()), default=-1)
    records = []
    for number, line in enumerate(lines):
        if not line.strip():
            continue
        where = f", line {number + 1}"
        try:
            record = parse_json(path, line, dict, where)
        except InputFileError:
            if drop_partial_last and number == last and not ended:
                print(
                    f"{_name(path)}{where} was cut short (an interrupted write): dropped, resuming after it",
                    file=sys.stderr,
                )
                break
            raise
        records.append(record if schema is None else validate(path, record, schema, where))
    return records


# Where a command moving a set of output files into a folder lists them until all have moved
# (fspo.utils.output_dir.install_staged): {"command": ..., "files": [...], "stale": [...]}, paths relative to the folder.
OUTPUT_JOURNAL = ".fspo-journal.json"


def unfinished_set(path: str | os.PathLike) -> str | None:
    """Why ``path`` cannot be read yet (None: it can): it is one of a set of output files a command was moving into
    its folder when it was killed (a folder above it holds an :data:`OUTPUT_JOURNAL` listing it, or one that cannot
    be read), so the files beside it may be of the set before."""
    resolved = Path(os.path.realpath(path))
    for folder in resolved.parents:
        if not os.path.lexists(folder / OUTPUT_JOURNAL):
            continue
        relative = resolved.relative_to(folder).as_posix()
        try:
            journal = read_json(folder / OUTPUT_JOURNAL)
            listed = [*journal.get("files", []), *journal.get("stale", [])]
            command = journal.get("command")
        except (InputFileError, TypeError):
            listed, command = [relative], "a command"
        if relative in listed:
            return (
                f"{_name(path)} is one of the files {command} was moving into {_name(folder)} together when it "
                f"stopped ({OUTPUT_JOURNAL}); finish the move with `python -m fspo.utils.output_dir finish "
                f"{_name(folder)}` (or run the command again)"
            )
    return None


def refuse_unfinished(path: str | os.PathLike) -> None:
    """Refuse ``path`` while a set of output files it belongs to is moving in (:func:`unfinished_set`)."""
    problem = unfinished_set(path)
    if problem:
        raise InputFileError(problem)


def read_jsonl(path: str | os.PathLike, drop_partial_last: bool = False, schema: Any = None) -> list[dict]:
    """The objects of a JSON Lines file, one per non-blank line, each fitting ``schema`` when given
    (:func:`parse_jsonl`); refused while a set it belongs to is moving in (:func:`refuse_unfinished`)."""
    refuse_unfinished(path)
    return parse_jsonl(path, jsonl_lines(read_text(path, "JSON Lines file")), schema, drop_partial_last)


def read_toml(path: str | os.PathLike) -> dict:
    """A TOML file as a dict."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        from pip._vendor import tomli as tomllib

    text = read_text(path, "TOML file")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise InputFileError(f"{_name(path)}: not valid TOML ({error})") from None


def _parquet(path: str | os.PathLike, read):
    """``read(path)``, a ``pyarrow.parquet`` reader; a missing file, a folder or a file that is not parquet is one
    :class:`InputFileError` naming the file."""
    if not Path(path).is_file():
        read_bytes(path, "parquet file")  # says missing, a folder or unreadable
    refuse_unfinished(path)
    try:
        return read(path)
    except Exception as error:  # noqa: BLE001 - pyarrow raises several kinds for a file that is not parquet
        message = " ".join(str(error).split())
        raise InputFileError(f"{_name(path)}: not a readable parquet file ({message})") from None


def read_parquet_schema(path: str | os.PathLike):
    """A parquet file's pyarrow schema, read from its footer (no row is read)."""
    import pyarrow.parquet as pq

    return _parquet(path, pq.read_schema)


def parquet_row_count(path: str | os.PathLike) -> int:
    """How many rows a parquet file holds, read from its footer."""
    import pyarrow.parquet as pq

    return _parquet(path, lambda source: pq.read_metadata(source).num_rows)


def read_parquet(path: str | os.PathLike, columns: list[str] | None = None):
    """A parquet file as a pyarrow Table (only ``columns`` when given)."""
    import pyarrow.parquet as pq

    return _parquet(path, lambda source: pq.read_table(source, columns=columns))


def read_parquet_rows(path: str | os.PathLike, columns: list[str] | None = None, schema: Any = None) -> list[dict]:
    """The rows of a parquet file as dicts, their text checked encodable, each fitting ``schema`` when given."""
    rows = read_parquet(path, columns).to_pylist()
    for number, row in enumerate(rows):
        _check_encodable(path, row, f", row {number}")
        if schema is not None:
            validate(path, row, schema, f", row {number}")
    return rows


def read_hf_config(folder: str | os.PathLike) -> dict:
    """A Hugging Face model folder's config.json, which must be an object naming its ``model_type``."""
    config = read_json(Path(folder) / "config.json")
    if "model_type" not in config:
        raise InputFileError(
            f"{_name(Path(folder) / 'config.json')}: names no model_type, so transformers cannot load it"
        )
    return config


def read_safetensors_index(path: str | os.PathLike) -> dict[str, str]:
    """A sharded checkpoint's ``*.safetensors.index.json``: its ``weight_map`` (tensor name -> shard file)."""
    index = read_json(path)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise InputFileError(f"{_name(path)}: has no weight_map object of tensor name -> shard file")
    return weight_map
