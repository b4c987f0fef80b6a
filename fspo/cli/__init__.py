"""The `fspo` command: one entry point, one subcommand per job, and the dispatcher `fspo data` shares.

A command is ``(runner, one line of help)``. The runner is a module name, whose ``main(argv) -> int`` is
imported only when the command runs (so that `fspo verify` does not pay for importing verl and Ray), or a
callable taking ``argv``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import sys
from collections.abc import Callable, Mapping

from fspo.utils.arguments import refuse
from fspo.utils.input_files import InputFileError

Command = tuple[str | Callable[[list[str]], int | None], str]

SUBCOMMANDS: dict[str, Command] = {
    "train": ("fspo.cli.train", "train with verl (Hydra overrides follow; --help, --options)"),
    "quickstart": ("fspo.quickstart.cli", "a short FSPO run on CPU with before/after evaluation"),
    "verify": ("fspo.verifier_tools.verify", "score each reasoning step of JSONL rows {evidence, response}"),
    "verifier": (
        "fspo.verifier_tools.finetune",
        "verifier train: fine-tune a cross-encoder verifier on labelled claims",
    ),
    "data": (
        "fspo.data.registry",
        "build a training or evaluation set as verl parquet; `data check FILE...` checks files",
    ),
    "evaluate": ("fspo.evaluation.cli", "evaluate model directories on prepared benchmarks"),
    "fdpo": ("fspo.cli.fdpo", "F-DPO: build-pairs from sampled responses (step verifier), train them with TRL"),
}


def usage(prog: str, commands: Mapping[str, Command], noun: str = "command") -> str:
    width = max(len(name) for name in commands) + 1
    lines = [f"usage: {prog} <{noun}> [args]" + ("  |  fspo --version" if prog == "fspo" else ""), "", f"{noun}s:"]
    lines += [f"  {name:<{width}} {help_}" for name, (_, help_) in commands.items()]
    return "\n".join(lines)


def dispatch(prog: str, commands: Mapping[str, Command], argv: list[str] | None, noun: str = "command") -> int:
    """Run the command named by ``argv[0]`` with the rest of ``argv``; its exit status.

    No name or ``-h``/``--help`` prints the commands (0); an unknown name prints them on stderr (2).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(prog, commands, noun))
        return 0
    name, rest = argv[0], argv[1:]
    if name not in commands:
        print(f"{prog}: unknown {noun} {name!r}\n\n{usage(prog, commands, noun)}", file=sys.stderr)
        return 2
    runner = commands[name][0]
    run = importlib.import_module(runner).main if isinstance(runner, str) else runner
    # Lazy like the commands: fspo.utils.output_dir is small, but `fspo --help` needs none of it.
    from fspo.utils.output_dir import OutputConflict, release_output_folders

    try:
        return int(run(rest) or 0)
    except (InputFileError, OutputConflict) as error:  # any command's input file or output folder
        return refuse(f"{prog} {name}", error)
    finally:
        release_output_folders()  # the output folders this command claimed: their locks end with it


# The exit status of a command whose reader went away (`fspo verify rows.jsonl --json | head -1`): 128 + SIGPIPE,
# as a shell reports a tool that SIGPIPE ended.
BROKEN_PIPE_STATUS = 141


def main(argv: list[str] | None = None) -> int:
    # A file name that is not UTF-8 reaches Python as text with surrogates: printed escaped, not a crash.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--version"]:
        print(f"fspo {importlib.metadata.version('fspo')}")
        return 0
    try:
        return dispatch("fspo", SUBCOMMANDS, argv)
    except BrokenPipeError:
        # Quietly, as a Unix tool ends: stdout now points at /dev/null so that the interpreter's last flush of
        # what the reader never took does not raise again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE_STATUS


def train(argv: list[str] | None = None) -> int:
    """``fspo-train``: the same as ``fspo train``."""
    return main(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
