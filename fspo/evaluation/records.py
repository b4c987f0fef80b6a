"""The records ``fspo evaluate`` keeps (predictions, the judge's verdicts): JSONL, read back after an interruption
through :func:`fspo.utils.input_files.read_jsonl` and validated against their schema (:mod:`fspo.utils.record_schemas`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fspo.utils.input_files import read_jsonl


def read_records(path: str | Path, schema: Any) -> list[dict]:
    """Records of a JSONL file, each fitting ``schema``; none when there is no file yet.

    A last line cut short (an interrupted write: it does not end in a newline and does not parse) is dropped;
    any other line that does not parse or fit is refused (:class:`fspo.utils.input_files.InputFileError`).
    """
    path = Path(path)
    if not path.exists():
        return []
    return read_jsonl(path, drop_partial_last=True, schema=schema)


def ends_mid_line(path: str | Path) -> bool:
    """Whether a file exists, is not empty and does not end with a newline (its last write was cut short)."""
    path = Path(path)
    if not path.is_file() or path.stat().st_size == 0:
        return False
    with open(path, "rb") as handle:
        handle.seek(-1, 2)
        return handle.read(1) != b"\n"


def drop_torn_tail(path: str | Path) -> None:
    """Cut a last line that an interrupted write left without its newline, so that what is appended next starts
    a line of its own (the reader refuses a bad line anywhere but last)."""
    path = Path(path)
    if ends_mid_line(path):
        data = path.read_bytes()
        os.truncate(path, data.rfind(b"\n") + 1)
