"""The `fspo` command: one entry point, one subcommand per job.

Each subcommand lives in its own module exposing ``main(argv: list[str] | None) -> int``;
they are imported lazily so that `fspo verify` does not pay for importing verl and Ray.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = {
    "train": ("fspo.main", "train with verl (Hydra overrides follow)"),
    "quickstart": ("fspo.quickstart", "a short FSPO run on CPU with before/after evaluation"),
    "verify": ("fspo.verifiers.cli", "score each reasoning step of JSONL rows {evidence, response}"),
    "verifier": ("fspo.verifiers.finetune", "verifier train: fine-tune a cross-encoder verifier on labelled claims"),
    "data": ("fspo.data.cli", "build a training or evaluation set as verl parquet; `data check FILE...` checks files"),
    "evaluate": ("fspo.evaluation.cli", "evaluate model directories on prepared benchmarks"),
}


def _usage() -> str:
    lines = ["usage: fspo <command> [args]", "", "commands:"]
    lines += [f"  {name:<11} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        print(f"fspo: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
