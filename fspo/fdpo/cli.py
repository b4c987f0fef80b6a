"""``fspo fdpo``: F-DPO's factuality-aware preference pairs and training.

    fspo evaluate --model base=/models/Qwen2.5-7B-Instruct --data data/hotpotqa/train.parquet \
        --samples 8 --temperature 1.0 --output-dir samples
    fspo fdpo build-pairs samples/<predictions>.jsonl --verifier hhem --out pairs.jsonl
    fspo fdpo train --model /models/Qwen2.5-7B-Instruct --pairs pairs.jsonl --out fdpo_model

``build-pairs`` reads ``fspo evaluate``'s predictions (each row's rendered prompt, evidence, sampled responses
and their outcome scores), labels every response factual or hallucinated with a step verifier (every judged
step supported, or not; a response with no judged step stays unlabelled) and writes F-DPO's flipped pairs
(:mod:`fspo.fdpo.pairs`). ``train`` trains them with TRL's DPOTrainer and F-DPO's margin
(:mod:`fspo.fdpo.trainer`; the ``fdpo`` extra) and saves a Hugging Face model that ``fspo evaluate`` takes.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from fspo.atomic_file import write_text_atomically
from fspo.cli.arguments import (
    UsageError,
    check_count,
    check_model_dir,
    check_positive_number,
    refuse,
)
from fspo.config.vocabulary import VERIFIER_NAMES
from fspo.evaluation.records import read_records
from fspo.fdpo.pairs import Sample, hallucination_label, pair_row, preference_pairs
from fspo.output_dir import check_output_paths, output_option
from fspo.steps import reasoning_steps
from fspo.token_labels import verdicts_from_scores
from fspo.verifier_tools.quality import calibrated_threshold
from fspo.verifier_tools.verify import verifier_options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fspo fdpo", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build-pairs", help="F-DPO pairs from `fspo evaluate` predictions (sampled responses)")
    build.add_argument("predictions", nargs="+", help="predictions JSONL written by `fspo evaluate` (--samples >= 2)")
    build.add_argument(
        "--out",
        required=True,
        type=output_option("fspo fdpo build-pairs", "--out", file=True),
        help="the pairs JSONL to write",
    )
    build.add_argument("--verifier", default="hhem", choices=VERIFIER_NAMES, help="step verifier (default hhem)")
    build.add_argument(
        "--verifier-option", action="append", default=[], help="a verifier option as in fspo.verifier.* (repeatable)"
    )
    build.add_argument("--threshold", type=float, default=None, help="support threshold (default: the backend's)")
    build.add_argument("--max-pairs-per-prompt", type=int, default=4, help="pairs kept per prompt (default 4)")
    fit = commands.add_parser("train", help="train pairs with TRL's DPOTrainer and F-DPO's margin")
    fit.add_argument("--model", required=True, help="the Hugging Face model folder to start from")
    fit.add_argument("--pairs", required=True, help="pairs JSONL from `fspo fdpo build-pairs`")
    fit.add_argument(
        "--out",
        required=True,
        type=output_option("fspo fdpo train", "--out"),
        help="folder for the trained Hugging Face model",
    )
    fit.add_argument("--beta", type=float, default=0.1, help="DPO's beta (default 0.1)")
    fit.add_argument("--margin", type=float, default=1.0, help="F-DPO's margin m (default 1.0; 0 = plain DPO)")
    fit.add_argument("--lr", type=float, default=5e-7, help="learning rate (default 5e-7)")
    fit.add_argument("--epochs", type=float, default=1.0, help="epochs over the pairs (default 1)")
    fit.add_argument("--batch-size", type=int, default=8, help="pairs per device step (default 8)")
    fit.add_argument("--max-length", type=int, default=2048, help="prompt + response tokens kept (default 2048)")
    fit.add_argument("--seed", type=int, default=0, help="seed of the data order and initialisation (default 0)")
    return parser


def record_samples(record: dict, verdicts_of: list[list[int]], where: str) -> list[Sample]:
    """One predictions record's sampled responses as :class:`Sample` (score and hallucination label)."""
    responses, scores = record.get("responses"), record.get("sample_scores")
    if (
        not isinstance(record.get("prompt"), str)
        or not isinstance(responses, list)
        or not isinstance(scores, list)
        or len(responses) != len(scores)
    ):
        raise UsageError(
            f"{where} has no prompt, or no responses with sample_scores: give predictions written by `fspo evaluate`"
        )
    return [
        Sample(text=text, score=float(score), hallucinated=hallucination_label(verdicts))
        for text, score, verdicts in zip(responses, scores, verdicts_of)
    ]


