"""``fspo fdpo``: F-DPO's factuality-aware preference pairs and training.

    fspo evaluate --model base=/models/Qwen2.5-7B-Instruct --data data/hotpotqa/train.parquet \
        --samples 8 --temperature 1.0 --output-dir samples
    fspo fdpo build-pairs samples/<predictions>.jsonl --verifier hhem --pairs pairs.jsonl
    fspo fdpo train --model /models/Qwen2.5-7B-Instruct --pairs pairs.jsonl --output-dir fdpo_model

``build-pairs`` reads ``fspo evaluate``'s predictions (each row's rendered prompt, evidence, sampled responses
and their outcome scores), labels every response factual or hallucinated with a step verifier (every judged
step supported, or not; a response with no judged step stays unlabelled) and writes F-DPO's pairs in the mix of its
authors' code (:mod:`fspo.methods.fdpo.pairs`: a misordered sampled pair is dropped; ``--flip-real-pairs`` flips it,
the paper's rule) and, from each prompt's best factual chosen response, a synthetic hallucinated variant as an
inverted pair, flipped (:mod:`fspo.methods.fdpo.variants`; ``--variants``). ``train`` trains them with TRL's DPOTrainer and F-DPO's margin
(:mod:`fspo.methods.fdpo.trainer`; the ``fdpo`` extra) and saves a Hugging Face model that ``fspo evaluate`` takes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
from pathlib import Path

from fspo.config.calibrated_thresholds import calibrated_threshold
from fspo.config.numeric_options import COUNT, EPOCHS, LOSS_TERM, POSITIVE_LOSS_TERM, PROBABILITY, SEED
from fspo.config.vocabulary import VERIFIER_NAMES
from fspo.methods.fdpo.loss import FDPO_BETA, FDPO_LAMBDA, FDPO_LAMBDA_SWEEP
from fspo.methods.fdpo.pairs import (
    AUTHORS_MIX,
    FLIP_REAL_PAIRS_MIX,
    Sample,
    candidate_pairs,
    hallucination_label,
    misordered,
    pair_row,
    preference_pairs,
    variant_pair,
    variant_sources,
)
from fspo.methods.fdpo.variants import llm_corruption, swap_corruption
from fspo.steps import reasoning_steps
from fspo.token_labels import verdicts_from_scores
from fspo.utils.arguments import (
    HelpFormatter,
    UsageError,
    check_count,
    check_model_dir,
    check_positive_number,
    refuse,
)
from fspo.utils.atomic_file import write_text_atomically
from fspo.utils.checked_load import check_model_files
from fspo.utils.input_files import read_jsonl
from fspo.utils.output_dir import check_output_paths, output_option
from fspo.utils.record_schemas import Prediction
from fspo.verifier_tools.verify import verifier_options


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter, prog="fspo fdpo", description=__doc__.split("\n\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser(
        "build-pairs",
        formatter_class=HelpFormatter,
        help="F-DPO pairs from `fspo evaluate` predictions (sampled responses)",
    )
    build.add_argument("predictions", nargs="+", help="predictions JSONL written by `fspo evaluate` (--samples >= 2)")
    build.add_argument(
        "--pairs",
        required=True,
        type=output_option("fspo fdpo build-pairs", "--pairs", file=True),
        help="the pairs JSONL to write (what `fspo fdpo train --pairs` reads)",
    )
    build.add_argument("--verifier", default="hhem", choices=VERIFIER_NAMES, help="step verifier (default hhem)")
    build.add_argument(
        "--verifier-option", action="append", default=[], help="a verifier option as in fspo.verifier.* (repeatable)"
    )
    build.add_argument(
        "--threshold", type=PROBABILITY.parse, default=None, help="support threshold (default: the backend's)"
    )
    build.add_argument(
        "--max-pairs-per-prompt",
        type=COUNT.parse,
        default=4,
        help="sampled pairs kept per prompt (default 4), by default the larger score gap first",
    )
    build.add_argument(
        "--flip-real-pairs",
        action="store_true",
        help="the paper's rule: flip every sampled pair whose chosen response is hallucinated and rejected one "
        "factual, and keep pairs with a factuality margin first (this command's pairs before the authors' mix). "
        "Default: the mix of F-DPO's code, which drops such pairs and flips only the synthetic inversions",
    )
    build.add_argument(
        "--variants",
        choices=("swap", "llm", "none"),
        default="swap",
        help="F-DPO's synthetic hallucinated variants of factual responses, as inverted pairs: swap = an entity of "
        "2-3 steps swapped for another of the evidence (offline; default), llm = the authors' rewrite by a chat model "
        "(--variant-url), none = off",
    )
    build.add_argument(
        "--variants-per-prompt", type=COUNT.parse, default=1, help="variants made per prompt (default 1)"
    )
    build.add_argument("--variant-url", help="--variants llm: an OpenAI-compatible server (root, /v1 or full URL)")
    build.add_argument(
        "--variant-model", default="default", help="--variants llm: the model name sent (default: the name 'default')"
    )
    build.add_argument("--variant-api-key-env", help="--variants llm: environment variable holding the API key")
    build.add_argument("--seed", type=SEED.parse, default=0, help="seed of the swap corruption (default 0)")
    fit = commands.add_parser(
        "train", formatter_class=HelpFormatter, help="train pairs with TRL's DPOTrainer and F-DPO's margin"
    )
    fit.add_argument("--model", required=True, help="the Hugging Face model folder to start from")
    fit.add_argument("--pairs", required=True, help="pairs JSONL from `fspo fdpo build-pairs`")
    fit.add_argument(
        "--output-dir",
        required=True,
        type=output_option("fspo fdpo train", "--output-dir"),
        help="folder for the trained Hugging Face model",
    )
    fit.add_argument(
        "--beta",
        type=POSITIVE_LOSS_TERM.parse,
        default=FDPO_BETA,
        help=f"DPO's beta (default {FDPO_BETA}, F-DPO's config)",
    )
    fit.add_argument(
        "--lambda",
        dest="factuality_lambda",
        type=LOSS_TERM.parse,
        default=FDPO_LAMBDA,
        help=f"F-DPO's factuality margin lambda, inside beta (default {FDPO_LAMBDA:g}; its authors sweep "
        f"{', '.join(map(str, FDPO_LAMBDA_SWEEP))}; 0 = plain DPO)",
    )
    fit.add_argument(
        "--learning-rate", type=POSITIVE_LOSS_TERM.parse, default=5e-7, help="learning rate (default 5e-7)"
    )
    fit.add_argument("--epochs", type=EPOCHS.parse, default=1.0, help="epochs over the pairs (default 1)")
    fit.add_argument("--batch-size", type=COUNT.parse, default=8, help="pairs per device step (default 8)")
    fit.add_argument(
        "--max-length", type=COUNT.parse, default=2048, help="prompt + response tokens kept (default 2048)"
    )
    fit.add_argument("--seed", type=SEED.parse, default=0, help="seed of the data order and initialisation (default 0)")
    return parser


def train_settings(args) -> dict:
    """``fspo fdpo train``'s parsed options as :func:`fspo.methods.fdpo.trainer.build_trainer`'s settings."""
    return {
        "beta": args.beta,
        "factuality_lambda": args.factuality_lambda,
        "learning_rate": args.learning_rate,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "seed": args.seed,
    }


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


def judged_steps(verifier, threshold: float, items: list[tuple[str, list[list[str]]]]) -> list[list[list[int]]]:
    """Step verdicts of each item's responses, ``items`` = (evidence, each response's step texts); every step of
    every response in one verifier call, so model backends batch them. No evidence, no verdicts."""
    responses = [(evidence, steps) for evidence, item_responses in items if evidence for steps in item_responses]
    scored = iter(verifier.score_responses(responses))
    return [
        [
            verdicts_from_scores([float(x) for x in next(scored)], threshold, verifier.strict_threshold)
            if evidence
            else []
            for _ in item_responses
        ]
        for evidence, item_responses in items
    ]


def step_texts(text: str) -> list[str]:
    return [step.text for step in reasoning_steps(text)]


def corruptor(args):
    """``--variants``' corruption as ``(question, response, evidence) -> corrupted text | None``; None for none."""
    if args.variants == "none":
        return None
    rng = random.Random(args.seed)
    if args.variants == "swap":
        return lambda question, response, evidence: swap_corruption(response, evidence, rng) if evidence else None
    from fspo.utils.chat_client import ChatClient  # the llm rewrite, as F-DPO's authors do it

    try:
        client = ChatClient(
            args.variant_url,
            args.variant_model,
            args.variant_api_key_env,
            timeout_s=120.0,
            max_tokens=2048,
            temperature=0.8,  # the authors' (utils/synthetic_utils.py)
            log_name="fdpo variants",
            timeout_setting="the server's speed",
        )
    except ValueError as error:
        raise UsageError(f"--variant-api-key-env: {error}") from None
    return lambda question, response, evidence: llm_corruption(client, question, response)


