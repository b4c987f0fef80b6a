"""A source field as clean text: what the dataset builders write and the trainer's data checks read."""

from __future__ import annotations

import math
from typing import Any

from fspo.utils.input_files import decode_utf8


def clean_text(value: Any) -> str:
    """A field as a clean string: None/NaN -> "", bytes decoded as strict UTF-8, stripped; bytes that are not
    UTF-8 are one :class:`fspo.utils.input_files.InputFileError` (a command's one-line refusal), never replaced."""
    if value is None:
        return ""
    if isinstance(value, float) and math.isnan(value):
        return ""
    if isinstance(value, bytes):
        value = decode_utf8("a text field", value)
    return str(value).strip()


def text_list(value: Any) -> list[str]:
    """A list of non-empty clean strings from a string, a list, a numpy array or None."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, float, int)):
        text = clean_text(value)
        return [text] if text else []
    return [text for text in (clean_text(item) for item in value) if text]
