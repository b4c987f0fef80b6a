"""The one dispatcher behind `fspo <command>` and `fspo data <dataset>`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fspo.cli import SUBCOMMANDS
from fspo.cli import main as fspo_main
from fspo.data.registry import COMMANDS, DATASETS
from fspo.data.registry import main as data_main
from fspo.utils.subcommands import dispatch


def test_help_lists_every_command(capsys):
    assert fspo_main(["--help"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("usage: fspo <command> [args]")
    for name, (_, help_) in SUBCOMMANDS.items():
        assert f"  {name} " in printed and help_ in printed


def test_an_unknown_command_is_named_with_the_list_on_stderr(capsys):
    assert fspo_main(["trian"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("fspo: unknown command 'trian'") and "quickstart" in captured.err


def test_a_callable_runner_gets_the_rest_of_argv():
    seen = []
    commands = {"echo": (lambda argv: seen.append(argv) or 3, "echo"), "none": (lambda argv: None, "none")}
    assert dispatch("prog", commands, ["echo", "a", "--b"]) == 3 and seen == [["a", "--b"]]
    assert dispatch("prog", commands, ["none"]) == 0


def test_data_help_lists_every_registered_set(capsys):
    assert fspo_main(["data", "--help"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("usage: fspo data <dataset> [args]")
    for name in [*DATASETS, "synthetic", "check"]:
        assert f"  {name} " in printed
    assert set(COMMANDS) == {*DATASETS, "synthetic", "check"}


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_each_dataset_answers_help_under_its_own_name(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        data_main([name, "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: fspo data {name} ")


def test_python_dash_m_fspo_data_is_the_same_command(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "fspo.data",
            "synthetic",
            "--size",
            "2",
            "--test-size",
            "0",
            "--output-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "train.parquet").exists()
    unknown = subprocess.run([sys.executable, "-m", "fspo.data", "squad"], capture_output=True, text=True, timeout=120)
    assert unknown.returncode == 2 and "fspo data: unknown dataset 'squad'" in unknown.stderr
