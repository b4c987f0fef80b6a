"""Generate, score and (optionally) fact-check the responses of one model on one benchmark.

Predictions go to a JSONL file, one line per row with all its samples, appended as each batch finishes:
an interrupted evaluation resumes from that file and never generates a finished row again.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from tqdm.auto import tqdm

from fspo.evaluation.generation import GenerationSettings, Generator, build_generator, render_prompts
from fspo.scores import METRIC_KEYS as METRICS

SUPPORT_THRESHOLD = 0.5


def _evidence_text(row: dict, evidence_key: str = "evidence") -> str:
    """The row's evidence exactly as training hands it to the verifier (``extra_info`` or a column)."""
    from fspo.reward import row_evidence

    return row_evidence(row, evidence_key)


def _ground_truth(row: dict):
    reward_model = row.get("reward_model") or {}
    if "ground_truth" not in reward_model:
        raise ValueError("row has no reward_model.ground_truth (was the parquet built by `fspo data`?)")
    ground_truth = reward_model["ground_truth"]
    return list(ground_truth) if isinstance(ground_truth, tuple) else ground_truth


def check_rows(rows: Sequence[dict], where: str = "rows") -> None:
    """Raise before any generation if a row lacks chat messages, a known data_source or a ground truth."""
    from fspo.scores import scorer_of, unknown_source_message

    for position, row in enumerate(rows):
        source = row.get("data_source")
        if scorer_of(source) is None:
            raise ValueError(f"{where}: row {position}: {unknown_source_message(source)}")
        if not row.get("prompt"):
            raise ValueError(f"{where}: row {position} has no chat messages in 'prompt' (build it with `fspo data`)")
        _ground_truth(row)


def score_record(row: dict, responses: Sequence[str]) -> dict:
    """Score each sampled response with `fspo.scores.compute_score`; the row's metrics are their means."""
    from fspo.scores import compute_score

    extra_info = dict(row.get("extra_info") or {})
    per_sample = [compute_score(row["data_source"], text, _ground_truth(row), extra_info) for text in responses]
    means = {name: sum(float(s[name]) for s in per_sample) / len(per_sample) for name in METRICS}
    return {**means, "sample_scores": [float(s["score"]) for s in per_sample]}


