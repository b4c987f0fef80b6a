"""Every `fspo` command follows one convention (issue 72): a bare group command or an unknown subcommand exits 2
naming what is missing, `--version` prints fspo's version wherever it is typed, and each option's help ends in its
default as the user would type it."""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import io
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fspo.cli import main as fspo_main
from fspo.cli import train as fspo_train_entry_point
from fspo.utils.arguments import HelpFormatter, typed_default
from fspo_testing.cli_commands import COMMANDS, all_parsers

VERSION = f"fspo {importlib.metadata.version('fspo')}\n"
GROUPS = [[], ["data"], ["verifier"], ["fdpo"]]


def run(argv: list[str]) -> tuple[int, str, str]:
    """``fspo argv``: its exit status (argparse's SystemExit too), stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = fspo_main(argv)
        except SystemExit as exit_:
            status = exit_.code
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("group", GROUPS, ids=lambda argv: " ".join(["fspo", *argv]))
def test_a_bare_group_command_exits_2_with_its_usage_on_stderr(group):
    status, out, err = run(group)
    assert (status, out) == (2, "")
    assert "usage: fspo" in err


@pytest.mark.parametrize("group", GROUPS, ids=lambda argv: " ".join(["fspo", *argv]))
def test_an_unknown_subcommand_is_named(group):
    status, out, err = run([*group, "nosuch"])
    assert (status, out) == (2, "")
    assert "'nosuch'" in err


@pytest.mark.parametrize("argv", [[], ["train"], *COMMANDS.values()], ids=lambda argv: " ".join(["fspo", *argv]))
def test_version_prints_fspos_on_every_command(argv):
    assert run([*argv, "--version"]) == (0, VERSION, "")


def test_fspo_train_entry_point_prints_fspos_version(capsys):
    assert fspo_train_entry_point(["--version"]) == 0
    assert capsys.readouterr().out == VERSION


def shown_defaults() -> list[tuple[str, str, object, str]]:
    """(command, option, default, the help's text) of every option of every parser."""
    with contextlib.redirect_stdout(io.StringIO()):
        parsers = all_parsers()
    found = []
    for command, parser in parsers.items():
        formatter = parser._get_formatter()
        for action in parser._actions:
            if action.option_strings and action.help not in (None, argparse.SUPPRESS):
                text = " ".join(formatter._expand_help(action).split())
                found.append((command, action.option_strings[-1], action.default, text))
    return found


def test_every_default_is_shown_as_the_user_types_it():
    found = shown_defaults()
    # Python's spellings of a value: booleans, None, a list's or tuple's brackets.
    python_reprs = [(c, o, t) for c, o, _, t in found if re.search(r"\(default:? (True|False|None|\[|\()", t)]
    assert python_reprs == []
    # A number, 0 included, is a default worth saying (a seed of 0 is not "off").
    unsaid = [
        (c, o)
        for c, o, default, text in found
        if isinstance(default, (int, float)) and not isinstance(default, bool) and "default" not in text
    ]
    assert unsaid == []


@given(st.lists(st.text(alphabet="abc-_", min_size=1, max_size=5), min_size=1, max_size=4))
def test_a_list_default_is_its_items_space_separated(items):
    action = argparse.Action(["--split"], "split", default=items, help="the splits")
    assert typed_default(action) == " ".join(items)
    assert HelpFormatter("prog")._get_help_string(action) == f"the splits (default {' '.join(items)})"


def test_an_on_switch_default_is_the_flag_that_keeps_it_on():
    on = argparse.BooleanOptionalAction(["--evidence-in-prompt", "--no-evidence-in-prompt"], "e", default=True)
    assert typed_default(on) == "--evidence-in-prompt"


def test_one_name_per_meaning_across_commands():
    # --model is a model folder wherever it is an option, a served name is --judge-model, and a verifier option
    # not given its own flag is --verifier-option.
    found = shown_defaults()
    model_helps = {c: t for c, o, _, t in found if o == "--model"}
    assert model_helps and all(re.search(r"folder|directory", t) for t in model_helps.values()), model_helps
    assert [c for c, o, _, _ in found if o == "--option"] == []
    assert {c for c, o, _, _ in found if o == "--judge-model"} == {"fspo verify", "fspo evaluate"}


def test_no_help_reads_default_default():
    assert [(c, o) for c, o, _, t in shown_defaults() if "(default default)" in t] == []
