"""The project's Markdown pages, and what they may name: the ones the docs tests read.

The README, every page under docs/ and the README beside the code it describes (data/, evaluate/, recipes/).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def markdown_pages() -> list[str]:
    """Each page's path relative to the repository, the README first."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(REPO.glob("*/README.md"))]
    return list(dict.fromkeys(str(page.relative_to(REPO)) for page in pages if not page.parent.name.startswith(".")))
