"""`fspo data <name> [options]`: build one dataset as verl parquet (`fspo data <name> --help` for options);
`fspo data check FILE...`: report whether parquet files can train (:mod:`fspo.data.check`)."""

from __future__ import annotations

import importlib
import sys

# CLI name -> module (each module is also runnable as `python -m fspo.data.<module>`).
DATASETS = {
    "hotpotqa": "fspo.data.hotpotqa",
    "2wikimultihopqa": "fspo.data.twowiki",
    "simplerl_math": "fspo.data.simplerl_math",
    "gsm8k": "fspo.data.gsm8k",
    "math500": "fspo.data.math500",
    "aime2024": "fspo.data.aime2024",
    "aime2025": "fspo.data.aime2025",
    "truthfulqa": "fspo.data.truthfulqa",
    "halueval": "fspo.data.halueval",
    "halluqa": "fspo.data.halluqa",
    "synthetic": "fspo.data.synthetic",
}


def _usage() -> str:
    return ("usage: fspo data <name> [options]\n       fspo data check FILE... [options]   (what files hold, "
            "whether they can train)\n\ndatasets: " + ", ".join(DATASETS))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name == "check":
        from fspo.data.check import main as check

        return check(rest)
    if name not in DATASETS:
        print(f"fspo data: unknown dataset {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    from fspo.data.io import SourceFieldError, SourceFileError

    try:
        return int(importlib.import_module(DATASETS[name]).main(rest) or 0)
    except (SourceFieldError, SourceFileError, FileNotFoundError) as error:
        # Bad or missing source data: say what to fix, without a traceback.
        print(f"fspo data {name}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
