"""``fspo verify``: show what the verifier says about each reasoning step of your data, before training.

Reads JSONL rows ``{"evidence": ..., "response": ...}`` (evidence may be a string or a list of strings),
cuts each response's ``<think>`` reasoning into steps as training does (`fspo.steps.reasoning_steps`: a
response without closed reasoning has none), scores every step of every row in one batched call at the
backend's calibrated threshold (the one training uses), and prints each step with its score and verdict.

With ``--labelled`` it measures the verifier instead: on rows ``{evidence, claim, label}`` (a JSONL or
parquet file, or the built-in ``halueval`` / ``synthetic`` / ``synthetic-restated`` sources) it prints AUROC, balanced accuracy at
``--threshold``, the threshold that maximises balanced accuracy (the calibrated one), per-class counts
and pairs/s, and can draw a reliability chart.

Example:
    fspo verify rows.jsonl --verifier lexical
    fspo verify --labelled halueval --verifier embedding --chart reliability.png
    fspo verify --labelled my_claims.parquet --verifier nli --model-path ./verifier
    fspo verify rows.jsonl --verifier hhem --device cuda --evidence-top-k 3
    fspo verify rows.jsonl --verifier llm_judge --url http://localhost:8000/v1 --judge-model Qwen/Qwen3-8B
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

from fspo.config.calibrated_thresholds import CALIBRATED_THRESHOLDS, DEFAULT_THRESHOLD, calibrated_threshold
from fspo.config.numeric_options import COUNT, PROBABILITY, SEED, VERIFIER_NUMBERS
from fspo.config.vocabulary import VERIFIER_NAMES
from fspo.evidence import evidence_text
from fspo.launch.preflight import check_verifier, looks_like_hub_id
from fspo.steps import reasoning_span, reasoning_steps
from fspo.utils.arguments import HelpFormatter
from fspo.utils.atomic_file import replacing
from fspo.utils.input_files import InputFileError, jsonl_lines, parse_json, parse_jsonl, read_stdin_text, read_text
from fspo.utils.output_dir import OutputConflict, check_output_paths, output_option
from fspo.utils.record_schemas import verify_row
from fspo.verifier_tools.labelled import SOURCES, SPLITS, load_labelled
from fspo.verifier_tools.quality import summarise

# What a reliability chart may be saved as (matplotlib picks the format from the suffix).
PROG = "fspo verify"
CHART_SUFFIXES = (".png", ".pdf", ".svg")
# Verifier options exposed as flags (``--model-path`` -> ``model_path``), with their help; anything else via
# ``--verifier-option``. Each is the fspo.verifier option of that name (fspo.config.verifier.VerifierConfig), not imported
# here: that would import verl, and `fspo verify` starts in a tenth of a second. Their numbers' ranges are
# fspo.config.numeric_options.VERIFIER_NUMBERS, as the config's.
_FLAG_OPTIONS = {
    "model_path": (str, "model directory or hub id (hhem, nli, embedding; nli needs one)"),
    "tokenizer_path": (str, "tokenizer directory or hub id (default: the model's own)"),
    "device": (str, "auto, cpu, cuda or cuda:N (model backends; default auto)"),
    "dtype": (str, "float32, tf32, bfloat16 or float16 (model backends; default tf32 on CUDA, float32 on a CPU)"),
    "max_tokens_per_batch": (int, "padded tokens per micro-batch of the model (model backends)"),
    "evidence_top_k": (int, "check each step against only its k most relevant evidence sentences"),
    "evidence_unit": (
        str,
        "lexical: whole (the step's words anywhere in the evidence) or sentence (each clause in its best sentence)",
    ),
    "cache_size": (int, "LRU entries (evidence, step) -> score kept; 0 = off"),
    "url": (str, "llm_judge: the OpenAI-compatible server (root, /v1 or the full chat-completions URL)"),
    "model": (str, "llm_judge: the model name sent in each request"),
    "api_key_env": (str, "llm_judge: the environment variable that holds a Bearer key"),
    "max_concurrency": (int, "llm_judge: requests in flight at once"),
    "timeout_s": (float, "llm_judge: seconds per request before it counts as failed"),
    "max_retries": (int, "llm_judge: retries after a timeout, a connection error or HTTP 408/429/5xx"),
}
# Flags not spelled as their option: --model is a model folder in every other command, so the judge's served name
# is --judge-model, as in `fspo evaluate`.
_FLAG_NAMES = {"model": "--judge-model"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fspo verify",
        description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter,
    )
    parser.add_argument("input", nargs="?", help="JSONL file with {evidence, response} rows ('-' reads stdin)")
    parser.add_argument(
        "--labelled",
        metavar="SOURCE",
        help="measure the verifier on labelled claims: halueval, synthetic, synthetic-restated, or a JSONL/parquet file "
        "of {evidence, claim, label} rows (label 1 = supported)",
    )
    parser.add_argument(
        "--split",
        default="heldout",
        choices=SPLITS,
        help="--labelled with a built-in source: which split (default heldout)",
    )
    parser.add_argument("--seed", type=SEED.parse, default=0, help="--labelled: seed of the train/heldout split")
    parser.add_argument(
        "--chart",
        metavar="PNG",
        type=output_option(PROG, "--chart", file=True),
        help="--labelled: write a reliability chart here",
    )
    parser.add_argument(
        "--verifier",
        default="lexical",
        help=f"the backend: {', '.join(VERIFIER_NAMES)} (default: lexical)",
    )
    parser.add_argument(
        "--threshold",
        type=PROBABILITY.parse,
        default=None,
        help="score >= threshold is SUPPORTED (minicheck, factcg: >, as their authors label; default: the backend's calibrated threshold, as training "
        f"uses it: {', '.join(f'{n} {t}' for n, t in CALIBRATED_THRESHOLDS.items())}, else {DEFAULT_THRESHOLD})",
    )
    parser.add_argument("--evidence-key", default="evidence", help="the key of each row's evidence (default evidence)")
    parser.add_argument("--response-key", default="response", help="the key of each row's response (default response)")
    parser.add_argument(
        "--claims-only",
        action="store_true",
        help="skip steps that state nothing (fillers, questions)",
    )
    parser.add_argument("--limit", type=COUNT.parse, default=None, help="read at most this many rows")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per step instead of text",
    )
    for option, (kind, help_) in _FLAG_OPTIONS.items():
        parser.add_argument(
            _FLAG_NAMES.get(option, "--" + option.replace("_", "-")),
            type=VERIFIER_NUMBERS[option].parse if option in VERIFIER_NUMBERS else kind,
            default=None,
            dest=option,
            help=help_,
        )
    parser.add_argument(
        "--verifier-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any other fspo.verifier option (JSON value, e.g. --verifier-option stride=64)",
    )
    return parser


def parse_option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` -> ``(KEY, VALUE)``; VALUE is read as JSON when it parses (numbers, true, null), else kept as text."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"an option must be KEY=VALUE, got {text!r}")
    try:
        return key, parse_json(f"--option {key}", value, None)
    except InputFileError:  # not JSON (or nested too deeply to read): the text itself
        return key, value


def verifier_options(texts: list[str], verifier: str, flag: str = "--verifier-option") -> dict:
    """The ``KEY=VALUE`` options of ``texts`` as a dict; ValueError for one that is not ``KEY=VALUE`` or that
    contradicts the command line: ``name`` other than ``verifier`` (the command would report one verifier and
    score with another), ``threshold`` (the command's ``--threshold`` decides the verdicts)."""
    options = dict(parse_option(text) for text in texts)
    if "name" in options and options["name"] != verifier:
        raise ValueError(
            f"{flag} name={options['name']} contradicts --verifier {verifier}: name the verifier with --verifier only"
        )
    if "threshold" in options:
        raise ValueError(f"{flag} threshold=...: give the threshold with --threshold")
    return options


def read_rows(
    lines: list[str], evidence_key: str, response_key: str, limit: int | None, source: str = "stdin"
) -> list[tuple[str, str]]:
    """(evidence, response) of each JSONL row of ``lines`` (:func:`fspo.utils.input_files.jsonl_lines` of ``source``);
    blank lines are skipped; a row that is not JSON or does not fit :func:`fspo.utils.record_schemas.verify_row` raises
    :class:`InputFileError` naming ``source``, the line and the field."""
    if limit is not None:  # the first ``limit`` rows: blank lines do not count
        filled = [n for n, line in enumerate(lines) if line.strip()]
        lines = lines[: filled[limit - 1] + 1] if len(filled) > limit else lines
    rows = []
    for number, row in enumerate(parse_jsonl(source, lines, verify_row(evidence_key, response_key)), 1):
        # As training reads it: a list of texts joined with blank lines; null, "" or [] is no evidence.
        evidence = evidence_text({evidence_key: row[evidence_key]}, evidence_key)
        if not evidence and row[evidence_key] not in (None, "", []):
            raise ValueError(
                f"{source}, row {number}: {evidence_key!r} is {type(row[evidence_key]).__name__} {row[evidence_key]!r:.60}, "
                "which training cannot read as evidence: give a string or a list of strings"
            )
        rows.append((evidence, row[response_key]))
    if not rows:
        raise ValueError("no rows: give a JSONL file with one {evidence, response} object per line")
    return rows


def response_steps(response: str, claims_only: bool):
    """The steps training verifies: the closed ``<think>`` reasoning's (none without one), as the reward manager cuts them."""
    return reasoning_steps(response, claims_only=claims_only)


def verifier_settings(args) -> dict:
    """The ``fspo.verifier`` block the command line describes: name, threshold, flags, then ``--verifier-option``s."""
    config: dict = {"name": args.verifier, "threshold": args.threshold}
    config.update({k: getattr(args, k) for k in _FLAG_OPTIONS if getattr(args, k) is not None})
    config.update(verifier_options(args.verifier_option, args.verifier))
    return config


def build_checked_verifier(config: dict):
    """The verifier ``config`` describes, once what it loads is found where it should be (as a training run's
    preflight finds it: one line naming the fix, not a hub library's traceback)."""
    # Lazy: the verifier's config and backends import verl (seconds); `fspo verify` checks its arguments first.
    from fspo.config.verifier import verifier_config
    from fspo.verifiers import build_verifier

    settings = verifier_config(config)
    check_verifier(settings)
    return build_verifier(settings)


def verdict(score: float, threshold: float, strict: bool = False) -> str:
    """A step's verdict as training labels it (``strict``: supported only above the threshold)."""
    if math.isnan(score):
        return "UNVERIFIABLE"
    return "SUPPORTED" if (score > threshold if strict else score >= threshold) else "UNSUPPORTED"


def missing_model_path(path: str | None) -> str | None:
    """A --model-path that names a local folder that is not there (an `org/name` hub id is left to the hub)."""
    if path is None or os.path.exists(os.path.expanduser(path)) or looks_like_hub_id(path):
        return None
    return f"--model-path {path} does not exist: give a model folder or an org/name hub id"


def reliability_chart(bins: list[dict], path: str, title: str) -> None:
    """Mean score against the supported rate of each score bin; a calibrated verifier follows the diagonal."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(4.5, 4.5))
    axes.plot([0, 1], [0, 1], color="grey", linestyle=":", label="calibrated")
    axes.plot([b["mean_score"] for b in bins], [b["supported_rate"] for b in bins], marker="o", label="verifier")
    for b in bins:
        axes.annotate(
            str(b["count"]),
            (b["mean_score"], b["supported_rate"]),
            fontsize=7,
            textcoords="offset points",
            xytext=(3, 3),
        )
    axes.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean score of the bin", ylabel="share of supported claims", title=title)
    axes.legend(loc="upper left")
    figure.tight_layout()
    try:
        with replacing(path) as temporary:
            figure.savefig(temporary, dpi=120)
    finally:
        plt.close(figure)


def format_quality(figures: dict) -> list[str]:
    """The lines ``fspo verify --labelled`` prints for one verifier's [`~fspo.verifier_tools.quality.summarise`]."""
    lines = [
        f"{figures['pairs']} pairs: {figures['supported']} supported, {figures['unsupported']} unsupported, "
        f"{figures['unverifiable']} unverifiable (left out)",
        f"AUROC                              {figures['auroc']:.3f}",
        f"balanced accuracy at {figures['threshold']:<13.3g} {figures['balanced_accuracy']:.3f}",
        f"calibrated threshold               {figures['best_threshold']:.3f} "
        f"(balanced accuracy {figures['best_balanced_accuracy']:.3f})",
        f"pairs/s                            {figures['pairs_per_s']:.1f}",
        "reliability (score bin: pairs, mean score, share supported):",
    ]
    lines += [
        f"  [{b['low']:.1f}, {b['high']:.1f}): {b['count']:>6} {b['mean_score']:.3f} {b['supported_rate']:.3f}"
        for b in figures["reliability"]
    ]
    return lines


def run_labelled(args) -> int:
    """``--labelled``: score every labelled pair in one call and print the verifier's quality figures."""
    try:
        config = verifier_settings(args)
        pairs = load_labelled(args.labelled, args.split, args.seed)
        if args.limit is not None:
            pairs = pairs[: args.limit]
        labels = [p.label for p in pairs]
        if len(set(labels)) < 2:
            raise ValueError(
                f"{args.labelled}: need both supported (1) and unsupported (0) rows, got labels {sorted(set(labels))}"
            )
        verifier = build_checked_verifier(config)
    except (OSError, ValueError) as error:
        print(f"fspo verify: {error}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    # Each claim on its own: llm_judge as FAPO's GenRM would read consecutive claims of one evidence as one solution.
    scores = [
        score for scored in verifier.score_responses([(p.evidence, [p.claim]) for p in pairs]) for score in scored
    ]
    seconds = time.perf_counter() - started
    verifier.close()
    judged = {label for score, label in zip(scores, labels) if not math.isnan(score)}
    if judged != {0, 1}:
        print(
            f"fspo verify: the verifier left no {'supported' if 1 not in judged else 'unsupported'} pair scored "
            f"({sum(math.isnan(s) for s in scores)} of {len(scores)} scores are NaN, unverifiable): nothing to "
            "measure; check the verifier's options (an NLI model's window, an llm_judge server that fails)",
            file=sys.stderr,
        )
        return 2
    figures = summarise(scores, labels, args.threshold)
    figures.update(source=args.labelled, verifier=args.verifier, pairs_per_s=len(pairs) / max(seconds, 1e-9))
    if args.json:
        print(json.dumps(figures))
    else:
        print(f"verifier {args.verifier} on {args.labelled}" + (f" ({args.split})" if args.labelled in SOURCES else ""))
        print("\n".join(format_quality(figures)))
    if args.chart:
        folder, name = os.path.split(os.path.abspath(os.path.expanduser(args.chart)))
        try:
            folder = check_output_paths("--chart", folder, [name], PROG)
        except OutputConflict as error:  # the folder changed since the arguments were checked
            print(f"{PROG}: {error}", file=sys.stderr)
            return 2
        reliability_chart(figures["reliability"], str(folder / name), f"{args.verifier} on {args.labelled}")
        print(f"reliability chart -> {args.chart}", file=sys.stderr)
    return 0


def check_arguments(args) -> str | None:
    """What is wrong with the command line, before a row is read or a model loaded (None: nothing).

    Fills in ``args.threshold`` with the backend's calibrated threshold when it was not given.
    """
    if args.verifier not in VERIFIER_NAMES:
        return f"unknown fspo.verifier.name {args.verifier!r}; valid names: {', '.join(VERIFIER_NAMES)}"
    if args.threshold is None:
        args.threshold = calibrated_threshold(args.verifier)
    if not 0.0 <= args.threshold <= 1.0:  # NaN fails too
        return f"--threshold must be in [0, 1] (scores are support probabilities), got {args.threshold}"
    if args.limit is not None and args.limit < 1:
        return f"--limit must be >= 1, got {args.limit}"
    try:
        verifier_options(args.verifier_option, args.verifier)
    except ValueError as error:
        return str(error)
    problem = missing_model_path(args.model_path)
    if problem:
        return problem
    if args.chart is not None:
        if args.labelled is None:
            return "--chart draws the reliability of --labelled SOURCE; give --labelled too"
        folder = os.path.dirname(os.path.abspath(os.path.expanduser(args.chart)))  # made by its claim
        if not os.access(folder, os.W_OK):
            return f"--chart {args.chart}: the folder {folder} is not writable"
        if os.path.splitext(args.chart)[1].lower() not in CHART_SUFFIXES:
            return f"--chart {args.chart}: name the image {' or '.join(CHART_SUFFIXES)}"
        try:
            check_output_paths("--chart", folder, [os.path.basename(args.chart)], PROG, record=False)
        except OutputConflict as error:
            return str(error)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    problem = check_arguments(args)
    if problem:
        print(f"fspo verify: {problem}", file=sys.stderr)
        return 2
    if args.labelled is not None:
        if args.input is not None:
            parser.error("give either an input file of responses or --labelled, not both")
        return run_labelled(args)
    if args.input is None:
        parser.error("give an input file of {evidence, response} rows, or --labelled SOURCE")
    try:
        config = verifier_settings(args)
        if args.input == "-":
            rows = read_rows(jsonl_lines(read_stdin_text()), args.evidence_key, args.response_key, args.limit)
        else:
            lines = jsonl_lines(read_text(args.input, "JSON Lines file"))
            rows = read_rows(lines, args.evidence_key, args.response_key, args.limit, args.input)
        verifier = build_checked_verifier(config)
    except (OSError, ValueError) as error:
        print(f"fspo verify: {error}", file=sys.stderr)
        return 2

    steps = [response_steps(response, args.claims_only) for _, response in rows]
    # Steps of a row without evidence are not verified (training labels them 0): they print as unverifiable.
    responses = [(evidence, [step.text for step in row_steps]) for (evidence, _), row_steps in zip(rows, steps)]
    checked = [response for response in responses if response[0]]
    verified_steps = sum(len(texts) for _, texts in checked)
    verified = iter(verifier.score_responses(checked))
    scores = iter(
        [score for evidence, texts in responses for score in (next(verified) if evidence else [math.nan] * len(texts))]
    )
    counts = {"SUPPORTED": 0, "UNSUPPORTED": 0, "UNVERIFIABLE": 0}
    for number, row_steps in enumerate(steps, 1):
        if not args.json:
            print(
                f"== row {number}: {len(row_steps)} steps"
                + ("" if reasoning_span(rows[number - 1][1]) is not None else " (no closed <think> reasoning)")
            )
        for index, step in enumerate(row_steps, 1):
            score = next(scores)
            label = verdict(score, args.threshold, verifier.strict_threshold)
            counts[label] += 1
            if args.json:
                print(
                    json.dumps(
                        {
                            "row": number,
                            "step": index,
                            "start": step.start,
                            "end": step.end,
                            "text": step.text,
                            "score": None if math.isnan(score) else score,
                            "verdict": label,
                        }
                    )
                )
            else:
                print(f"  [{index:>2}] {score:5.3f} {label:<12} {step.text}")
    summary = ", ".join(f"{n} {k.lower()}" for k, n in counts.items())
    stream = sys.stderr if args.json else sys.stdout
    print(
        f"{len(rows)} rows, {verified_steps} steps: {summary} (verifier {args.verifier}, threshold {args.threshold})",
        file=stream,
    )
    unreasoned = sum(reasoning_span(response) is None for _, response in rows)
    if unreasoned:
        print(
            f"{unreasoned} of {len(rows)} rows have no reasoning to judge (no closed <think>...</think>): "
            "training gives those rollouts no step labels",
            file=stream,
        )
    verifier.close()
    return 0
