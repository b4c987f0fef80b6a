"""Files written whole or not at all: a failed or interrupted write leaves the previous file, never half of one."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replacing(path: str | Path) -> Iterator[Path]:
    """A temporary path beside ``path`` for the ``with`` block to write; it replaces ``path`` when the block
    succeeds and is removed when it raises. It keeps ``path``'s suffix, for writers that pick a format by it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`replacing`."""
    with replacing(path) as temporary:
        temporary.write_text(text, encoding="utf-8")