def read_predictions(paths: list[str]) -> list[tuple[str, dict]]:
    """``(where, record)`` of each predictions file's records. This command consumes them: a cut-short last line is
    refused like any bad line (only `fspo evaluate`, resuming its own file, drops one)."""
    records = []
    for path in paths:
        if not Path(path).is_file():
            raise UsageError(f"{path} does not exist: give the predictions JSONL of `fspo evaluate`")
        records += [(f"{path} row {record.get('index')}", record) for record in read_jsonl(path, schema=Prediction)]
    return records


def build_pairs(args, records: list[tuple[str, dict]], verifier, threshold: float) -> int:
    items = [
        (record.get("evidence") or "", [step_texts(text) for text in record.get("responses") or []])
        for _, record in records
    ]
    verdicts = judged_steps(verifier, threshold, items)
    corrupt = corruptor(args)
    mix = FLIP_REAL_PAIRS_MIX if args.flip_real_pairs else AUTHORS_MIX
    lines, variants = [], []
    names = ("pairs", "flipped", "margin", "prompts", "hallucinated", "unlabelled", "responses", "misordered")
    counts = dict.fromkeys(names, 0)

    def add(prompt: str, pair, source: str) -> None:
        lines.append(json.dumps(pair_row(prompt, pair, source), ensure_ascii=False) + "\n")
        counts["pairs"] += 1
        counts["flipped"] += pair.flipped
        counts["margin"] += pair.margin_weight

    for (where, record), verdicts_of in zip(records, verdicts):
        samples = record_samples(record, verdicts_of, where)
        counts["responses"] += len(samples)
        counts["hallucinated"] += sum(s.hallucinated == 1 for s in samples)
        counts["unlabelled"] += sum(s.hallucinated is None for s in samples)
        counts["misordered"] += sum(misordered(a, b) for _, _, a, b in candidate_pairs(samples))
        chosen = preference_pairs(samples, args.max_pairs_per_prompt, mix)
        for pair in chosen:
            add(record["prompt"], pair, "sampled")
        made = len(chosen)
        if corrupt is not None:
            question = record.get("question") or record["prompt"]
            for factual in variant_sources(samples, args.variants_per_prompt, mix):
                corrupted = corrupt(question, factual.text, record.get("evidence") or "")
                if corrupted is not None:
                    variants.append((record.get("evidence") or "", corrupted))
                    add(record["prompt"], variant_pair(factual, corrupted), "synthetic_inversion")
                    made += 1
        counts["prompts"] += made > 0
    # How many variants the step verifier, this project's hallucination label, also finds hallucinated.
    flagged = sum(
        hallucination_label(row[0]) == 1
        for row in judged_steps(verifier, threshold, [(e, [step_texts(text)]) for e, text in variants])
    )
    if not lines:
        raise UsageError(
            "no pairs: every prompt's samples tie in score and factuality; sample more responses per prompt "
            "(fspo evaluate --samples 8 --temperature 1.0)"
        )
    folder, name = pairs_file(args.pairs)
    write_text_atomically(check_output_paths("--pairs", folder, [name], "fspo fdpo build-pairs") / name, "".join(lines))
    print(
        f"fspo fdpo: {counts['pairs']} pairs from {counts['prompts']} prompts -> {args.pairs}; "
        f"{counts['hallucinated']}/{counts['responses']} responses hallucinated ({counts['unlabelled']} with no judged "
        f"step: paired by score only), {counts['misordered']} sampled pairs misordered (hallucinated over factual, "
        f"{'flipped' if args.flip_real_pairs else 'dropped'}), {counts['flipped']} pairs flipped, {counts['margin']} "
        f"with a factuality margin; {len(variants)} synthetic hallucinated variants ({args.variants}), {flagged} of "
        "them hallucinated by the verifier too"
    )
    return 0


