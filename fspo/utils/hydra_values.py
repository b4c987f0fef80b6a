"""Values handed to Hydra as overrides, quoted so that any text reads back as given.

Hydra's override grammar reads spaces, parentheses, ``=``, ``,``, quotes and brackets as syntax
(hydra/grammar/OverrideLexer.g4), so a folder named ``runs (copy)`` is a grammar error unquoted. Inside a
quoted value Hydra unescapes only backslashes before a quote or before the closing quote (QUOTED_VALUE);
OmegaConf, which reads the value next, only backslashes before ``${`` (an interpolation). Each such run of
backslashes is doubled and the quote or ``${`` escaped. ``recipes/common.sh``'s ``fspo_quoted`` is the same rule
in bash (tests/test_recipe_paths.py holds the two equal).
"""

from __future__ import annotations

import os
import re


def _escape_runs(text: str, before: str) -> str:
    """Each run of backslashes that ends right before ``before`` doubled, and ``before`` escaped."""
    return re.sub(rf"(\\*)({re.escape(before)})", lambda m: m.group(1) * 2 + "\\" + m.group(2), text)


def hydra_quoted(value: str | os.PathLike) -> str:
    """``value`` as one quoted value of a Hydra override (``key=<this>``), read back exactly as given."""
    text = _escape_runs(_escape_runs(str(value), "${"), "'")  # OmegaConf's level, then Hydra's
    trailing = len(text) - len(text.rstrip("\\"))  # Hydra unescapes a run before the closing quote too
    return "'" + text + "\\" * trailing + "'"
