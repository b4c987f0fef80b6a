"""The `fspo` command: one entry point, one subcommand per job (run by :func:`fspo.utils.subcommands.dispatch`)."""

from __future__ import annotations

import os
import sys

from fspo.utils.subcommands import Command, dispatch

SUBCOMMANDS: dict[str, Command] = {
    "train": ("fspo.cli.train", "train with verl (Hydra overrides follow; --help, --options)"),
    "quickstart": ("fspo.quickstart.cli", "a short FSPO run on CPU with before/after evaluation"),
    "verify": ("fspo.verifier_tools.verify", "score each reasoning step of JSONL rows {evidence, response}"),
    "verifier": (
        "fspo.verifier_tools.finetune",
        "train: fine-tune a cross-encoder verifier on labelled claims; download: a verifier's weights",
    ),
    "data": (
        "fspo.data.registry",
        "build a training or evaluation set as verl parquet; `data check FILE...` checks files",
    ),
    "evaluate": ("fspo.evaluation.cli", "evaluate model directories on prepared benchmarks"),
    "fdpo": ("fspo.cli.fdpo", "F-DPO: build-pairs from sampled responses (step verifier), train them with TRL"),
}


# The exit status of a command whose reader went away (`fspo verify rows.jsonl --json | head -1`): 128 + SIGPIPE,
# as a shell reports a tool that SIGPIPE ended.
BROKEN_PIPE_STATUS = 141


def main(argv: list[str] | None = None) -> int:
    # A file name that is not UTF-8 reaches Python as text with surrogates: printed escaped, not a crash.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    argv = list(sys.argv[1:] if argv is None else argv)
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
