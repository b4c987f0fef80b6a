"""The `fspo` commands as a user types them, their argparse parsers, and the options a Markdown page names for them.

Shared by the help tests (tests/test_cli_help.py) and the docs tests (tests/test_docs.py).
"""

from __future__ import annotations

import argparse
import re

import pytest

from fspo.cli import main as fspo_main
from fspo.data.registry import DATASETS
from fspo_testing.docs_pages import REPO

# Each argparse command, as a user types it (`fspo data <name>` stands for every builder).
COMMANDS = {
    "fspo verify": ["verify"],
    "fspo verifier train": ["verifier", "train"],
    "fspo verifier download": ["verifier", "download"],
    "fspo fdpo build-pairs": ["fdpo", "build-pairs"],
    "fspo fdpo train": ["fdpo", "train"],
    "fspo data check": ["data", "check"],
    "fspo data synthetic": ["data", "synthetic"],
    "fspo evaluate": ["evaluate"],
    "fspo quickstart": ["quickstart"],
    **{f"fspo data {name}": ["data", name] for name in DATASETS},
}
# Options of tools that are not fspo commands, named in the same paragraphs as one: the benchmark scripts',
# pip's and ruff's. A README line that names them is about that tool.
OTHER_TOOLS = {"--finetuned", "--no-deps", "--target-dir", "--trust-remote-code", "--index-url", "--check"}


def parser_of(argv: list[str], monkeypatch) -> argparse.ArgumentParser:
    """The parser `fspo argv --help` prints, caught as it parses; asserts the exit status is 0."""
    seen = []
    original = argparse.ArgumentParser.parse_args

    def recording(self, *args, **kwargs):
        seen.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", recording)
    with pytest.raises(SystemExit) as exit_:
        fspo_main([*argv, "--help"])
    assert exit_.value.code == 0, argv
    parser = seen[-1]
    for action in parser._actions:  # argparse subparsers (`fspo fdpo train`): the subcommand's own parser
        if isinstance(action, argparse._SubParsersAction) and argv[-1] in action.choices:
            return action.choices[argv[-1]]
    return parser


def all_parsers() -> dict[str, argparse.ArgumentParser]:
    """Each command's parser, by the name a user types."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return {command: parser_of(argv, monkeypatch) for command, argv in COMMANDS.items()}


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def _paragraphs(text: str) -> list[str]:
    """Paragraphs, list items and lines of code blocks: the unit a command and its options share."""
    units, current = [], []
    for line in text.splitlines():
        starts_item = re.match(r"\s*([-*]|\d+\.) ", line) or line.startswith(("    ", "```", "|"))
        if not line.strip() or starts_item:
            if current:
                units.append("\n".join(current))
            current = [line] if line.strip() else []
        else:
            current.append(line)
    if current:
        units.append("\n".join(current))
    return units


def named_commands(unit: str) -> tuple[str, ...]:
    """The fspo commands a paragraph, list item or table row names."""
    text = unit.replace("fspo data <name>", "fspo data hotpotqa")
    commands = []
    for name in sorted(COMMANDS, key=len, reverse=True):  # `fspo data check` before `fspo data <name>`
        if re.search(re.escape(name) + r"(?![\w-])", text):
            commands.append(name)
            text = text.replace(name, "")
    return tuple(commands)


def page_commands(page: str) -> tuple[str, ...]:
    """The commands a paragraph that names none is about: data/README.md's tables name the sets bare
    (`truthfulqa --form mc1`), evaluate/README.md is about `fspo evaluate`."""
    data_commands = tuple(name for name in COMMANDS if name.startswith("fspo data "))
    return {"data/README.md": data_commands, "evaluate/README.md": ("fspo evaluate",)}.get(page, ())


def option_mentions(pages: list[str]) -> list[tuple[str, tuple[str, ...], str]]:
    """(page, commands, option) for each ``--option`` in a paragraph that names one fspo command, or none on a
    page about some (:func:`page_commands`)."""
    found = []
    for page in pages:
        for unit in _paragraphs((REPO / page).read_text(encoding="utf-8")):
            commands = named_commands(unit)
            if "benchmarks/" in unit:  # a benchmark script's options, not the fspo command's beside it
                continue
            options = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", unit)) - OTHER_TOOLS
            if len(commands) == 1 or (not commands and page_commands(page)):
                found += [(page, commands or page_commands(page), option) for option in sorted(options)]
    return found
