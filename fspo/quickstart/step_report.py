"""Per-run step figures on synthetic-world answers: the independent judge next to the training verifiers.

A policy trained against a verifier learns to please it; copying evidence sentences verbatim pleases the
``lexical`` verifier without any reasoning. So a run is reported by three views of the same steps:

- ``hallucinated_step_rate``: the share of claim steps the world judge
  (:mod:`fspo.data.world_judge`) finds contradicted by the world's facts;
- ``supported_step_rate`` per verifier (``lexical`` as the quickstart trains with it: sentence unit,
  threshold 1.0; ``embedding`` at 0.5): the share of steps each scores as supported;
- ``copy_rate``: the share of steps that are verbatim substrings of the evidence;
- ``flawed_positive_rate``: the share of right answers (exact match, the outcome scorer's ``acc``) that
  hold a step the world judge finds contradicted: FAPO's "flawed positives", the answers outcome-only
  reward pays for although their reasoning is wrong (answers whose sample carries ``ground_truth``);
- ``unchained_positive_rate``: the share of right answers whose reasoning does not state every hop of the
  gold chain as a supported step (flawed positives, and right answers reached by a shortcut or a guess).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from fspo.config.calibrated_thresholds import calibrated_threshold
from fspo.data.synthetic import DATA_SOURCE
from fspo.data.world_judge import CONTRADICTED, NOT_A_CLAIM, SUPPORTED, build_world, judge_step
from fspo.steps import reasoning_steps
from fspo.training.outcome import compute_score
from fspo.utils.input_files import read_jsonl
from fspo.utils.record_schemas import ValidationSample

# The verifiers as the quickstart trains with `lexical` (fspo.quickstart.cli.VERIFIER) and `embedding` at the
# config's default threshold.
TRAINING_VERIFIERS = {
    "lexical": {"name": "lexical", "evidence_unit": "sentence", "threshold": calibrated_threshold("lexical")},
    "embedding": {"name": "embedding", "threshold": calibrated_threshold("embedding")},
}
VERIFIER_THRESHOLDS = {name: settings["threshold"] for name, settings in TRAINING_VERIFIERS.items()}


def is_copy(step: str, evidence: str) -> bool:
    """Whether a step is a verbatim piece of the evidence (ignoring a trailing period and outer spaces)."""
    text = step.strip().rstrip(".").strip()
    return bool(text) and text in evidence


def judge_counts(samples: Iterable[dict]) -> dict[str, int]:
    """Steps by the world judge's verdict, and verbatim copies, over ``{response, evidence, gold_facts}`` samples."""
    counts = {SUPPORTED: 0, CONTRADICTED: 0, NOT_A_CLAIM: 0, "copies": 0, "steps": 0}
    for sample in samples:
        world = build_world(sample["evidence"], sample.get("gold_facts") or ())
        for step in reasoning_steps(sample["response"]):
            counts[judge_step(step.text, world).verdict] += 1
            counts["copies"] += is_copy(step.text, sample["evidence"])
            counts["steps"] += 1
    return counts


def is_right(response: str, ground_truth) -> bool:
    """Whether a response's answer is right: the outcome scorer's exact match (``acc``), which is FAPO's
    "correct" (the final answer equals the gold one); a response without an ``<answer>`` block is not."""
    return compute_score(DATA_SOURCE, response, ground_truth)["acc"] == 1.0


def flawed_positives(samples: Iterable[dict]) -> dict:
    """Right answers, those of them holding a judge-contradicted step (flawed positives), and those whose
    reasoning does not state every hop of the gold chain as a supported step (unchained positives: a
    contradicted step, a shortcut, a guess, or no closed reasoning); over samples with ``ground_truth``.

    Each rate is None when no answer is right; samples without ``ground_truth`` are left out.
    """
    right = flawed = unchained = 0
    for sample in samples:
        if sample.get("ground_truth") is None or not is_right(sample["response"], sample["ground_truth"]):
            continue
        right += 1
        world = build_world(sample["evidence"], sample.get("gold_facts") or ())
        judged = [judge_step(step.text, world) for step in reasoning_steps(sample["response"])]
        flawed += any(judgment.verdict == CONTRADICTED for judgment in judged)
        stated = {claim for judgment in judged if judgment.verdict == SUPPORTED for claim in judgment.claims}
        unchained += not world.gold <= stated
    return {
        "right_answers": right,
        "flawed_positives": flawed,
        "flawed_positive_rate": flawed / right if right else None,
        "unchained_positives": unchained,
        "unchained_positive_rate": unchained / right if right else None,
    }


def verifier_supported_rate(name: str, samples: Sequence[dict], threshold: float | None = None) -> float | None:
    """The share of steps verifier ``name`` scores at or above its threshold (unverifiable steps left out)."""
    # Lazy: the verifiers import verl (seconds); the quickstart's own report asks for none.
    from fspo.config.verifier import verifier_config
    from fspo.verifiers import build_verifier

    pairs = [(s["evidence"], step.text) for s in samples for step in reasoning_steps(s["response"])]
    if not pairs:
        return None
    verifier = build_verifier(verifier_config(TRAINING_VERIFIERS.get(name, {"name": name})))
    try:
        scores = [x for x in verifier.score(pairs) if not math.isnan(x)]
    finally:
        verifier.close()
    limit = VERIFIER_THRESHOLDS.get(name, 0.5) if threshold is None else threshold
    return sum(x >= limit for x in scores) / len(scores) if scores else None


def step_report(samples: Sequence[dict], verifiers: Sequence[str] = ("lexical", "embedding")) -> dict:
    """The run's step figures (see the module docstring); a rate is None where there is nothing to divide.

    Args:
        samples: one dict per answer: ``response`` (the decoded text), ``evidence`` and ``gold_facts``
            (the synthetic row's ``extra_info``), and ``ground_truth`` for the flawed-positive rate.
        verifiers: the training verifiers to report a supported-step rate for.
    """
    counts = judge_counts(samples)
    claims = counts[SUPPORTED] + counts[CONTRADICTED]
    report = {
        "answers": len(samples),
        "steps": counts["steps"],
        "judged_claims": claims,
        "hallucinated_step_rate": counts[CONTRADICTED] / claims if claims else None,
        "copy_rate": counts["copies"] / counts["steps"] if counts["steps"] else None,
        **flawed_positives(samples),
    }
    for name in verifiers:
        report[f"{name}_supported_step_rate"] = verifier_supported_rate(name, samples)
    return report


def validation_samples(dump: str | Path, rows: Sequence[dict]) -> list[dict]:
    """Pairs verl's validation dump (``trainer.validation_data_dir/<step>.jsonl``) with the rows it answered.

    A dumped record carries the decoded prompt, not the row, so each is matched to the synthetic row whose
    evidence its prompt contains; the record's answer F1 comes along (``f1``, None where verl dumped none), and
    the row's ``ground_truth``. Records of other data (no synthetic-world row) are left out.
    """
    worlds = [r for r in rows if r.get("data_source") == DATA_SOURCE and r.get("extra_info")]
    samples = []
    for record in read_jsonl(dump, schema=ValidationSample):
        row = next(
            (r for r in worlds if r["extra_info"]["evidence"] and r["extra_info"]["evidence"] in record["input"]), None
        )
        if row is not None:
            samples.append(
                {
                    "response": record["output"],
                    "evidence": row["extra_info"]["evidence"],
                    "gold_facts": list(row["extra_info"]["gold_facts"]),
                    "f1": record.get("f1"),
                    "ground_truth": (row.get("reward_model") or {}).get("ground_truth"),
                }
            )
    return samples
