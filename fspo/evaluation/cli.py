r"""`fspo evaluate`: evaluate model directories on prepared benchmark parquet files.

    fspo evaluate --model fspo=runs/fspo/merged --model base=/models/Qwen2.5-7B \
        --data data/gsm8k/test.parquet --data data/aime2025/test.parquet --output-dir eval_out \
        --temperature 0.6 --top-p 0.95 --top-k 20 --max-new-tokens 2048 --samples 1

Each ``--model``/``--data`` is ``PATH`` or ``NAME=PATH`` (the name defaults to the directory or file stem;
a checkpoint's ``global_step_N/merged`` is named ``global_step_N``). Predictions resume only for the same
model, prompt format and sampling settings (otherwise the run stops, naming what changed), and the results
table keeps every model evaluated into ``--output-dir``.

``--judge URL`` (an OpenAI-compatible server, e.g. ``vllm serve``) also grades TruthfulQA and HalluQA
answers with an LLM judge (`fspo.evaluation.answer_judge`); its verdicts are cached beside the predictions.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

from fspo.config.calibrated_thresholds import calibrated_threshold
from fspo.config.numeric_options import (
    COUNT,
    LOSS_TERM,
    NON_NEGATIVE_COUNT,
    OPEN_PROBABILITY,
    PROBABILITY,
    SECONDS,
    SEED,
    Number,
)
from fspo.config.vocabulary import VERIFIER_NAMES
from fspo.evaluation.answer_judge import METRICS_OF_SOURCE, AnswerJudge
from fspo.evaluation.generation import GenerationSettings, build_generator, render_prompts, vllm_available
from fspo.evaluation.pipeline import ProvenanceError, check_rows, evaluate_model
from fspo.evaluation.report import accumulated_results, check_reported_predictions, predictions_file, write_results
from fspo.training.data_checks import PromptRow
from fspo.training.prompt_formats import PROMPT_FORMATS
from fspo.utils.arguments import HelpFormatter, UsageError, check_count, check_model_dir, check_probability, refuse
from fspo.utils.chat_client import ChatClient
from fspo.utils.checked_load import check_model_files, load_tokenizer
from fspo.utils.input_files import InputFileError, read_parquet_rows
from fspo.utils.output_dir import check_output_paths, output_option, output_set
from fspo.verifier_tools.verify import verifier_options

PROG = "fspo evaluate"
SPLIT_NAMES = {"train", "test", "val", "validation", "dev"}
# verl's val_kwargs.top_k: -1 is off (verl/trainer/config/rollout/rollout.yaml:157-158), and its transformers
# rollout takes max(0, top_k) (verl/workers/rollout/hf_rollout.py:75): -1 and 0 both sample from every token.
TOP_K = Number("an integer >= -1 (-1 or 0: off)", int, -1, dtype="int64")
# Folder names that say nothing about which model is inside: name it after its parent (global_step_N).
GENERIC_MODEL_DIRS = {"merged", "huggingface", "hf", "actor", "model"}


def named_path(spec: str) -> tuple[str, Path]:
    """``NAME=PATH`` → (NAME, PATH); a bare ``PATH`` is named after its file stem or directory name.

    `fspo data gsm8k` writes ``data/gsm8k/test.parquet``: a stem that is a split name gives way to the folder's.
    """
    name, sep, path = spec.partition("=")
    if not sep:
        resolved = Path(spec).resolve()
        generic = resolved.stem in SPLIT_NAMES or resolved.name in GENERIC_MODEL_DIRS
        name, path = resolved.parent.name if generic else resolved.stem, spec
    if not re.fullmatch(r"[\w.+-]+", name) or "__" in name:
        raise argparse.ArgumentTypeError(
            f"name {name!r} in {spec!r} may only hold letters, digits, '.', '+', '-', '_' (not '__')"
        )
    return name, Path(path)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--model", action="append", required=True, type=named_path, help="model directory (repeatable)")
    parser.add_argument(
        "--data",
        action="append",
        required=True,
        type=named_path,
        help="benchmark parquet built by `fspo data` (repeatable)",
    )
    parser.add_argument(
        "--output-dir",
        required=True,
        type=output_option(PROG, "--output-dir", convert=Path),
        help="where predictions, results.md/json and the chart are written (resumes from it)",
    )
    parser.add_argument(
        "--prompt-format",
        choices=list(PROMPT_FORMATS),
        default=None,
        help="chat template to render prompts with (default: the model's own)",
    )
    parser.add_argument(
        "--backend", choices=["auto", "vllm", "hf"], default="auto", help="auto: vLLM when installed, else transformers"
    )
    parser.add_argument("--temperature", type=LOSS_TERM.parse, default=0.0, help="sampling temperature (0: greedy)")
    parser.add_argument("--top-p", type=OPEN_PROBABILITY.parse, default=1.0, help="nucleus sampling mass, in (0, 1]")
    parser.add_argument(
        "--top-k",
        type=TOP_K.parse,
        default=0,
        help="sample among the k likeliest tokens; -1 or 0: off (as verl's val_kwargs.top_k)",
    )
    parser.add_argument("--max-new-tokens", type=COUNT.parse, default=1024, help="longest response, in tokens")
    parser.add_argument(
        "--samples", type=COUNT.parse, default=1, help="responses per prompt; pass@1 is their mean (AIME: 16)"
    )
    parser.add_argument(
        "--batch-size", type=COUNT.parse, default=8, help="rows per generation call (and per JSONL append)"
    )
    parser.add_argument("--seed", type=SEED.parse, default=0, help="seed of the sampler")
    parser.add_argument("--tensor-parallel-size", type=COUNT.parse, default=1, help="vLLM only")
    parser.add_argument(
        "--limit", type=COUNT.parse, default=None, help="evaluate only the first N rows of each benchmark"
    )
    parser.add_argument(
        "--verifier", default=None, choices=VERIFIER_NAMES, help="verifier (fspo.verifiers) for the supported step rate"
    )
    parser.add_argument(
        "--verifier-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a verifier option, as in fspo.verifier.* (repeatable), e.g. model_path=/models/hhem",
    )
    parser.add_argument(
        "--threshold",
        type=PROBABILITY.parse,
        default=None,
        help="with --verifier: a step scoring >= this is supported (default: the backend's calibrated "
        "threshold, the one training uses)",
    )
    judge = parser.add_argument_group("LLM judge of TruthfulQA / HalluQA answers (fspo.evaluation.answer_judge)")
    judge.add_argument(
        "--judge",
        metavar="URL",
        default=None,
        help="OpenAI-compatible server (root, /v1 or full chat-completions URL), e.g. a vLLM server",
    )
    judge.add_argument(
        "--judge-model",
        default="default",
        help="model name sent to the judge (and part of the cache key; default: the name 'default')",
    )
    judge.add_argument(
        "--judge-api-key-env",
        metavar="VAR",
        default=None,
        help="environment variable holding the judge's API key (sent as a Bearer token)",
    )
    judge.add_argument("--judge-concurrency", type=COUNT.parse, default=8, help="judge requests in flight at once")
    judge.add_argument("--judge-timeout", type=SECONDS.parse, default=60.0, help="seconds per judge request")
    judge.add_argument(
        "--judge-retries",
        type=NON_NEGATIVE_COUNT.parse,
        default=3,
        help="retries of a judge request after a timeout, connection error or 408/429/5xx",
    )
    judge.add_argument(
        "--judge-max-tokens",
        type=COUNT.parse,
        default=16,
        help="the judge's reply budget (raise it for a reasoning judge that thinks first)",
    )
    parser.add_argument(
        "--evidence-key",
        default="evidence",
        help="where a row's evidence is: extra_info[KEY] or a column KEY, as fspo.evidence_key "
        "(the released FSPO files: knowledge)",
    )
    return parser


def judged_summary(metrics: dict) -> str:
    """`` truthful_ratio=0.7500 ... judged=3 unjudged=1`` for a judged benchmark, "" otherwise."""
    if "judged" not in metrics:
        return ""
    names = [name for per_source in METRICS_OF_SOURCE.values() for name in per_source if name in metrics]
    ratios = "".join(f" {name}={metrics[name]:.4f}" for name in names)
    return f"{ratios} judged={metrics['judged']} unjudged={metrics['unjudged']}"


def build_judge(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """The `AnswerJudge` the ``--judge*`` options describe, None without ``--judge``; bad options exit 2."""
    given = [
        f"--{name.replace('_', '-')}"
        for name in vars(args)
        if name.startswith("judge_") and getattr(args, name) != parser.get_default(name)
    ]
    if args.judge is None:
        if given:
            parser.error(f"{' and '.join(given)}: only with --judge URL (the judge server)")
        return None
    if not re.match(r"https?://", args.judge):
        parser.error(f"--judge {args.judge!r} is not an http(s) URL, e.g. http://localhost:8000/v1")

    try:
        client = ChatClient(
            args.judge,
            args.judge_model,
            args.judge_api_key_env,
            timeout_s=args.judge_timeout,
            max_retries=args.judge_retries,
            max_tokens=args.judge_max_tokens,
            log_name="evaluation judge",
            timeout_setting="--judge-timeout",
        )
        return AnswerJudge(client, max_concurrency=args.judge_concurrency)
    except ValueError as error:
        parser.error(f"--judge options: {error}")


def check_arguments(args: argparse.Namespace) -> GenerationSettings:
    """Refuse (:class:`fspo.utils.arguments.UsageError`) options that cannot work together or at all, and folders
    that cannot be read or written, before any file is read or model loaded; the generation settings."""
    for flag, specs in (("--model", args.model), ("--data", args.data)):
        names = [name for name, _ in specs]
        if len(set(names)) != len(names):
            raise UsageError(f"two {flag} entries share a name in {names}; name them NAME=PATH")
    if args.verifier is None:
        given = [
            flag
            for flag, value in (("--threshold", args.threshold), ("--verifier-option", args.verifier_option))
            if value
        ]
        if given:
            raise UsageError(f"{' and '.join(given)}: only with --verifier NAME (the supported step rate)")
    else:
        try:
            verifier_options(args.verifier_option, args.verifier, "--verifier-option")
        except ValueError as error:
            raise UsageError(str(error)) from None
        if args.threshold is None:
            args.threshold = calibrated_threshold(args.verifier)
    check_probability("--threshold", args.threshold)
    check_count("--limit", args.limit)
    check_count("--tensor-parallel-size", args.tensor_parallel_size)
    if args.backend == "vllm" and not vllm_available():
        raise UsageError("--backend vllm: vllm is not installed here; install it or use --backend hf")
    if args.tensor_parallel_size > 1 and (args.backend == "hf" or not vllm_available()):
        raise UsageError(
            f"--tensor-parallel-size {args.tensor_parallel_size} needs the vllm backend; the "
            "transformers backend runs on one device"
        )
    try:
        settings = GenerationSettings(
            args.temperature,
            args.top_p,
            args.max_new_tokens,
            args.samples,
            args.batch_size,
            args.seed,
            top_k=max(args.top_k, 0),  # one value for off, so -1 and 0 resume each other's predictions
        )
    except ValueError as error:
        field, _, rest = str(error).partition(" must")  # "top_p must be in (0, 1], got 0" -> --top-p
        raise UsageError(f"--{field.replace('_', '-')} must{rest}") from None
    for _, path in args.data:
        if not path.is_file():
            raise UsageError(f"benchmark file {path} does not exist (build it with `fspo data`)")
        if path.suffix.lower() != ".parquet":
            raise UsageError(f"{path} is not a parquet file: build the benchmark with `fspo data`")
    for _, path in args.model:
        check_model_dir("--model", path)
    check_output_paths("--output-dir", args.output_dir, output_paths(args), PROG, record=False)
    return settings


def output_paths(args: argparse.Namespace) -> list[str]:
    """What this run writes in ``--output-dir``: the results files and each (model, benchmark)'s predictions,
    their provenance and the judge's verdicts (fspo.utils.output_dir's rule holds for each)."""
    paths = [f"results.{suffix}" for suffix in ("md", "json", "csv", "png")]
    for model_name, _ in args.model:
        for bench_name, _ in args.data:
            stem = f"predictions/{model_name}__{bench_name}"
            paths += [f"{stem}.jsonl", f"{stem}.provenance.json", f"{stem}.judgments.jsonl"]
    return paths


def read_benchmarks(args: argparse.Namespace) -> dict[str, list[dict]]:
    """Each ``--data`` file's rows (cut to ``--limit``), checked as generation and scoring will read them: each row
    fits :class:`fspo.training.data_checks.PromptRow`, as ``fspo data check`` and training require."""
    benchmarks = {}
    for name, path in args.data:
        try:
            rows = read_parquet_rows(path, schema=PromptRow)[: args.limit]
        except InputFileError as error:
            raise UsageError(f"benchmark {name}: {error}") from None
        if not rows:
            raise UsageError(f"benchmark {name}: {path} has no rows")
        try:
            check_rows(rows, where=f"benchmark {name}")
        except ValueError as error:
            raise UsageError(str(error)) from None
        benchmarks[name] = rows
    return benchmarks


def check_prompts_render(args: argparse.Namespace, benchmarks: dict[str, list[dict]]) -> dict[str, object]:
    """Every row renders with each model's tokenizer (its chat template, or ``--prompt-format``), and the longest
    prompt plus ``--max-new-tokens`` fits the model's position table (its weights files read too), checked before
    any model loads. Returns the tokenizers by model folder: the transformers backend generates with them (a Qwen
    tokenizer takes seconds to load in transformers 5)."""
    from transformers.utils import logging as transformers_logging

    tokenizers = {}
    for model_name, model_dir in args.model:
        try:  # the weights files first: reading them takes milliseconds, a tokenizer a second or more
            check_model_files(str(model_dir))
        except ValueError as error:
            raise UsageError(f"--model {error}") from None
        # Quiet: its warnings would bury a refusal's one line (the model's own come when it loads).
        verbosity = transformers_logging.get_verbosity()
        transformers_logging.set_verbosity_error()
        try:
            tokenizer = load_tokenizer(str(model_dir))
        except ValueError as error:
            raise UsageError(f"--model {model_dir}: its tokenizer does not load ({error})") from None
        finally:
            transformers_logging.set_verbosity(verbosity)
        longest = 0
        for bench_name, rows in benchmarks.items():
            try:
                prompts = render_prompts(tokenizer, rows, args.prompt_format)
            except Exception as error:  # noqa: BLE001 - a row the template cannot render
                raise UsageError(f"benchmark {bench_name} does not render for model {model_name}: {error}") from None
            encoded = tokenizer(prompts, add_special_tokens=False)["input_ids"]  # as the generator encodes them
            longest = max([longest, *map(len, encoded)])
        try:
            check_model_files(
                str(model_dir),
                longest + args.max_new_tokens,
                f"the longest prompt ({longest} tokens) + --max-new-tokens {args.max_new_tokens}",
            )
        except ValueError as error:
            raise UsageError(f"--model {error}") from None
        tokenizers[str(model_dir)] = tokenizer
    return tokenizers


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    judge = build_judge(parser, args)
    try:
        settings = check_arguments(args)
        benchmarks = read_benchmarks(args)
        tokenizers = check_prompts_render(args, benchmarks)
        verifier = None
        if args.verifier:
            # Lazy: the verifier's config and backends import verl (seconds), after the arguments are checked.
            from fspo.config.verifier import verifier_config
            from fspo.verifiers import build_verifier

            try:
                options = verifier_options(args.verifier_option, args.verifier, "--verifier-option")
                verifier = build_verifier(verifier_config({"name": args.verifier, **options}))
            except ValueError as error:
                raise UsageError(str(error)) from None
        return evaluate(args, settings, benchmarks, verifier, judge, tokenizers)
    except (UsageError, ProvenanceError) as error:
        return refuse(PROG, error)


def evaluate(
    args: argparse.Namespace, settings: GenerationSettings, benchmarks: dict, verifier, judge, tokenizers: dict
) -> int:
    """Generate, score and tabulate every model on every benchmark (the arguments are checked; ``tokenizers``:
    each model's, as :func:`check_prompts_render` loaded it)."""
    results: dict[str, dict[str, dict]] = {}
    args.output_dir = check_output_paths("--output-dir", args.output_dir, output_paths(args), PROG)
    predictions_dir = args.output_dir / "predictions"
    # The results table reports every earlier file too: one this run does not resume is refused now, not after it.
    check_reported_predictions(predictions_dir, {predictions_file(m, b) for m, _ in args.model for b, _ in args.data})
    for model_name, model_dir in args.model:
        try:
            generator = build_generator(
                model_dir,
                settings,
                args.backend,
                tensor_parallel_size=args.tensor_parallel_size,
                tokenizer=tokenizers.get(str(model_dir)),
            )
        except ValueError as error:  # fspo.utils.checked_load's refusal: weights that do not fill the model
            raise UsageError(f"--model {error}") from None
        for bench_name, rows in benchmarks.items():
            metrics = evaluate_model(
                model_dir,
                rows,
                predictions_path=predictions_dir / f"{model_name}__{bench_name}.jsonl",
                prompt_format=args.prompt_format,
                batch_size=args.batch_size,
                verifier=verifier,
                threshold=args.threshold,
                generator=generator,
                description=f"{model_name} · {bench_name}",
                evidence_key=args.evidence_key,
                judge=judge,
            )
            generated = metrics["generated"]
            results.setdefault(model_name, {})[bench_name] = metrics
            rate = metrics.get("supported_step_rate")
            print(
                f"{model_name} {bench_name}: score={metrics['score']:.4f} n={metrics['n']} generated={generated}"
                + ("" if rate is None else f" supported_step_rate={'nan' if math.isnan(rate) else f'{rate:.4f}'}")
                + judged_summary(metrics)
            )
            if judge is not None and "judged" not in metrics:
                print(
                    f"{model_name} {bench_name}: not judged (the judge grades TruthfulQA and HalluQA generation "
                    "rows: truthfulqa_gen, halluqa_gen; `fspo data halluqa --form generation` builds the latter)"
                )
        del generator  # free the model before loading the next one
    with output_set(args.output_dir, "--output-dir", PROG) as staging:  # the results files move in together
        staged = write_results(accumulated_results(args.output_dir, results), staging)
    paths = {kind: args.output_dir / path.name for kind, path in staged.items()}
    print(paths["markdown"].read_text(encoding="utf-8"))
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0
