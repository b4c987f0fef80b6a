"""Reading source files and writing verl RL parquet.

A verl row (the contract every preprocessor and the synthetic generator keep)::

    {"data_source": str, "prompt": [{"role", "content"}, ...], "ability": str,
     "reward_model": {"style": "rule", "ground_truth": str | list[str]},
     "extra_info": {"index": int, "split": str, "question": str, "evidence": str,
                    "gold_facts": list[str], "incorrect_answers": list[str]}}

``extra_info`` has the same keys in every row of every set (verl stacks rows, and concatenates the
parquet files of ``data.val_files``): sets without evidence carry ``""``, without gold facts ``[]``.
"""

from __future__ import annotations

import csv
import io
import numbers
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from fspo.launch.hub_deadline import hub_timeout_s, no_answer
from fspo.utils.atomic_file import replacing
from fspo.utils.field_text import clean_text
from fspo.utils.input_files import InputFileError, jsonl_lines, parse_json, parse_jsonl, read_parquet_rows, read_text

SOURCE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


class SourceFieldError(ValueError):
    """A source record lacks a field (or has it in an unusable form)."""


class SourceFileError(ValueError):
    """A source file that cannot be read as records (bad JSON, an unsupported type, no usable rows)."""


def get_field(record: dict, names: str | Sequence[str], where: str, *, required: bool = True) -> Any:
    """The value of the first of `names` present in `record`; raise naming file, row and field if none is."""
    names = (names,) if isinstance(names, str) else tuple(names)
    for name in names:
        if name in record:
            return record[name]
    if not required:
        return None
    wanted = " or ".join(repr(name) for name in names)
    raise SourceFieldError(f"{where}: missing field {wanted} (fields present: {sorted(record)})")


def field_text(value: Any, where: str, name: str) -> str:
    """A text field's value as a clean string (a number is its text; None/NaN is ""). A list, a mapping or any
    other value is one error naming the file, row and field: ``str()`` of it would be a gold answer or question
    no response could match."""
    if value is not None and not isinstance(value, (str, bytes, numbers.Number)):
        raise SourceFieldError(f"{where}: field {name!r} must be text, got a {type(value).__name__}")
    return clean_text(value)


def get_text(record: dict, names: str | Sequence[str], where: str) -> str:
    """:func:`get_field` of a text field, through :func:`field_text` (the one door for a record's text)."""
    names = (names,) if isinstance(names, str) else tuple(names)
    name = next((name for name in names if name in record), names[0])
    return field_text(get_field(record, names, where), where, name)


def dedupe(items: Iterable[str]) -> list[str]:
    """`items` without repeats, first occurrence kept."""
    return list(dict.fromkeys(items))


def make_row(
    *,
    data_source: str,
    prompt: list[dict[str, str]],
    ability: str,
    ground_truth: str | list[str],
    index: int,
    split: str,
    question: str,
    evidence: str = "",
    gold_facts: Sequence[str] = (),
    incorrect_answers: Sequence[str] = (),
) -> dict:
    """One verl RL row in the project's format (see the module docstring)."""
    return {
        "data_source": data_source,
        "prompt": prompt,
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "index": int(index),
            "split": split,
            "question": question,
            "evidence": evidence,
            "gold_facts": list(gold_facts),
            "incorrect_answers": list(incorrect_answers),
        },
    }


def _without_null_types(data_type):
    """`data_type` with arrow's null type (an all-empty list column) replaced by string."""
    import pyarrow as pa

    if pa.types.is_null(data_type):
        return pa.string()
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return pa.list_(_without_null_types(data_type.value_type))
    if pa.types.is_struct(data_type):
        return pa.struct([pa.field(f.name, _without_null_types(f.type)) for f in data_type])
    return data_type


