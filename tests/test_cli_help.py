"""Every command answers ``--help`` with exit 0, every option it lists has help text, and every option the
READMEs and docs/ pages name for a command is one that command has."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from fspo.cli import main as fspo_main
from fspo.data.registry import DATASETS
from fspo_testing.docs_pages import markdown_pages
from fspo_testing.warm_python import warm_python

REPO = Path(__file__).resolve().parents[1]
READMES = tuple(markdown_pages())

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


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


@pytest.fixture(scope="module")
def parsers() -> dict[str, argparse.ArgumentParser]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        return {command: parser_of(argv, monkeypatch) for command, argv in COMMANDS.items()}


@pytest.mark.parametrize("argv", [[], ["--help"], ["data", "--help"], ["verifier", "--help"], ["verifier", "-h"]])
def test_dispatchers_answer_help_with_0(argv, capsys):
    assert fspo_main(argv) == 0
    assert capsys.readouterr().out.startswith("usage: fspo")


def test_every_option_of_every_command_has_help_text(parsers):
    missing = [
        f"{command} {action.option_strings or action.dest}"
        for command, parser in parsers.items()
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and not (action.help or "").strip()
    ]
    assert missing == []


def test_fspo_train_help_exits_0():
    result = subprocess.run(
        [warm_python(), "-m", "fspo.cli", "train", "--help"], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "fspo" in result.stdout


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


def readme_mentions() -> list[tuple[str, tuple[str, ...], str]]:
    """(README, commands, option) for each ``--option`` in a paragraph that names one fspo command.

    In data/README.md a paragraph that names none is about the `fspo data` commands (its tables name the sets
    bare: `truthfulqa --form mc1`), in evaluate/README.md about `fspo evaluate`.
    """
    found = []
    names = sorted(COMMANDS, key=len, reverse=True)  # `fspo data check` before `fspo data <name>`
    data_commands = tuple(name for name in COMMANDS if name.startswith("fspo data "))
    for readme in READMES:
        default = {"data/README.md": data_commands, "evaluate/README.md": ("fspo evaluate",)}.get(readme, ())
        for unit in _paragraphs((REPO / readme).read_text(encoding="utf-8")):
            text = unit.replace("fspo data <name>", "fspo data hotpotqa")
            commands = []
            for name in names:
                if re.search(re.escape(name) + r"(?![\w-])", text):
                    commands.append(name)
                    text = text.replace(name, "")
            if "benchmarks/" in unit:  # a benchmark script's options, not the fspo command's beside it
                continue
            options = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", unit)) - OTHER_TOOLS
            if len(commands) == 1 or (not commands and default):
                found += [(readme, tuple(commands) or default, option) for option in sorted(options)]
    return found


def test_the_readmes_name_only_options_their_commands_have(parsers):
    mentions = readme_mentions()
    assert len(mentions) > 40  # the READMEs name many options: the scan must find them
    unknown = [
        (readme, option)
        for readme, commands, option in mentions
        if not any(option in option_strings(parsers[command]) for command in commands)
    ]
    assert unknown == []
