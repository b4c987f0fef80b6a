"""Generate, score and (optionally) fact-check the responses of one model on one benchmark.

Predictions go to a JSONL file, one line per row with all its samples, appended as each batch finishes:
an interrupted evaluation resumes from that file and never generates a finished row again. Beside it,
``<file>.provenance.json`` records what produced them (the model's fingerprint, prompt format, sampling
settings, backend): resuming with anything else is refused, naming what changed, and each record carries
its row's fingerprint, so a row whose data changed is generated again.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path

from tqdm.auto import tqdm

from fspo.evaluation.answer_judge import judgments_path
from fspo.evaluation.generation import GenerationSettings, Generator, build_generator, render_prompts
from fspo.evaluation.records import ends_mid_line, read_records
from fspo.evidence import row_evidence
from fspo.steps import reasoning_steps
from fspo.token_labels import verdicts_from_scores
from fspo.training.outcome import METRIC_KEYS as METRICS
from fspo.training.outcome import compute_score, scorer_of, unknown_source_message
from fspo.training.time_limit import ScorerTimeout, TimeLimitedScorer
from fspo.utils.atomic_file import write_text_atomically
from fspo.utils.input_files import read_json
from fspo.utils.record_schemas import Prediction, Provenance

SUPPORT_THRESHOLD = 0.5
# Files up to this size are hashed whole (configs, tokenizer, weight index); larger ones (the weights)
# count by name, size and modification time, so fingerprinting a 15 GB model reads a few MB.
SMALL_FILE_BYTES = 1 << 22
# Seconds one scorer call may take (math-verify can spin for minutes on a hostile answer).
SCORER_TIMEOUT_S = 10.0


class ProvenanceError(ValueError):
    """Predictions on disk were produced by another model or other settings than the ones asked for."""


def model_fingerprint(model_dir: str | Path) -> str:
    """A short hash identifying a model folder's contents without reading its weights."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(model_dir).rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(str(path.relative_to(model_dir)).encode())
        if stat.st_size <= SMALL_FILE_BYTES:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        else:
            digest.update(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def row_fingerprint(row: dict) -> str:
    """A short hash of what a row's predictions depend on: its prompt, source, ground truth and extra_info."""
    content = {key: row.get(key) for key in ("prompt", "data_source", "reward_model", "extra_info")}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:16]


def provenance_path(predictions_path: str | Path) -> Path:
    predictions_path = Path(predictions_path)
    return predictions_path.with_name(predictions_path.stem + ".provenance.json")


# Keys of a provenance that must match to resume; `model_dir` is kept for people, a moved folder still resumes.
PROVENANCE_KEYS = (
    "model",
    "prompt_format",
    "backend",
    "temperature",
    "top_p",
    "top_k",
    "max_new_tokens",
    "samples",
    "seed",
)
# A provenance written before top_k was recorded: its predictions sampled with top_k 0 (off), which no option changed.
PROVENANCE_DEFAULTS = {"top_k": 0}


def check_provenance(predictions_path: str | Path, provenance: dict) -> None:
    """Record `provenance` beside new predictions, or raise :class:`ProvenanceError` if old ones differ."""
    predictions_path, sidecar = Path(predictions_path), provenance_path(predictions_path)
    if sidecar.exists():
        stored = {**PROVENANCE_DEFAULTS, **read_json(sidecar, schema=Provenance)}
        changed = [key for key in PROVENANCE_KEYS if stored.get(key) != provenance.get(key)]
        if not changed:
            return
        differences = ", ".join(f"{key} {stored.get(key)!r} -> {provenance.get(key)!r}" for key in changed)
        raise ProvenanceError(
            f"{predictions_path} holds predictions made with other settings ({differences}; they came from "
            f"{stored.get('model_dir')}): name this model differently (NAME=PATH), use another --output-dir, "
            "or delete that file and its .provenance.json to start over"
        )
    if read_records(predictions_path, Prediction):
        raise ProvenanceError(
            f"{predictions_path} holds predictions with no record of what produced them (an older fspo wrote "
            "it): use another --output-dir, or delete that file to start over"
        )
    write_text_atomically(sidecar, json.dumps(provenance, indent=2) + "\n")