def write_parquet(rows: Sequence[dict], path: str | Path) -> Path:
    """Write `rows` as one parquet file (parent folders created); return the path.

    The file is written under a temporary name and renamed, so `path` is never half written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError(f"no rows to write to {path}")
    table = pa.Table.from_pylist(list(rows))
    # An all-empty list column is typed null; make it list<string> so files concatenate cleanly.
    schema = pa.schema([pa.field(f.name, _without_null_types(f.type)) for f in table.schema])
    table = table.cast(schema)
    path = Path(path)
    with replacing(path) as temporary:
        pq.write_table(table, temporary)
    return path


def read_rows(path: str | Path) -> list[dict]:
    """Read a parquet written by `write_parquet` back as a list of plain dicts (:mod:`fspo.utils.input_files`' reader)."""
    return read_parquet_rows(path)


def read_source_file(path: str | Path) -> list[dict]:
    """Records of one local source file: JSON Lines, a JSON list (or {"data": [...]}), parquet or CSV.

    Bytes that are not UTF-8 are refused, naming the first one's offset (never replaced). Read through
    :mod:`fspo.utils.input_files` (JSON Lines split on ``\\n`` only, a byte-order mark dropped); its one-line errors
    come back as :class:`SourceFileError`.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            return read_parquet_rows(path)
        # utf-8-sig: a byte-order mark (Windows editors, Excel's CSV) is not part of the first record.
        text = read_text(path, "source file")
        if suffix == ".jsonl":
            return parse_jsonl(path, jsonl_lines(text))
        if suffix == ".json":
            return _json_records(path, text)
        if suffix == ".csv":
            # newline="": a quoted field keeps its line breaks (and U+2028 and the like are no line break).
            return list(csv.DictReader(io.StringIO(text, newline="")))
    except InputFileError as error:
        raise SourceFileError(str(error)) from None
    raise SourceFileError(f"{path}: unsupported file type {suffix!r}; use one of {', '.join(SOURCE_SUFFIXES)}")


def _json_records(path: Path, text: str) -> list:
    """A JSON list of records (or ``{"data": [...]}``); some sources name JSON Lines files *.json."""
    try:
        data = parse_json(path, text, None)
    except InputFileError:
        return parse_jsonl(path, jsonl_lines(text))
    if isinstance(data, dict):
        data = data.get("data", data.get("rows", [data]))
    if not isinstance(data, list):
        raise SourceFileError(f"{path}: holds a JSON {type(data).__name__}, not a list of records")
    return data


def source_files(input_path: str | Path, split: str | None = None) -> list[Path]:
    """The source files behind `--input`: the file itself, or a folder's data files.

    In a folder, files whose name mentions `split` are preferred when there are any. For test, a file naming
    dev or val comes before one naming test: the official HotpotQA and 2WikiMultiHopQA releases hold their test
    questions without answers, and their dev files are the labelled held-out split.
    """
    input_path = Path(input_path)
    if not input_path.exists():
        raise FileNotFoundError(f"--input {input_path} does not exist")
    if input_path.is_file():
        return [input_path]
    files = sorted(p for p in input_path.iterdir() if p.is_file() and p.suffix.lower() in SOURCE_SUFFIXES)
    if not files:
        raise FileNotFoundError(f"--input {input_path} has no {'/'.join(SOURCE_SUFFIXES)} files")
    if split is not None:
        for aliases in {"train": [("train",)], "test": [("dev", "val"), ("test",)]}.get(split, [(split,)]):
            matching = [p for p in files if any(alias in p.name.lower() for alias in aliases)]
            if matching:
                return _one_set(matching, input_path, split)
    return _one_set(files, input_path, split)


def _one_set(files: list[Path], folder: Path, split: str | None) -> list[Path]:
    """``files`` when they are shards of one set (names that differ only in digits), else one error: HotpotQA's
    dev_distractor and dev_fullwiki hold the same questions, and reading both would hold each out twice."""
    if len({re.sub(r"\d+", "#", path.name) for path in files}) > 1:
        names = ", ".join(path.name for path in files)
        raise SourceFileError(
            f"--input {folder} has several files for {f'split {split}' if split else 'its rows'} ({names}): give the "
            "one to read as --input, with --split"
        )
    return files


def read_records(files: Sequence[Path]) -> list[tuple[str, dict]]:
    """(where, record) pairs from `files`; `where` names the file and row for error messages."""
    pairs = []
    for path in files:
        for row_number, record in enumerate(read_source_file(path)):
            if not isinstance(record, dict):
                raise SourceFieldError(f"{path}, row {row_number}: expected a JSON object, got {type(record).__name__}")
            pairs.append((f"{path}, row {row_number}", record))
    return pairs


def _check_the_hub_answers(name: str, label: str) -> None:
    """One bounded question to the hub before `datasets` asks its own: `datasets` gives the hub 100 s a
    request (its ``dataset_info`` calls), retried, so a hub that accepts and never answers held a build for
    minutes. Skipped offline, where `datasets` reads its cache without asking, and for a local folder."""
    import datasets
    import httpx
    from huggingface_hub import HfApi, constants
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError

    if constants.HF_HUB_OFFLINE or datasets.config.HF_DATASETS_OFFLINE or Path(name).exists():
        return
    timeout_s = hub_timeout_s()
    try:
        HfApi().dataset_info(name, timeout=timeout_s)
    except (httpx.TimeoutException, httpx.ConnectError) as error:
        raise FileNotFoundError(
            f"could not read {label}: cannot reach the hub at {constants.ENDPOINT} "
            f"({no_answer(timeout_s) if isinstance(error, httpx.TimeoutException) else error}); "
            "download it and pass --input, or set HF_DATASETS_OFFLINE=1 to use a cached copy"
        ) from error
    except (HfHubHTTPError, HFValidationError):
        pass  # not found, gated, an outage, not a hub id: `datasets` says which, and may fall back to its cache


def read_hub(name: str, config: str | None, split: str) -> list[tuple[str, dict]]:
    """(where, record) pairs of a Hugging Face hub dataset split, read with `datasets`."""
    import datasets

    label = f"{name}{'/' + config if config else ''}[{split}]"
    _check_the_hub_answers(name, label)
    try:
        if config and config.endswith((".parquet", ".jsonl", ".json")):  # a file inside the hub repository
            dataset = datasets.load_dataset(name, data_files={split: config}, split=split)
        else:
            dataset = datasets.load_dataset(name, config, split=split)
    except (ConnectionError, OSError) as error:  # offline, or not on the hub
        raise FileNotFoundError(
            f"could not read {label} from the Hugging Face hub ({error}); download it and pass --input"
        ) from error
    return [(f"{label}, row {i}", record) for i, record in enumerate(dataset)]
