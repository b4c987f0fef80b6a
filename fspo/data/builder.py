"""The shared machinery of every preprocessor: source reading, conversion, size/seed, token filter, CLI.

A dataset module describes itself with a `DatasetSpec` (where its data lives and how one source record
becomes an `Example`); `build_rows` and `run_cli` do the rest the same way for every set.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fspo.config.numeric_options import COUNT, SEED
from fspo.data.io import SourceFileError, make_row, read_hub, read_records, source_files, write_parquet
from fspo.training.prompt_formats import PROMPT_FORMATS, build_messages, count_prompt_tokens
from fspo.utils.arguments import HelpFormatter, UsageError, check_count
from fspo.utils.checked_load import load_tokenizer
from fspo.utils.output_dir import check_output_paths, output_option, output_set


@dataclass
class Example:
    """One converted record, before it becomes a verl row.

    Args:
        question: the bare question (kept in ``extra_info["question"]``).
        ground_truth: the gold answer, or a list of accepted aliases.
        evidence: gold supporting paragraphs joined by a blank line, or "".
        prompt_body: the user-message text when it is more than the question (options of a
            multiple-choice item); the context is added by `user_text` when asked for.
        gold_facts: the fact sentence behind each hop (synthetic data).
        incorrect_answers: known wrong answers (TruthfulQA, HaluEval, HalluQA scoring).
    """

    question: str
    ground_truth: str | list[str]
    evidence: str = ""
    prompt_body: str = ""
    gold_facts: list[str] = field(default_factory=list)
    incorrect_answers: list[str] = field(default_factory=list)

    def user_text(self, evidence_in_prompt: bool) -> str:
        body = self.prompt_body or self.question
        if evidence_in_prompt and self.evidence:
            return f"Context:\n{self.evidence}\n\nQuestion: {body}"
        return body


HubLocation = tuple[str, "str | None", str]  # (dataset name, config, split)


@dataclass(frozen=True)
class DatasetSpec:
    """How to build one dataset.

    Args:
        name: the CLI name (`fspo data <name>`).
        description: one line for `--help`.
        ability: verl's ``ability`` column ("math", "factual_qa", ...).
        splits: the output splits built by default.
        hub: split -> where it lives on the Hugging Face hub (None: not on the hub).
        convert: (record, where, args, rng) -> Example, or None to skip the record.
        data_source: args -> the ``data_source`` of the rows (a set can have several forms).
        offline: (split, args) -> files of an installed offline package, or None.
        add_arguments: extra CLI options.
        evidence_in_prompt: whether the context is put in the prompt by default.
    """

    name: str
    description: str
    ability: str
    splits: tuple[str, ...]
    hub: Callable[[str, argparse.Namespace], HubLocation | None]
    convert: Callable[[dict, str, argparse.Namespace, random.Random], Example | None]
    data_source: Callable[[argparse.Namespace], str]
    offline: Callable[[str, argparse.Namespace], list[Path] | None] | None = None
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None
    evidence_in_prompt: bool = False


def build_rows(
    spec: DatasetSpec,
    records: Sequence[tuple[str, dict]],
    split: str,
    args: argparse.Namespace,
    tokenizer=None,
) -> list[dict]:
    """Convert `records` into verl rows: shuffled and cut to ``args.size`` when a size is given.

    Records whose prompt renders to more than ``args.max_prompt_tokens`` tokens (with `tokenizer`)
    are dropped before the cut, so a requested size is met whenever enough short prompts exist.
    """
    order = list(range(len(records)))
    if args.size is not None:
        random.Random(args.seed).shuffle(order)
    rows: list[dict] = []
    for position in order:
        if args.size is not None and len(rows) >= args.size:
            break
        where, record = records[position]
        example = spec.convert(record, where, args, random.Random(f"{args.seed}:{position}"))
        if example is None:
            continue
        messages = build_messages(example.user_text(args.evidence_in_prompt), args.prompt_format)
        too_long = (
            tokenizer is not None
            and args.max_prompt_tokens is not None
            and count_prompt_tokens(messages, args.prompt_format, tokenizer) > args.max_prompt_tokens
        )
        if too_long:
            continue
        rows.append(
            make_row(
                data_source=spec.data_source(args),
                prompt=messages,
                ability=spec.ability,
                ground_truth=example.ground_truth,
                index=len(rows),
                split=split,
                question=example.question,
                evidence=example.evidence,
                gold_facts=example.gold_facts,
                incorrect_answers=example.incorrect_answers,
            )
        )
    return rows


def check_splits_apart(input_path, splits: Sequence[str]) -> None:
    """Refuse ``--input`` that would give two splits one file (a train question held out again as a test one)."""
    seen: dict[Path, str] = {}
    for split in splits:
        for path in source_files(input_path, split):
            if path in seen:
                raise UsageError(
                    f"--input {input_path}: {path.name} would serve both {seen[path]} and {split}; give --split with "
                    "the file of that split, or a folder whose file names say their split (train, dev or test)"
                )
            seen[path] = split


def load_split(spec: DatasetSpec, split: str, args: argparse.Namespace) -> list[tuple[str, dict]]:
    """The source records of `split`: `--input`, else an installed offline package, else the hub."""
    if args.input is not None:
        return read_records(source_files(args.input, split))
    if spec.offline is not None:
        files = spec.offline(split, args)
        if files:
            return read_records(files)
    location = spec.hub(split, args)
    if location is None:
        raise FileNotFoundError(f"{spec.name} has no Hugging Face hub copy of split {split!r}: pass --input")
    return read_hub(*location)


def make_parser(spec: DatasetSpec) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter, prog=f"fspo data {spec.name}", description=spec.description
    )
    parser.add_argument("--input", help="local source file or folder (default: offline package, else the HF hub)")
    parser.add_argument(
        "--output-dir",
        type=output_option(f"fspo data {spec.name}", "--output-dir"),
        default=f"data/{spec.name}",
        help="where <split>.parquet is written",
    )
    parser.add_argument(
        "--split",
        action="append",
        choices=sorted(set(spec.splits) | {"train", "test"}),
        help=f"split(s) to build (default: {', '.join(spec.splits)})",
    )
    parser.add_argument(
        "--prompt-format",
        default="qwen-base",
        choices=PROMPT_FORMATS,
        help="chat format of the prompts (fspo.training.prompt_formats; default qwen-base)",
    )
    parser.add_argument(
        "--size", type=COUNT.parse, default=None, help="rows per split, sampled with --seed (default: all)"
    )
    parser.add_argument("--seed", type=SEED.parse, default=0, help="seed of the --size sample")
    parser.add_argument("--max-prompt-tokens", type=COUNT.parse, default=None, help="drop prompts longer than this")
    parser.add_argument("--tokenizer", help="tokenizer path/name used to count prompt tokens")
    parser.add_argument(
        "--evidence-in-prompt",
        action=argparse.BooleanOptionalAction,
        default=spec.evidence_in_prompt,
        help="put the evidence in the prompt as context",
    )
    if spec.add_arguments is not None:
        spec.add_arguments(parser)
    return parser


def run_cli(spec: DatasetSpec, argv: list[str] | None = None) -> int:
    """Parse `argv`, build each split and write ``<output-dir>/<split>.parquet``."""
    parser = make_parser(spec)
    args = parser.parse_args(argv)
    if args.max_prompt_tokens is not None and not args.tokenizer:
        raise UsageError("--max-prompt-tokens needs --tokenizer (prompts are measured in tokens)")
    check_count("--size", args.size)
    check_count("--max-prompt-tokens", args.max_prompt_tokens)
    splits = args.split or spec.splits
    planned = [f"{split}.parquet" for split in splits]
    check_output_paths("--output-dir", args.output_dir, planned, f"fspo data {spec.name}", record=False)
    try:
        tokenizer = load_tokenizer(args.tokenizer) if args.tokenizer else None
    except Exception as error:  # noqa: BLE001 - transformers raises TypeError, KeyError... on a file it cannot read
        raise UsageError(f"cannot load the tokenizer {args.tokenizer!r}: {error}") from None
    if args.input is not None and len(splits) > 1:
        check_splits_apart(args.input, splits)
    # Every split is built before any is written: a failure leaves the output folder as it was.
    built = {}
    for split in splits:
        records = load_split(spec, split, args)
        rows = build_rows(spec, records, split, args, tokenizer)
        if not rows:
            raise SourceFileError(
                f"{spec.name} {split}: no usable rows in {len(records)} records from "
                f"{args.input or 'the default source'} (empty questions or answers are skipped); check --input"
            )
        built[split] = (rows, len(records))
    folder = check_output_paths("--output-dir", args.output_dir, planned, f"fspo data {spec.name}")
    with output_set(folder, "--output-dir", f"fspo data {spec.name}") as staging:  # the splits move in together
        for split, (rows, _) in built.items():
            write_parquet(rows, staging / f"{split}.parquet")
    for split, (rows, records) in built.items():
        print(f"{spec.name} {split}: {len(rows)} rows (from {records} records) -> {folder / f'{split}.parquet'}")
    return 0
