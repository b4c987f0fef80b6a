"""The results table (Markdown, JSON, CSV) and the bar chart comparing models."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Collection
from pathlib import Path

from fspo.evaluation.pipeline import score_records
from fspo.evaluation.records import read_records
from fspo.utils.arguments import UsageError
from fspo.utils.atomic_file import replacing, write_text_atomically
from fspo.utils.input_files import InputFileError, jsonl_lines, parse_jsonl, read_json, read_jsonl, read_text
from fspo.utils.record_schemas import Prediction


def _benchmarks(results: dict[str, dict[str, dict]]) -> list[str]:
    names: list[str] = []
    for per_benchmark in results.values():
        names += [name for name in per_benchmark if name not in names]
    return names


def results_table(results: dict[str, dict[str, dict]], metric: str = "score") -> tuple[list[str], list[list]]:
    """Header and rows of a model × benchmark table of `metric` (NaN where a model lacks a benchmark)."""
    benchmarks = _benchmarks(results)
    rows = [
        [model] + [float(per_benchmark.get(b, {}).get(metric, math.nan)) for b in benchmarks]
        for model, per_benchmark in results.items()
    ]
    return ["model", *benchmarks], rows


def _markdown(header: list[str], rows: list[list]) -> str:
    def cell(value):
        if isinstance(value, float):
            return "–" if math.isnan(value) else f"{100 * value:.1f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# Columns of the judge table: (header, metric keys in order of preference). HalluQA's judged figure is its
# hallucination-free ratio, which the paper reports as its truthful ratio: it shares the "truthful" column.
JUDGE_COLUMNS = (
    ("string-match score", ("score",)),
    ("truthful", ("truthful_ratio", "halluqa_truthful_ratio")),
    ("informative", ("informative_ratio",)),
    ("truthful & informative", ("truthful_informative_ratio",)),
    ("judged", ("judged",)),
    ("unjudged", ("unjudged",)),
)


def judge_table(results: dict[str, dict[str, dict]]) -> tuple[list[str], list[list]]:
    """One row per (model, benchmark) the LLM judge graded: its ratios beside the string-match score.

    Ratios are floats (NaN where a benchmark has no such figure), ``judged`` / ``unjudged`` row counts ints.
    """
    rows = []
    for model, per_benchmark in results.items():
        for benchmark, metrics in per_benchmark.items():
            if "judged" not in metrics:
                continue
            row: list = [model, benchmark]
            for header, keys in JUDGE_COLUMNS:
                value = next((metrics[k] for k in keys if metrics.get(k) is not None), math.nan)
                row.append(int(value) if header in ("judged", "unjudged") and not math.isnan(value) else float(value))
            rows.append(row)
    return ["model", "benchmark", *(header for header, _ in JUDGE_COLUMNS)], rows


def _plot(header: list[str], rows: list[list], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    benchmarks = header[1:]
    width = 0.8 / max(len(rows), 1)
    figure, axes = plt.subplots(figsize=(max(4.0, 1.2 * len(benchmarks) * max(len(rows), 1) ** 0.5 + 2), 3.6))
    for k, row in enumerate(rows):
        values = [0.0 if math.isnan(v) else 100 * v for v in row[1:]]
        positions = [i + (k - (len(rows) - 1) / 2) * width for i in range(len(benchmarks))]
        axes.bar(positions, values, width, label=row[0])
    axes.set_xticks(range(len(benchmarks)), benchmarks, rotation=20, ha="right")
    axes.set_ylabel("score (%)")
    axes.set_ylim(0, 100)
    axes.set_title(title)
    axes.legend(fontsize="small")
    figure.tight_layout()
    try:
        with replacing(path) as temporary:
            figure.savefig(temporary, dpi=120)
    finally:
        plt.close(figure)


def write_results(
    results: dict[str, dict[str, dict]], output_dir: str | Path, stem: str = "results"
) -> dict[str, Path]:
    """Write the model × benchmark mean-score table and chart to `output_dir`.

    Args:
        results: ``{model: {benchmark: metrics}}`` with metrics as returned by `evaluate_model`.
        output_dir: Created if missing.
        stem: File name stem.

    Returns:
        The written paths: ``{"markdown", "json", "csv", "png"}``. The JSON keeps every metric; the Markdown
        adds a supported-step-rate table when a verifier was used, and the LLM judge's table when one was.
    """
    if not results:
        raise ValueError("no results to write")
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        kind: output_dir / f"{stem}.{suffix}"
        for kind, suffix in [("markdown", "md"), ("json", "json"), ("csv", "csv"), ("png", "png")]
    }
    header, rows = results_table(results)

    markdown = "## Mean score (%)\n\n" + _markdown(header, rows)
    if any("supported_step_rate" in m for per in results.values() for m in per.values()):
        markdown += "\n## Supported step rate (%)\n\n" + _markdown(*results_table(results, "supported_step_rate"))
    judge_header, judged_rows = judge_table(results)
    if judged_rows:
        markdown += "\n## LLM judge (%, over judged rows; HalluQA's truthful = free of hallucination)\n\n" + _markdown(
            judge_header, judged_rows
        )
    write_text_atomically(paths["markdown"], markdown)

    # JSON has no NaN: write null instead so any parser reads it.
    clean = {
        m: {
            b: {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}
            for b, metrics in per.items()
        }
        for m, per in results.items()
    }
    write_text_atomically(paths["json"], json.dumps(clean, indent=2) + "\n")

    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow(header)
    writer.writerows([[row[0]] + ["" if math.isnan(v) else f"{v:.6f}" for v in row[1:]] for row in rows])
    write_text_atomically(paths["csv"], table.getvalue())

    _plot(header, rows, paths["png"], "Mean score per benchmark")
    return paths


def predictions_file(model: str, benchmark: str) -> str:
    """The name of ``model``'s predictions on ``benchmark`` in ``fspo evaluate``'s ``predictions/`` folder."""
    return f"{model}__{benchmark}.jsonl"


def prediction_files(predictions_dir: str | Path) -> list[Path]:
    """Every predictions file in the folder, sorted (the LLM judge's verdict caches beside them left out)."""
    return [
        path for path in sorted(Path(predictions_dir).glob("*__*.jsonl")) if not path.name.endswith(".judgments.jsonl")
    ]


def read_reported(path: Path) -> list[dict]:
    """The records of a predictions file a command only reports (no run of it is resuming it): a cut-short last line,
    like any bad line, is a :class:`UsageError` in one line naming the file, the line and what to do."""
    try:
        return read_jsonl(path, schema=Prediction)
    except InputFileError as error:
        line = cut_short_line(path)
        if line is None:
            raise UsageError(str(error)) from None
        model, _, benchmark = path.stem.partition("__")
        raise UsageError(
            f"{path}, line {line} was cut short by an interrupted `fspo evaluate`: run `fspo evaluate` of model "
            f"{model} on benchmark {benchmark} into this --output-dir again to resume it, or delete the file"
        ) from None


def cut_short_line(path: Path) -> int | None:
    """The number of a predictions file's last line when it alone is bad, ends without a newline and is no JSON (a
    write cut short: what the resume drops, fspo.utils.input_files.parse_jsonl), else None."""
    try:
        lines = jsonl_lines(read_text(path, "JSON Lines file"))
        parse_jsonl(path, lines[:-1], Prediction)
    except InputFileError:
        return None
    try:
        parse_jsonl(path, lines[-1:])
    except InputFileError:
        return len(lines)
    return None


def check_reported_predictions(predictions_dir: str | Path, resumed: Collection[str]) -> None:
    """Refuse (:func:`read_reported`) before a run's generation, not after it, a predictions file its results table
    would report but the run does not resume (``resumed``: their names)."""
    for path in prediction_files(predictions_dir):
        if path.name not in resumed:
            read_reported(path)


def results_from_predictions(predictions_dir: str | Path, resumed: Collection[str] = ()) -> dict[str, dict[str, dict]]:
    """``{model: {benchmark: metrics}}`` recomputed from every ``<model>__<benchmark>.jsonl`` in the folder.

    The score metrics and ``n`` come from the records themselves; what needs a model or a verifier
    (``supported_step_rate``) is not recomputed. The files named in ``resumed`` are those the calling
    ``fspo evaluate`` resumed: read under the resume rule (a cut-short last line dropped, and said); every other
    file is only reported, and refused when cut short (:func:`read_reported`).
    """
    results: dict[str, dict[str, dict]] = {}
    for path in prediction_files(predictions_dir):
        model, _, benchmark = path.stem.partition("__")
        records = read_records(path, Prediction) if path.name in resumed else read_reported(path)
        if records:
            results.setdefault(model, {})[benchmark] = score_records(records)
    return results


def accumulated_results(output_dir: str | Path, current: dict[str, dict[str, dict]]) -> dict[str, dict[str, dict]]:
    """Every model evaluated into `output_dir`: this run's metrics over the earlier table's over the files'.

    Models keep the order they were first evaluated in; the earlier ``results.json`` supplies the metrics a
    prediction file cannot (the supported step rate), the prediction files the scores. The files of ``current``'s
    models and benchmarks are the ones this run resumed (:func:`results_from_predictions`).
    """
    previous_path = Path(output_dir) / "results.json"
    previous = read_json(previous_path) if previous_path.exists() else {}
    resumed = {predictions_file(model, benchmark) for model, per in current.items() for benchmark in per}
    from_files = results_from_predictions(Path(output_dir) / "predictions", resumed)
    order = [*previous, *(m for m in current if m not in previous)]
    order += sorted(m for m in from_files if m not in order)
    merged: dict[str, dict[str, dict]] = {}
    for model in order:
        benchmarks = [*previous.get(model, {}), *current.get(model, {}), *from_files.get(model, {})]
        for benchmark in dict.fromkeys(benchmarks):
            metrics = {
                **{k: (math.nan if v is None else v) for k, v in previous.get(model, {}).get(benchmark, {}).items()},
                **from_files.get(model, {}).get(benchmark, {}),
                **current.get(model, {}).get(benchmark, {}),
            }
            merged.setdefault(model, {})[benchmark] = metrics
    return merged