# What a trained model's folder gets (checked before training; the files really saved are checked again as they
# move in).
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def pairs_file(out: str) -> tuple[str, str]:
    """``--pairs`` of build-pairs as (its folder, its name): the folder is the output folder fspo.utils.output_dir's rule
    holds for (a user's file of that name is refused, never replaced)."""
    folder, name = os.path.split(os.path.abspath(os.path.expanduser(out)))
    if not name:
        raise UsageError(f"--pairs {out}: name the pairs file (e.g. pairs.jsonl), not a folder")
    return folder, name


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    prog = f"fspo fdpo {args.command}"
    try:
        if args.command == "build-pairs":
            check_count("--max-pairs-per-prompt", args.max_pairs_per_prompt)
            check_count("--variants-per-prompt", args.variants_per_prompt)
            if args.variants == "llm" and not args.variant_url:
                raise UsageError("--variants llm needs --variant-url (an OpenAI-compatible server)")
            folder, name = pairs_file(args.pairs)
            check_output_paths("--pairs", folder, [name], prog, record=False)  # before minutes of scoring
            records = read_predictions(args.predictions)  # before the verifier loads (seconds)
            threshold = calibrated_threshold(args.verifier) if args.threshold is None else args.threshold
            # Lazy: the verifier's config and backends import verl (seconds), after the arguments are checked.
            from fspo.config.verifier import verifier_config
            from fspo.verifiers import build_verifier

            try:
                options = verifier_options(args.verifier_option, args.verifier, "--verifier-option")
                verifier = build_verifier(verifier_config({"name": args.verifier, **options}))
            except ValueError as error:
                raise UsageError(str(error)) from None
            return build_pairs(args, records, verifier, threshold)
        check_model_dir("--model", args.model)
        check_output_paths("--output-dir", args.output_dir, MODEL_FILES, prog, record=False)  # before the model loads
        for flag, value in (("--beta", args.beta), ("--learning-rate", args.learning_rate), ("--epochs", args.epochs)):
            check_positive_number(flag, value)
        if not (args.factuality_lambda >= 0 and math.isfinite(args.factuality_lambda)):
            raise UsageError(f"--lambda must be a finite number >= 0, got {args.factuality_lambda}")
        check_count("--batch-size", args.batch_size)
        check_count("--max-length", args.max_length)
        try:  # the weights files and the position table, before TRL and the model load (seconds)
            check_model_files(args.model, args.max_length, f"--max-length {args.max_length}")
        except ValueError as error:
            raise UsageError(f"--model {error}") from None
        try:
            # Lazy: TRL (the `fdpo` extra) and its model stack load only to train.
            from fspo.methods.fdpo.trainer import read_pairs, train
        except ImportError as error:
            raise UsageError(f"{error}; install the fdpo extra: pip install 'fspo[fdpo]'") from None
        try:
            pairs = read_pairs(args.pairs)
        except (OSError, ValueError) as error:
            raise UsageError(str(error)) from None
        out = train(args.model, pairs, args.output_dir, **train_settings(args))
        print(f"fspo fdpo: trained {len(pairs)} pairs -> {out} (a Hugging Face model: fspo evaluate --model {out})")
        return 0
    except UsageError as error:
        return refuse(prog, error)
