"""The docs pages a benchmark script writes from its committed results: written, or with ``--check`` compared.

One rule for every such script, so that a test running ``--check`` catches a page edited by hand or left stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def section_bounds(text: str, heading: str, until: str, page: str) -> tuple[int, int]:
    """Where the section starting at the line ``heading`` ends: at the first ``until`` after it. A page without
    either is refused in one line naming it (a heading renamed by hand)."""
    start = text.find(heading + "\n")
    if start == -1:
        raise ValueError(f"{page} has no line {heading!r} to write the section at")
    end = text.find(until, start + len(heading))
    if end == -1:
        raise ValueError(f"{page} has no {until.strip()!r} after {heading!r}")
    return start, end


def write_or_check(pages: dict[Path, str], command: str, check: bool, note: str = "") -> int:
    """Write each page of ``pages`` (path: its new text) that differs; with ``check``, write nothing, name each
    differing page with the ``command`` that writes it on stderr and return 1 when any differs."""
    stale = [path for path, text in pages.items() if path.read_text() != text]
    if check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} differs from `{command}`", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(pages[path])
    names = ", ".join(str(path.relative_to(ROOT)) for path in stale)
    print(f"wrote {names}{note}" if stale else f"unchanged{note}")
    return 0
