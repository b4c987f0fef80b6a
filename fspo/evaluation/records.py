"""The files ``fspo evaluate`` keeps: JSONL records read back after an interruption, and atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_atomically(path: str | Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path` (never half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def read_records(path: str | Path) -> list[dict]:
    """Records of a predictions JSONL; a half-written last line (interrupted write) is dropped."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
