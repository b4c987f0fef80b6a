"""``fspo data check FILE…``: what a parquet file holds and whether it can train, before a long job.

For each file: its rows; each ``data_source`` with the scorer it gets (fspo's, verl's, none); the rows
with evidence and its length; the ground-truth types; with ``--tokenizer`` the evidence and prompt lengths
in tokens. The checks are the trainer's own (:mod:`fspo.training.data_checks`): a file that cannot train is
named with why, and the command exits 1. A bad option exits 2 before any file is read.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from fspo.config.numeric_options import COUNT
from fspo.training.data_checks import FileReport, scan_file
from fspo.training.prompt_formats import check_prompt_format
from fspo.utils.arguments import HelpFormatter, refuse
from fspo.utils.checked_load import load_tokenizer


def _summary(values: list[int]) -> str:
    if not values:
        return "-"
    return f"min {min(values)} / median {int(statistics.median(values))} / max {max(values)}"


def _scorer_label(scorer: str | None) -> str:
    """``fspo:hotpotqa`` -> ``fspo's hotpotqa``; ``verl`` -> ``verl's``; None -> ``NONE``."""
    if scorer is None:
        return "NONE"
    return f"fspo's {scorer.split(':', 1)[1]}" if scorer.startswith("fspo:") else "verl's"


def format_report(report: FileReport) -> str:
    """The report as the lines ``fspo data check`` prints."""
    verdict = "can train" if report.can_train else "CANNOT TRAIN"
    lines = [f"{report.path}: {report.rows} rows, {verdict}"]
    for source, count in sorted(report.sources.items(), key=lambda item: -item[1]):
        lines.append(f"  data_source {source!r}: {count} rows, scorer {_scorer_label(report.scorers.get(source))}")
    where = []
    if report.evidence_in_extra_info:
        where.append(f"{report.evidence_in_extra_info} in extra_info")
    if report.evidence_in_column:
        where.append(f"{report.evidence_in_column} in the column")
    lines.append(
        f"  evidence ('{report.evidence_key}'): {report.evidence_rows}/{report.rows} rows"
        + (f" ({', '.join(where)})" if where else "")
        + (f"; chars {_summary(report.evidence_chars)}" if report.evidence_chars else "")
    )
    if report.evidence_tokens:
        lines.append(f"  evidence tokens: {_summary(report.evidence_tokens)}")
    if report.prompt_tokens is not None:
        lines.append(
            f"  prompt tokens: {_summary(report.prompt_tokens)}"
            + (f"; {report.prompts_over_limit} over the limit" if report.prompts_over_limit else "")
        )
    if report.ground_truth_types:
        lines.append(
            "  ground truth: " + ", ".join(f"{name} {count}" for name, count in report.ground_truth_types.most_common())
        )
    lines += [f"  problem: {problem}" for problem in report.problems]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter,
        prog="fspo data check",
        description="Report what parquet files hold and whether they can train (exit 1 when one cannot).",
    )
    parser.add_argument("files", nargs="+", help="parquet files in verl's RL format")
    parser.add_argument(
        "--evidence-key",
        default="evidence",
        help="extra_info key or column holding the evidence, as fspo.evidence_key (released files: knowledge)",
    )
    parser.add_argument(
        "--require-evidence", action="store_true", help="every row must have evidence (fspo.require_evidence)"
    )
    parser.add_argument("--tokenizer", default=None, help="tokenizer (model directory or hub id) to count tokens with")
    parser.add_argument(
        "--prompt-format",
        default=None,
        help="render prompts with this fspo.training.prompt_formats format (default: the tokenizer's own)",
    )
    parser.add_argument(
        "--max-prompt-length", type=COUNT.parse, default=None, help="count prompts longer than this (tokens)"
    )
    return parser


def check_arguments(args) -> str | None:
    """What is wrong with the command line before any file is read (None: nothing)."""
    if args.tokenizer is None:
        counted = [
            flag
            for flag, value in (
                ("--max-prompt-length", args.max_prompt_length),
                ("--prompt-format", args.prompt_format),
            )
            if value is not None
        ]
        if counted:
            return f"{' and '.join(counted)} count prompt tokens: give --tokenizer (the model's tokenizer) too"
    if args.max_prompt_length is not None and args.max_prompt_length < 1:
        return f"--max-prompt-length must be >= 1 (tokens, as data.max_prompt_length), got {args.max_prompt_length}"
    if not args.evidence_key.strip():
        return "--evidence-key is empty: name the extra_info key or column holding the evidence"
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = check_arguments(args)
    if problem:
        print(f"fspo data check: {problem}", file=sys.stderr)
        return 2
    tokenizer = None
    if args.prompt_format is not None:
        try:
            check_prompt_format(args.prompt_format)
        except ValueError as error:
            print(f"fspo data check: {error}", file=sys.stderr)
            return 2
    if args.tokenizer:
        try:
            tokenizer = load_tokenizer(args.tokenizer)
        except Exception as error:  # noqa: BLE001 - any load failure: say which and why
            return refuse("fspo data check", f"cannot load the tokenizer {args.tokenizer!r}: {error}")
        if args.prompt_format is None and not tokenizer.chat_template:
            print(
                f"fspo data check: the tokenizer {args.tokenizer!r} has no chat template; pass --prompt-format "
                "(the one training uses, e.g. passthrough for the released FSPO files)",
                file=sys.stderr,
            )
            return 2
    failed = 0
    for path in args.files:
        report = scan_file(
            path,
            args.evidence_key,
            require_evidence=args.require_evidence,
            tokenizer=tokenizer,
            prompt_format=args.prompt_format,
            max_prompt_length=args.max_prompt_length,
        )
        print(format_report(report))
        failed += not report.can_train
    if failed:
        print(
            f"fspo data check: {failed} of {len(args.files)} file(s) cannot train (see 'problem:' above)",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
