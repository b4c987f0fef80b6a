"""`fspo evaluate`: evaluate model directories on prepared benchmark parquet files.

    fspo evaluate --model fspo=runs/fspo/merged --model base=/models/Qwen2.5-7B \
        --data data/gsm8k/test.parquet --data data/aime2025/test.parquet --output-dir eval_out \
        --temperature 0.6 --top-p 0.95 --max-new-tokens 2048 --samples 1

Each ``--model``/``--data`` is ``PATH`` or ``NAME=PATH`` (the name defaults to the directory or file stem;
a checkpoint's ``global_step_N/merged`` is named ``global_step_N``). Predictions resume only for the same
model, prompt format and sampling settings (otherwise the run stops, naming what changed), and the results
table keeps every model evaluated into ``--output-dir``.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

from fspo.data.templates import PROMPT_FORMATS
from fspo.verifiers import VERIFIER_NAMES
from fspo.evaluation.generation import GenerationSettings, build_generator
from fspo.evaluation.pipeline import SUPPORT_THRESHOLD, ProvenanceError, check_rows, evaluate_model
from fspo.evaluation.report import accumulated_results, write_results


SPLIT_NAMES = {"train", "test", "val", "validation", "dev"}
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
    parser = argparse.ArgumentParser(prog="fspo evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True, type=named_path, help="model directory (repeatable)")
    parser.add_argument("--data", action="append", required=True, type=named_path,
                        help="benchmark parquet built by `fspo data` (repeatable)")
    parser.add_argument("--output-dir", required=True, type=Path)
    parser.add_argument("--prompt-format", choices=list(PROMPT_FORMATS), default=None,
                        help="chat template to render prompts with (default: the model's own)")
    parser.add_argument("--backend", choices=["auto", "vllm", "hf"], default="auto",
                        help="auto: vLLM when installed, else transformers")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--max-new-tokens", type=int, default=1024)
    parser.add_argument("--samples", type=int, default=1, help="responses per prompt; pass@1 is their mean (AIME: 16)")
    parser.add_argument("--batch-size", type=int, default=8, help="rows per generation call (and per JSONL append)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tensor-parallel-size", type=int, default=1, help="vLLM only")
    parser.add_argument("--limit", type=int, default=None, help="evaluate only the first N rows of each benchmark")
    parser.add_argument("--verifier", default=None, choices=VERIFIER_NAMES,
                        help="verifier (fspo.verifiers) for the supported step rate")
    parser.add_argument("--verifier-option", action="append", default=[], metavar="KEY=VALUE",
                        help="a verifier option, as in fspo.verifier.* (repeatable), e.g. model_path=/models/hhem")
    parser.add_argument("--threshold", type=float, default=SUPPORT_THRESHOLD, help="support score threshold")
    parser.add_argument("--evidence-key", default="evidence",
                        help="where a row's evidence is: extra_info[KEY] or a column KEY, as fspo.evidence_key "
                             "(the released FSPO files: knowledge)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from fspo.data.io import read_rows

    for flag, specs in (("--model", args.model), ("--data", args.data)):
        names = [name for name, _ in specs]
        if len(set(names)) != len(names):
            raise SystemExit(f"fspo evaluate: two {flag} entries share a name in {names}; name them NAME=PATH")
    for _, path in args.data:
        if not path.is_file():
            raise SystemExit(f"fspo evaluate: benchmark file {path} does not exist (build it with `fspo data`)")
    for _, path in args.data:
        if path.suffix.lower() != ".parquet":
            raise SystemExit(f"fspo evaluate: {path} is not a parquet file: build the benchmark with `fspo data`")
    for _, path in args.model:
        if not path.is_dir():
            raise SystemExit(f"fspo evaluate: model directory {path} does not exist")
        if not (path / "config.json").is_file():
            raise SystemExit(
                f"fspo evaluate: {path} has no config.json: give a Hugging Face model folder (for a training "
                "checkpoint, merge it first: scripts/merge_checkpoint.sh)"
            )
    if args.limit is not None and args.limit < 1:
        raise SystemExit("fspo evaluate: --limit must be >= 1")
    benchmarks = {name: read_rows(path)[: args.limit] for name, path in args.data}
    for name, rows in benchmarks.items():
        try:
            check_rows(rows, where=f"benchmark {name}")
        except ValueError as error:
            raise SystemExit(f"fspo evaluate: {error}") from None

    verifier = None
    if args.verifier:
        from fspo.verifiers import build_verifier

        from fspo.verifiers.cli import parse_option

        try:
            verifier = build_verifier({"name": args.verifier, **dict(parse_option(o) for o in args.verifier_option)})
        except ValueError as error:
            raise SystemExit(f"fspo evaluate: {error}") from None
    try:
        settings = GenerationSettings(args.temperature, args.top_p, args.max_new_tokens, args.samples,
                                      args.batch_size, args.seed)
    except ValueError as error:
        raise SystemExit(f"fspo evaluate: {error}") from None

    results: dict[str, dict[str, dict]] = {}
    predictions_dir = args.output_dir / "predictions"
    for model_name, model_dir in args.model:
        generator = build_generator(model_dir, settings, args.backend, tensor_parallel_size=args.tensor_parallel_size)
        for bench_name, rows in benchmarks.items():
            try:
                metrics = evaluate_model(
                    model_dir, rows, predictions_path=predictions_dir / f"{model_name}__{bench_name}.jsonl",
                    prompt_format=args.prompt_format, batch_size=args.batch_size, verifier=verifier,
                    threshold=args.threshold, generator=generator, description=f"{model_name} · {bench_name}",
                    evidence_key=args.evidence_key,
                )
            except ProvenanceError as error:
                raise SystemExit(f"fspo evaluate: {error}") from None
            generated = metrics["generated"]
            results.setdefault(model_name, {})[bench_name] = metrics
            rate = metrics.get("supported_step_rate")
            print(f"{model_name} {bench_name}: score={metrics['score']:.4f} n={metrics['n']} generated={generated}"
                  + ("" if rate is None else f" supported_step_rate={'nan' if math.isnan(rate) else f'{rate:.4f}'}"))
        del generator  # free the model before loading the next one
    paths = write_results(accumulated_results(args.output_dir, results), args.output_dir)
    print(paths["markdown"].read_text(encoding="utf-8"))
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0
