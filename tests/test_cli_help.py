"""Every command answers ``--help`` with exit 0 and every option it lists has help text (the options the
docs name: tests/test_docs.py)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from fspo.cli import main as fspo_main
from fspo_testing.cli_commands import all_parsers
from fspo_testing.warm_python import warm_python

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def parsers() -> dict[str, argparse.ArgumentParser]:
    return all_parsers()


@pytest.mark.parametrize("argv", [["--help"], ["data", "--help"], ["verifier", "--help"], ["verifier", "-h"]])
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


def test_fspo_version_is_the_installed_package_s(capsys):
    import importlib.metadata

    assert fspo_main(["--version"]) == 0
    assert capsys.readouterr().out == f"fspo {importlib.metadata.version('fspo')}\n"


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    """`fspo verify rows.jsonl --json | head -1`: was a BrokenPipeError traceback. The rows' output (~300 KB)
    outgrows the pipe's buffer, so the writer meets the closed pipe whatever the timing."""
    rows = tmp_path / "rows.jsonl"
    row = '{"evidence": "Paris is the capital of France.", "response": "<think>Paris is the capital.</think>"}\n'
    rows.write_text(row * 3000)
    result = subprocess.run(
        ["bash", "-c", f"'{warm_python()}' -m fspo.cli verify '{rows}' --verifier lexical --json | head -1"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert result.stdout.startswith('{"row": 1,') and result.stdout.count("\n") == 1
    assert result.stderr == ""


def test_fspo_train_help_is_its_own_and_names_the_environment_without_importing_verl():
    """Was: Hydra's 1,136-line config dump after verl's import warnings; FSPO_DRY_RUN and FSPO_PREFLIGHT in no help."""
    code = "import sys; from fspo.cli import main; main(['train', '--help']); print('verl' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0 and result.stderr == "", result.stderr[-2000:]
    assert result.stdout.startswith("usage: fspo train [KEY=VALUE ...]")
    assert result.stdout.splitlines()[-1] == "False"
    for name in ("FSPO_DRY_RUN=1", "FSPO_PREFLIGHT=0", "--options", "--cfg job", "--hydra-help"):
        assert name in result.stdout, name


def test_fspo_train_options_lists_every_fspo_key_with_its_default(capsys):
    from fspo.cli import main as fspo_main
    from fspo.config.reference import options

    assert fspo_main(["train", "--options"]) == 0
    printed = capsys.readouterr().out
    for option in options():
        assert f"{option.key}={option.default}" in printed
    assert "fspo.verifier.max_row_tokens=null    (hhem, nli, embedding)" in printed


def test_the_backend_lists_in_help_are_the_registry_s(parsers):
    """Was: `fspo verify --help` named 5 backends of 7, `fspo verifier download --help` 3 of the 5 that load weights."""
    from fspo.config.vocabulary import MODEL_BACKENDS, VERIFIER_NAMES

    for command, names in (("fspo verify", VERIFIER_NAMES), ("fspo verifier download", MODEL_BACKENDS)):
        shown = " ".join(parsers[command].format_help().split())
        assert all(name in shown for name in names), (command, shown)


def test_every_option_with_a_default_says_it_in_its_help(parsers):
    """An option's help ends with its default (fspo.utils.arguments.HelpFormatter) unless its text says it already;
    was: `fspo evaluate --help` gave no default for 12 options."""
    unsaid = []
    for command, parser in parsers.items():
        formatter = parser._get_formatter()
        for action in parser._actions:
            shown = formatter._get_help_string(action) if action.option_strings else ""
            if action.default not in (None, False, [], argparse.SUPPRESS) and "default" not in shown:
                unsaid.append((command, action.option_strings))
    assert unsaid == []


@pytest.fixture(scope="module")
def config_keys():
    from fspo.training.main import CONFIG_DIR
    from fspo.utils.arguments import known_config_keys

    return sorted(known_config_keys(CONFIG_DIR))


def test_a_mistyped_config_key_is_one_line_naming_the_key_it_resembles(config_keys):
    """`fspo.verifier.nme=hhem` (no +) was Hydra's six lines suggesting +fspo.verifier.nme. Typos of real keys
    (a letter dropped from the last part), each confirmed by composing the config as Hydra will."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from fspo.training.main import CONFIG_DIR, CONFIG_NAME
    from fspo.utils.arguments import UsageError, check_override_keys

    leaves = [k for k in config_keys if k.count(".") >= 2 and len(k.rsplit(".", 1)[1]) >= 5]

    @settings(max_examples=6, deadline=None, database=None)
    @given(st.sampled_from(leaves), st.integers(min_value=0, max_value=100))
    def typo_is_named(key, at):
        head, last = key.rsplit(".", 1)
        typo = f"{head}.{last[: at % len(last)]}{last[at % len(last) + 1 :]}"
        if typo in config_keys:
            return
        with pytest.raises(UsageError) as refused:
            check_override_keys([f"{typo}=1"], CONFIG_DIR, CONFIG_NAME)
        message = str(refused.value)
        assert "\n" not in message and message.startswith(f"{typo}: no such config key") and key in message

    typo_is_named()
    # Known keys and keys of one's own (+) pass without composing anything.
    check_override_keys([f"{k}=1" for k in leaves[:50]] + ["+my.own.key=1", "~trainer.logger"], CONFIG_DIR, CONFIG_NAME)


def test_hydras_own_keys_pass_without_composing_and_their_typos_are_named(monkeypatch):
    """The twins and a user's runs pass `hydra.run.dir=...`: a key of Hydra's own config is known, so it costs no
    second composition of the config (~1 CPU-s a launch); a typo in one is refused in one line like any other."""
    from fspo.training.main import CONFIG_DIR, CONFIG_NAME
    from fspo.utils import arguments
    from fspo.utils.arguments import UsageError, check_override_keys

    composed = []
    real_composes = arguments._composes
    monkeypatch.setattr(arguments, "_composes", lambda *args: composed.append(args) or real_composes(*args))
    check_override_keys(
        ["hydra.run.dir=/tmp/run", "hydra.job.chdir=false", "trainer.logger=[console]"], CONFIG_DIR, CONFIG_NAME
    )
    assert composed == []
    with pytest.raises(UsageError) as refused:
        check_override_keys(["hydra.run.dri=/tmp/run"], CONFIG_DIR, CONFIG_NAME)
    assert str(refused.value).startswith("hydra.run.dri: no such config key; did you mean hydra.run.dir?")
    assert len(composed) == 1
