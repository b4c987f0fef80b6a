"""Flawed positives on the synthetic worlds: right answers whose reasoning holds a step the world judge contradicts.

FSPO's premise is that outcome-only RL rewards such answers. This reports, per world
(:data:`fspo.data.synthetic.WORLDS`), the share of right answers (exact match) with a contradicted step (and of
all answers: ``flawed_positive_share``), the
share of right answers that do not state the whole gold chain (a contradicted step, a shortcut, a guess),
the judge's hallucinated-step rate and the answer F1, for three kinds of answers:

- ``generate``: a model's own answers to fresh quickstart questions (the quickstart prompt and response
  length; greedy, or sampled at ``--temperature``), no trainer: a minute on a CPU for 32 questions;
- ``run``: a finished ``fspo quickstart`` run's validation answers before and after training
  (``<run>/<fspo|grpo>/validation/*.jsonl``), judged against the held-out rows it was given (``--val``);
- ``rollouts``: the training rollouts a run dumped with ``trainer.rollout_data_dir=DIR`` (one ``<step>.jsonl``
  a step), judged against the training rows (``--train``): per step, and all steps together. A flawed
  positive there is an answer the outcome reward paid in full for although a step of it is contradicted.

Usage:
    python benchmarks/flawed_positives.py generate --worlds default shortcut --rows 32 --seed 0
    python benchmarks/flawed_positives.py run --run-dir /tmp/bed_grpo --val /tmp/bed_data/test.parquet
    python benchmarks/flawed_positives.py rollouts --dir /tmp/bed_fspo/rollouts --train /tmp/bed_data/train.parquet
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

from fspo.data.io import read_rows
from fspo.data.synthetic import DATA_SOURCE, WORLDS
from fspo.quickstart.cli import VAL_ROWS, quickstart_rows
from fspo.quickstart.step_report import step_report, validation_samples
from fspo.training.outcome import compute_score

FIGURES = (
    "answers",
    "right_answers",
    "flawed_positives",
    "flawed_positive_rate",
    "unchained_positive_rate",
    "hallucinated_step_rate",
    "answer_f1",
    "flawed_positive_share",
)


def _judged_steps_module():
    spec = importlib.util.spec_from_file_location("judged_steps", Path(__file__).with_name("judged_steps.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def figures(samples: list[dict]) -> dict:
    """The flawed-positive rate, the judge's hallucinated-step rate and the mean answer F1 of judged samples."""
    report = step_report(samples, verifiers=())
    scores = [compute_score(DATA_SOURCE, s["response"], s["ground_truth"])["f1"] for s in samples]
    report["answer_f1"] = sum(scores) / len(scores) if scores else None
    # Over all answers, not only the right ones: defined for every run (the pre-registration's primary metric).
    report["flawed_positive_share"] = report["flawed_positives"] / len(samples) if samples else None
    return {key: report[key] for key in FIGURES}


def generate_figures(args) -> dict:
    judged_steps = _judged_steps_module()
    if args.model is None:
        from fspo.quickstart.smollm2 import convert_smollm2

        args.model = convert_smollm2()
    results = {}
    for world in args.worlds:
        rows = quickstart_rows(args.rows, args.seed, "probe", world)
        responses = judged_steps.generate(args.model, rows, args.temperature, args.seed)
        results[world] = figures(judged_steps.answer_samples(rows, responses))
    return results


def run_figures(args) -> dict:
    rows = read_rows(args.val)
    results = {}
    for arm in ("fspo", "grpo"):
        dumps = sorted((args.run_dir / arm / "validation").glob("*.jsonl"), key=lambda p: int(p.stem))
        for dump in dumps[:1] + dumps[1:][-1:]:
            results[f"{arm} step {dump.stem}"] = figures(validation_samples(dump, rows))
    return results


def rollout_figures(args) -> dict:
    rows = read_rows(args.train)
    dumps = sorted(args.dir.glob("*.jsonl"), key=lambda p: int(p.stem))
    per_step = {f"step {dump.stem}": validation_samples(dump, rows) for dump in dumps}
    results = {name: figures(samples) for name, samples in per_step.items()}
    results["all steps"] = figures([sample for samples in per_step.values() for sample in samples])
    return results


def _cell(value) -> str:
    return "n/a" if value is None else (f"{value:.3f}" if isinstance(value, float) else str(value))


def table(results: dict) -> str:
    lines = ["| answers of | " + " | ".join(FIGURES) + " |", "|---" * (len(FIGURES) + 1) + "|"]
    lines += [f"| {name} | " + " | ".join(_cell(row[key]) for key in FIGURES) + " |" for name, row in results.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    generate = commands.add_parser("generate", help="a model's answers to fresh questions, no trainer")
    generate.add_argument("--worlds", nargs="+", choices=WORLDS, default=list(WORLDS))
    generate.add_argument("--rows", type=int, default=VAL_ROWS, help=f"questions per world (default {VAL_ROWS})")
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    generate.add_argument("--model", type=Path, help="a Hugging Face model directory (default: the quickstart's)")
    run = commands.add_parser("run", help="a finished quickstart run's validation answers")
    run.add_argument("--run-dir", type=Path, required=True, help="the quickstart's --output-dir")
    run.add_argument("--val", type=Path, required=True, help="the held-out parquet the run validated on")
    rollouts = commands.add_parser("rollouts", help="a run's training rollouts (trainer.rollout_data_dir)")
    rollouts.add_argument("--dir", type=Path, required=True, help="the run's trainer.rollout_data_dir")
    rollouts.add_argument("--train", type=Path, required=True, help="the training parquet the run trained on")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    for option, path in (("--val", getattr(args, "val", None)), ("--train", getattr(args, "train", None))):
        if path is not None and not path.is_file():
            parser.error(f"{option} {path}: no such file")
    commands = {"generate": generate_figures, "run": run_figures, "rollouts": rollout_figures}
    results = commands[args.command](args)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
