"""Every command answers ``--help`` with exit 0 and every option it lists has help text (the options the
docs name: tests/test_docs.py)."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from fspo.cli import main as fspo_main
from fspo_testing.cli_commands import all_parsers
from fspo_testing.warm_python import warm_python

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def parsers() -> dict[str, argparse.ArgumentParser]:
    return all_parsers()


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
