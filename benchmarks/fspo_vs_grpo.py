"""FSPO against GRPO and the paper's "GRPO with factuality in the reward", over several seeds.

Each arm trains at the quickstart's budget (``fspo quickstart``'s data, model, overrides and launch code)
once per seed; the seeds share their data across arms, so arms are compared on the same questions.
After training each run's greedy answers on the held-out questions are scored four ways: answer F1,
the independent world judge's hallucinated-step rate, the supported-step rate of the ``lexical`` (the
verifier every arm trains with) and ``embedding`` verifiers, and the share of steps copied verbatim
from the evidence (see :mod:`fspo.quickstart.step_report`).

Writes ``results.json`` (every run), ``results.md`` (mean ± std per arm) and ``fspo_vs_grpo.png`` to
``--output-dir``. A finished run is kept: run the command again after an interruption and only the
missing runs train.

    python benchmarks/fspo_vs_grpo.py                     # 3 arms x 3 seeds x 12 steps: 99.5 min on 2 cores
    python benchmarks/fspo_vs_grpo.py --seeds 1 --steps 1 --val-rows 4   # the smoke test of this script
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import time
from pathlib import Path

from fspo.data.io import read_rows
from fspo.quickstart.cli import VAL_ROWS, prepare_data, say, train
from fspo.quickstart.step_report import step_report, validation_samples

# arm -> the overrides that make it; all three train against the quickstart's lexical verifier.
ARMS = {
    "fspo": [],
    "grpo": ["fspo.flip=false"],
    "grpo_factuality_reward": ["fspo.flip=false", "fspo.step_reward_weight=0.5"],
}
# (key in a run's figures, column title)
FIGURES = [
    ("answer_f1", "answer F1"),
    ("hallucinated_step_rate", "hallucinated-step rate (world judge)"),
    ("lexical_supported_step_rate", "supported-step rate (lexical)"),
    ("embedding_supported_step_rate", "supported-step rate (embedding)"),
    ("copy_rate", "copied steps"),
    ("steps_per_answer", "steps per answer"),
]
# The chart shows the rates (0..1); steps per answer stays in the table.
CHART_FIGURES = [(key, title) for key, title in FIGURES if key != "steps_per_answer"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per arm (0, 1, ...; default 3)")
    parser.add_argument("--steps", type=int, default=12, help="training steps per run (the quickstart's 12)")
    parser.add_argument("--val-rows", type=int, default=VAL_ROWS, help=f"held-out questions (default {VAL_ROWS})")
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    parser.add_argument("--model", type=Path, help="a Hugging Face model directory (default: the quickstart's SmolLM2)")
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/fspo_vs_grpo"))
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    return parser


def figures(dump: Path, rows: list[dict], answer_f1: float | None) -> dict:
    """One validation pass's figures: answer F1 (from the trainer's metrics) and the step report."""
    report = step_report(validation_samples(dump, rows))
    return {
        "answer_f1": answer_f1,
        **{key: report[key] for key, _ in FIGURES if key in report},
        "steps": report["steps"],
        "answers": report["answers"],
    }


def run_once(arm: str, seed: int, args, model: Path, clock: float) -> dict:
    """Trains one arm with one seed (or reads its finished result) and returns its figures."""
    out = args.output_dir / arm / f"seed{seed}"
    result_path = out / "result.json"
    if result_path.is_file():
        say(clock, f"[{arm} seed {seed}] finished before: {result_path}")
        return json.loads(result_path.read_text())
    # A half-finished run's checkpoint would be resumed by verl: start it afresh.
    shutil.rmtree(out, ignore_errors=True)
    train_file, val_file = prepare_data(args.output_dir / "data" / f"seed{seed}", seed, args.val_rows)
    setup = {"model": model, "train": train_file, "val": val_file}
    run = train(f"{arm} seed {seed}", setup, out, args.steps, seed, [*ARMS[arm], *args.overrides], clock)
    rows = read_rows(val_file)
    say(clock, f"[{arm} seed {seed}] scoring the answers with the world judge and both verifiers")
    result = {
        "arm": arm,
        "seed": seed,
        "seconds": round(run["seconds"], 1),
        "before": figures(run["validation_dumps"]["before"], rows, run["before"].get("answer_f1")),
        "after": figures(run["validation_dumps"]["after"], rows, run["after"].get("answer_f1")),
    }
    result_path.write_text(json.dumps(result, indent=2))
    return result


def figure_value(figures: dict, key: str) -> float | None:
    """One figure of a validation pass; steps per answer is derived (results written before it lack it)."""
    if key == "steps_per_answer":
        return figures["steps"] / figures["answers"] if figures.get("answers") else None
    return figures.get(key)


def mean_std(values: list[float | None]) -> tuple[float, float, int]:
    """(mean, sample standard deviation, count) of the values that are not None; std 0 for one value."""
    present = [v for v in values if v is not None and not math.isnan(v)]
    if not present:
        return math.nan, math.nan, 0
    return statistics.fmean(present), statistics.stdev(present) if len(present) > 1 else 0.0, len(present)


def summarise(results: list[dict]) -> dict[str, dict[str, tuple[float, float, int]]]:
    """Per arm (and ``base model``: the untrained model, from every run's validation before training),
    each figure's mean, std and count over seeds."""
    groups: dict[str, list[dict]] = {"base model": [r["before"] for r in results if r["arm"] == results[0]["arm"]]}
    for result in results:
        groups.setdefault(result["arm"], []).append(result["after"])
    return {
        name: {key: mean_std([figure_value(f, key) for f in runs]) for key, _ in FIGURES}
        for name, runs in groups.items()
    }


def markdown_table(summary: dict, steps: int, seeds: int, val_rows: int, run_s: float) -> str:
    """The results as a Markdown table of mean ± std, with how they were measured.

    A figure some runs lack (a run whose answers hold no closed reasoning has no step figures) shows over
    how many runs it is taken, ``(n=2)``, so a collapsed seed does not vanish into the mean unseen."""
    lines = [
        f"{val_rows} held-out questions, greedy; {steps} training steps per run; mean ± std over {seeds} "
        f"seed(s); {run_s / 60:.1f} min of runs (Ray start-up, validation, training)",
        "",
        "| arm | " + " | ".join(title for _, title in FIGURES) + " |",
        "|---|" + "---|" * len(FIGURES),
    ]
    for name, stats in summary.items():
        runs = max(count for _, _, count in stats.values())
        cells = [
            "n/a" if count == 0 else f"{mean:.3f} ± {std:.3f}" + (f" (n={count})" if count < runs else "")
            for mean, std, count in stats.values()
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> None:
    """One grouped bar chart: a group per rate, a bar per arm, error bars of one std; n/a draws no bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(11, 4))
    width = 0.8 / len(summary)
    for index, (name, stats) in enumerate(summary.items()):
        means = [stats[key][0] for key, _ in CHART_FIGURES]
        stds = [stats[key][1] for key, _ in CHART_FIGURES]
        positions = [x + index * width for x in range(len(CHART_FIGURES))]
        # A figure with no value (no closed reasoning to judge) gets no bar rather than a bar at 0.
        axis.bar(positions, means, width, yerr=[0.0 if math.isnan(s) else s for s in stds], capsize=3, label=name)
    axis.set_xticks([x + 0.4 - width / 2 for x in range(len(CHART_FIGURES))])
    axis.set_xticklabels([title.replace(" (", "\n(") for _, title in CHART_FIGURES], fontsize=8)
    axis.set_ylim(0, 1.05)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.steps < 1 or args.val_rows < 1:
        parser.error("--seeds, --steps and --val-rows must be at least 1")
    if args.model and not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: not a Hugging Face model directory (no config.json)")
    args.output_dir = args.output_dir.resolve()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    clock = time.time()
    if args.model:
        model = args.model.resolve()
    else:
        from fspo.quickstart.smollm2 import convert_smollm2

        model = convert_smollm2()
    results = [run_once(arm, seed, args, model, clock) for seed in range(args.seeds) for arm in args.arms]
    wall_s = time.time() - clock  # this invocation only; the runs' own seconds survive a resume
    run_s = sum(result["seconds"] for result in results)
    summary = summarise(results)
    table = markdown_table(summary, args.steps, args.seeds, args.val_rows, run_s)
    (args.output_dir / "results.json").write_text(
        json.dumps(
            {
                "steps": args.steps,
                "seeds": args.seeds,
                "val_rows": args.val_rows,
                "arms": args.arms,
                "run_seconds": round(run_s, 1),
                "wall_seconds": round(wall_s, 1),
                "runs": results,
            },
            indent=2,
        )
    )
    (args.output_dir / "results.md").write_text(table + "\n")
    plot(summary, args.output_dir / "fspo_vs_grpo.png")
    print("\n" + table)
    print(f"\nresults: {args.output_dir / 'results.json'}\nchart:   {args.output_dir / 'fspo_vs_grpo.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