def _ground_truth(row: dict):
    reward_model = row.get("reward_model") or {}
    if "ground_truth" not in reward_model:
        raise ValueError("row has no reward_model.ground_truth (was the parquet built by `fspo data`?)")
    ground_truth = reward_model["ground_truth"]
    return list(ground_truth) if isinstance(ground_truth, tuple) else ground_truth


def check_rows(rows: Sequence[dict], where: str = "rows") -> None:
    """Raise before any generation if a row lacks chat messages, a known data_source or a ground truth."""
    for position, row in enumerate(rows):
        source = row.get("data_source")
        if scorer_of(source) is None:
            raise ValueError(f"{where}: row {position}: {unknown_source_message(source)}")
        if not row.get("prompt"):
            raise ValueError(f"{where}: row {position} has no chat messages in 'prompt' (build it with `fspo data`)")
        _ground_truth(row)


def score_record(row: dict, responses: Sequence[str], scorer=None) -> dict:
    """Score each sampled response; the row's metrics are their means.

    Args:
        scorer: A `fspo.training.time_limit.TimeLimitedScorer` (a response it gives up on scores 0 and is counted in
            ``scorer_timeouts``); None scores in this process with `fspo.training.outcome.compute_score`, unlimited.
    """
    extra_info = row.get("extra_info") or {}
    per_sample, timeouts = [], 0
    for text in responses:
        kwargs = dict(
            data_source=row["data_source"], solution_str=text, ground_truth=_ground_truth(row), extra_info=extra_info
        )
        try:
            per_sample.append((scorer or compute_score)(**kwargs))
        except ScorerTimeout:
            timeouts += 1
            per_sample.append(dict.fromkeys(METRICS, 0.0))
    means = {name: sum(float(s[name]) for s in per_sample) / len(per_sample) for name in METRICS}
    return {**means, "sample_scores": [float(s["score"]) for s in per_sample], "scorer_timeouts": timeouts}


def score_records(records: Sequence[dict]) -> dict:
    """Mean of each metric over rows (each row already averaged over its samples), and the row count."""
    if not records:
        return {**{name: math.nan for name in METRICS}, "n": 0}
    return {**{name: sum(r[name] for r in records) / len(records) for name in METRICS}, "n": len(records)}


def supported_step_rate(records: Sequence[dict], verifier, threshold: float = SUPPORT_THRESHOLD) -> dict:
    """Share of verifiable reasoning steps that the evidence supports, over evidence-carrying records.

    Every response's steps go to the verifier in one `score_responses` call so model backends can batch them.
    A step is supported when its score is >= `threshold` (> for the backends whose authors label so); a NaN score (unverifiable) counts in neither part.

    Returns:
        ``{"supported_step_rate", "supported_steps", "verified_steps", "unverifiable_steps"}``; the rate is NaN
        when no step could be verified.
    """
    responses = [
        (record["evidence"], [step.text for step in reasoning_steps(response)])
        for record in records
        if record.get("evidence")
        for response in record["responses"]
    ]
    scores = [float(score) for scored in verifier.score_responses(responses) for score in scored]
    verdicts = verdicts_from_scores(scores, threshold, verifier.strict_threshold)  # the rule training labels by
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
    scorer=None,
) -> tuple[list[dict], int]:
    """Generate and score the rows not yet in `predictions_path`, appending their records to it.

    Args:
        generator: From [`build_generator`].
        tokenizer: The model's tokenizer (renders the prompts).
        rows: Benchmark rows in verl's RL format; a row's position is its key in the JSONL.
        predictions_path: JSONL to resume from and append to; None keeps everything in memory.
        prompt_format: Chat template override (see `fspo.training.prompt_formats`); None uses the model's own.
        batch_size: Rows generated between two appends to the JSONL.
        description: Progress bar label.
        evidence_key: Where a row's evidence is: ``extra_info[evidence_key]`` or that column (as in training).
        scorer: See `score_record`.

    Returns:
        All records of `rows` in row order, and how many rows were generated by this call.
    """
    keys = [row_fingerprint(row) for row in rows]
    stored = read_records(predictions_path, Prediction) if predictions_path else []

    # A record counts only for the row it was made from: a rebuilt data file regenerates its changed rows.
    def stale(record: dict) -> bool:
        return record["index"] < len(rows) and record.get("row_key") != keys[record["index"]]

    done = {r["index"]: r for r in stored if r["index"] < len(rows) and not stale(r)}
    # A stale record, or a last line cut short (which the next append would run into), rewrites the file.
    if predictions_path and (any(stale(r) for r in stored) or ends_mid_line(predictions_path)):
        kept = [r for r in stored if not stale(r)]
        write_text_atomically(predictions_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept))
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
                        "row_key": keys[index],
                        "data_source": row["data_source"],
                        "prompt": prompt,
                        "ground_truth": _ground_truth(row),
                        "evidence": row_evidence(row, evidence_key),
                        "responses": list(responses),
                        **score_record(row, responses, scorer),
                    }
                )
            if predictions_path:
                with open(predictions_path, "a", encoding="utf-8") as handle:
                    handle.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in new_records)
            done.update((r["index"], r) for r in new_records)
            bar.update(len(new_records))
    return [done[i] for i in range(len(rows)) if i in done], len(todo)


