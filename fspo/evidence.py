"""Where a row's evidence is, and how it becomes one string.

The reward manager, ``fspo data check``, ``fspo verify`` and ``fspo evaluate`` read evidence through
these two functions, so a row that trains with evidence is checked, verified and evaluated with the
same text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def evidence_text(extra_info: Any, key: str = "evidence") -> str:
    """The row's evidence as one string ("" when absent, NaN, or empty).

    A list of paragraphs is joined with blank lines; anything else non-string counts as absent.
    """
    if not isinstance(extra_info, Mapping):
        return ""
    value = extra_info.get(key)
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, Sequence) or (hasattr(value, "tolist") and not isinstance(value, float)):
        items = value.tolist() if hasattr(value, "tolist") else list(value)
        return "\n\n".join(str(v).strip() for v in items if isinstance(v, str) and v.strip())
    return ""


def row_evidence(row: Mapping, key: str = "evidence") -> str:
    """A row's evidence: ``extra_info[key]``, else its top-level column ``key`` ("" when neither has any).

    The column is where the paper's released parquet files keep it (``knowledge``); verl's dataset
    hands every column of a row to the reward manager.
    """
    return evidence_text(row.get("extra_info"), key) or evidence_text(row, key)
