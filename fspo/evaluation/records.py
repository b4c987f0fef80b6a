"""The predictions ``fspo evaluate`` keeps: JSONL records, read back after an interruption."""

from __future__ import annotations

import json
from pathlib import Path


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