def provenance(model_dir: str | Path, prompt_format: str | None, generator) -> dict:
    """What the predictions of `generator` on `model_dir` depend on (see `PROVENANCE_KEYS`)."""
    settings = getattr(generator, "settings", None)
    return {
        "model": model_fingerprint(model_dir),
        "model_dir": str(Path(model_dir).resolve()),
        "prompt_format": prompt_format,
        "backend": type(generator).__name__,
        **{
            key: getattr(settings, key, None)
            for key in ("temperature", "top_p", "top_k", "max_new_tokens", "samples", "seed")
        },
    }


def evaluate_model(
    model_dir: str | Path,
    rows: Sequence[dict],
    *,
    predictions_path: str | Path | None = None,
    prompt_format: str | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
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
    judge=None,
) -> dict:
    """Evaluate one model directory on one benchmark's rows.

    Returns:
        Mean ``score``, ``acc``, ``em``, ``f1``, ``format_ok`` over rows (pass@1 averaged over `samples`),
        ``n`` rows, ``generated`` (rows generated by this call, the rest came from `predictions_path`),
        ``scorer_timeouts`` (responses scored 0 because the scorer passed its time limit), and with a
        `verifier` the ``supported_step_rate`` of the reasoning on evidence-carrying rows, and with a `judge`
        (`fspo.evaluation.answer_judge.AnswerJudge`) its ratios on TruthfulQA / HalluQA rows, with ``judged``
        and ``unjudged`` row counts; its verdicts are cached beside `predictions_path`.

    Raises:
        ProvenanceError: `predictions_path` holds predictions of another model, prompt format or settings.
    """
    check_rows(rows)
    if generator is None:
        settings = GenerationSettings(temperature, top_p, max_new_tokens, samples, batch_size, seed, top_k)
        generator = build_generator(model_dir, settings, backend)
    if predictions_path:
        check_provenance(predictions_path, provenance(model_dir, prompt_format, generator))
    scorer = TimeLimitedScorer(timeout_s=SCORER_TIMEOUT_S)
    try:
        records, generated = evaluate_benchmark(
            generator,
            generator.tokenizer,
            rows,
            predictions_path,
            prompt_format,
            batch_size,
            description=description or Path(model_dir).name,
            scorer=scorer,
            evidence_key=evidence_key,
        )
    finally:
        scorer.close()
    metrics = {
        **score_records(records),
        "generated": generated,
        "scorer_timeouts": sum(int(r.get("scorer_timeouts", 0)) for r in records),
    }
    if verifier is not None:
        metrics.update(supported_step_rate(records, verifier, threshold))
    if judge is not None:
        metrics.update(
            judge.judge_records(
                records,
                rows,
                judgments_path(predictions_path) if predictions_path else None,
                description=f"judging {description or Path(model_dir).name}",
            )
        )
    return metrics