def read_records(path: str | Path) -> list[dict]:
    """Records of a predictions JSONL; a half-written last line (interrupted write) is dropped."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def score_records(records: Sequence[dict]) -> dict:
    """Mean of each metric over rows (each row already averaged over its samples), and the row count."""
    if not records:
        return {**{name: math.nan for name in METRICS}, "n": 0}
    return {**{name: sum(r[name] for r in records) / len(records) for name in METRICS}, "n": len(records)}


def supported_step_rate(records: Sequence[dict], verifier, threshold: float = SUPPORT_THRESHOLD) -> dict:
    """Share of verifiable reasoning steps that the evidence supports, over evidence-carrying records.

    Every (evidence, step) pair goes to the verifier in one `score` call so model backends can batch them.
    A step is supported when its score is >= `threshold`; a NaN score (unverifiable) counts in neither part.

    Returns:
        ``{"supported_step_rate", "supported_steps", "verified_steps", "unverifiable_steps"}``; the rate is NaN
        when no step could be verified.
    """
    from fspo.steps import reasoning_steps

    pairs = []
    for record in records:
        evidence = record.get("evidence") or ""
        if not evidence:
            continue
        for response in record["responses"]:
            pairs += [(evidence, step.text) for step in reasoning_steps(response)]
    from fspo.reward import verdicts_from_scores  # the rule training labels steps by

    verdicts = verdicts_from_scores([float(s) for s in verifier.score(pairs)], threshold) if pairs else []
    supported, verified = verdicts.count(1), len(verdicts) - verdicts.count(0)
    return {
        "supported_step_rate": supported / verified if verified else math.nan,
        "supported_steps": supported,
        "verified_steps": verified,
        "unverifiable_steps": verdicts.count(0),
    }


def evaluate_benchmark(
    generator: Generator,
    tokenizer,
    rows: Sequence[dict],
    predictions_path: str | Path | None = None,
    prompt_format: str | None = None,
    batch_size: int = 8,
    description: str = "evaluating",
    evidence_key: str = "evidence",
) -> tuple[list[dict], int]:
    """Generate and score the rows not yet in `predictions_path`, appending their records to it.

    Args:
        generator: From [`build_generator`].
        tokenizer: The model's tokenizer (renders the prompts).
        rows: Benchmark rows in verl's RL format; a row's position is its key in the JSONL.
        predictions_path: JSONL to resume from and append to; None keeps everything in memory.
        prompt_format: Chat template override (see `fspo.data.templates`); None uses the model's own.
        batch_size: Rows generated between two appends to the JSONL.
        description: Progress bar label.
        evidence_key: Where a row's evidence is: ``extra_info[evidence_key]`` or that column (as in training).

    Returns:
        All records of `rows` in row order, and how many rows were generated by this call.
    """
    done = {r["index"]: r for r in read_records(predictions_path)} if predictions_path else {}
    todo = [i for i in range(len(rows)) if i not in done]
    prompts = render_prompts(tokenizer, [rows[i] for i in todo], prompt_format) if todo else []
    if predictions_path:
        Path(predictions_path).parent.mkdir(parents=True, exist_ok=True)
    with tqdm(total=len(rows), initial=len(rows) - len(todo), desc=description, unit="row") as bar:
        for start in range(0, len(todo), batch_size):
            indices, batch_prompts = todo[start : start + batch_size], prompts[start : start + batch_size]
            new_records = []
            for index, prompt, responses in zip(indices, batch_prompts, generator.generate(batch_prompts)):
                row = rows[index]
                new_records.append(
                    {
                        "index": index,
                        "data_source": row["data_source"],
                        "prompt": prompt,
                        "ground_truth": _ground_truth(row),
                        "evidence": _evidence_text(row, evidence_key),
                        "responses": list(responses),
                        **score_record(row, responses),
                    }
                )
            if predictions_path:
                with open(predictions_path, "a", encoding="utf-8") as handle:
                    handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in new_records)
            done.update((r["index"], r) for r in new_records)
            bar.update(len(new_records))
    return [done[i] for i in range(len(rows)) if i in done], len(todo)


def evaluate_model(
    model_dir: str | Path,
    rows: Sequence[dict],
    *,
    predictions_path: str | Path | None = None,
    prompt_format: str | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    max_new_tokens: int = 1024,
    samples: int = 1,
    batch_size: int = 8,
    seed: int = 0,
    backend: str = "auto",
    verifier=None,
    threshold: float = SUPPORT_THRESHOLD,
    generator: Generator | None = None,
    description: str | None = None,
    evidence_key: str = "evidence",
) -> dict:
    """Evaluate one model directory on one benchmark's rows.

    Returns:
        Mean ``score``, ``acc``, ``em``, ``f1``, ``format_ok`` over rows (pass@1 averaged over `samples`),
        ``n`` rows, ``generated`` (rows generated by this call, the rest came from `predictions_path`), and
        with a `verifier` the ``supported_step_rate`` of the reasoning on evidence-carrying rows.
    """
    check_rows(rows)
    if generator is None:
        settings = GenerationSettings(temperature, top_p, max_new_tokens, samples, batch_size, seed)
        generator = build_generator(model_dir, settings, backend)
    records, generated = evaluate_benchmark(
        generator, generator.tokenizer, rows, predictions_path, prompt_format, batch_size,
        description=description or Path(model_dir).name, evidence_key=evidence_key,
    )
    metrics = {**score_records(records), "generated": generated}
    if verifier is not None:
        metrics.update(supported_step_rate(records, verifier, threshold))
    return metrics