def build_pairs(args, verifier, threshold: float) -> int:
    records = []
    for path in args.predictions:
        if not Path(path).is_file():
            raise UsageError(f"{path} does not exist: give the predictions JSONL of `fspo evaluate`")
        records += [(f"{path} row {record.get('index')}", record) for record in read_records(path)]
    # Every step of every response in one verifier call, so model backends batch them.
    steps = [
        [[s.text for s in reasoning_steps(text)] for text in record.get("responses") or []] for _, record in records
    ]
    pairs = [
        (record.get("evidence") or "", step)
        for (_, record), row in zip(records, steps)
        for resp in row
        for step in resp
    ]
    scores = [float(score) for score in verifier.score(pairs)] if pairs else []
    verdicts = verdicts_from_scores(scores, threshold, verifier.strict_threshold) if scores else []
    lines, position, counts = (
        [],
        0,
        {"pairs": 0, "flipped": 0, "margin": 0, "prompts": 0, "hallucinated": 0, "unlabelled": 0, "responses": 0},
    )
    for (where, record), row in zip(records, steps):
        verdicts_of = []
        for response_steps in row:
            verdicts_of.append(verdicts[position : position + len(response_steps)] if record.get("evidence") else [])
            position += len(response_steps)
        samples = record_samples(record, verdicts_of, where)
        counts["responses"] += len(samples)
        counts["hallucinated"] += sum(s.hallucinated == 1 for s in samples)
        counts["unlabelled"] += sum(s.hallucinated is None for s in samples)
        chosen = preference_pairs(samples, args.max_pairs_per_prompt)
        counts["prompts"] += bool(chosen)
        for pair in chosen:
            lines.append(json.dumps(pair_row(record["prompt"], pair), ensure_ascii=False) + "\n")
            counts["pairs"] += 1
            counts["flipped"] += pair.flipped
            counts["margin"] += pair.margin_weight
    if not lines:
        raise UsageError(
            "no pairs: every prompt's samples tie in score and factuality; sample more responses per prompt "
            "(fspo evaluate --samples 8 --temperature 1.0)"
        )
    folder, name = pairs_file(args.out)
    write_text_atomically(check_output_paths("--out", folder, [name], "fspo fdpo build-pairs") / name, "".join(lines))
    print(
        f"fspo fdpo: {counts['pairs']} pairs from {counts['prompts']} prompts -> {args.out}; "
        f"{counts['hallucinated']}/{counts['responses']} responses hallucinated ({counts['unlabelled']} with no judged "
        f"step: paired by score only), {counts['flipped']} pairs flipped, "
        f"{counts['margin']} with a factuality margin"
    )
    return 0


# What a trained model's folder gets (checked before training; the files really saved are checked again as they
# move in).
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def pairs_file(out: str) -> tuple[str, str]:
    """``--out`` of build-pairs as (its folder, its name): the folder is the output folder fspo.output_dir's rule
    holds for (a user's file of that name is refused, never replaced)."""
    folder, name = os.path.split(os.path.abspath(os.path.expanduser(out)))
    if not name:
        raise UsageError(f"--out {out}: name the pairs file (e.g. pairs.jsonl), not a folder")
    return folder, name


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prog = f"fspo fdpo {args.command}"
    try:
        if args.command == "build-pairs":
            check_count("--max-pairs-per-prompt", args.max_pairs_per_prompt)
            folder, name = pairs_file(args.out)
            check_output_paths("--out", folder, [name], prog, record=False)  # before minutes of scoring
            threshold = calibrated_threshold(args.verifier) if args.threshold is None else args.threshold
            # Lazy: the verifier's config and backends import verl (seconds), after the arguments are checked.
            from fspo.config.verifier import verifier_config
            from fspo.verifiers import build_verifier

            try:
                options = verifier_options(args.verifier_option, args.verifier, "--verifier-option")
                verifier = build_verifier(verifier_config({"name": args.verifier, **options}))
            except ValueError as error:
                raise UsageError(str(error)) from None
            return build_pairs(args, verifier, threshold)
        check_model_dir("--model", args.model)
        check_output_paths("--out", args.out, MODEL_FILES, prog, record=False)  # before the model loads
        for flag, value in (("--beta", args.beta), ("--lr", args.lr), ("--epochs", args.epochs)):
            check_positive_number(flag, value)
        if not args.margin >= 0:
            raise UsageError(f"--margin must be >= 0, got {args.margin}")
        check_count("--batch-size", args.batch_size)
        check_count("--max-length", args.max_length)
        try:
            # Lazy: TRL (the `fdpo` extra) and its model stack load only to train.
            from fspo.fdpo.trainer import read_pairs, train
        except ImportError as error:
            raise UsageError(f"{error}; install the fdpo extra: pip install 'fspo[fdpo]'") from None
        try:
            pairs = read_pairs(args.pairs)
        except (OSError, ValueError) as error:
            raise UsageError(str(error)) from None
        out = train(
            args.model,
            pairs,
            args.out,
            beta=args.beta,
            margin=args.margin,
            learning_rate=args.lr,
            epochs=args.epochs,
            batch_size=args.batch_size,
            max_length=args.max_length,
            seed=args.seed,
        )
        print(f"fspo fdpo: trained {len(pairs)} pairs -> {out} (a Hugging Face model: fspo evaluate --model {out})")
        return 0
    except UsageError as error:
        return refuse(prog, error)
