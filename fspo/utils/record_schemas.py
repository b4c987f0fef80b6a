"""One schema per kind of record the commands read back, validated on read by :mod:`fspo.utils.input_files` (its
``schema=`` argument), so a field that does not fit is refused as one line naming the file, the line and the
field, not met later as a ``TypeError`` or written on into the next file.

msgspec, not pydantic or hand-written checks: verl already depends on it (nothing new to install), it
validates plain dicts against typed classes in C (a predictions file of thousands of records costs
milliseconds), it is strict where we need it (``strict=True``: no "1" for 1, no 1 for true) and its error is
one line with the field's path (``Expected `float`, got `null` - at `$.sample_scores[0]```); pydantic's is
several lines per error. Numbers take their range and dtype from :mod:`fspo.config.numeric_options`, so NaN, inf and
values beyond float32 or int64 fail as they do on the command line. Unknown fields are allowed: a record may
carry more than its readers use (a newer writer's fields).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

import msgspec

from fspo.config.numeric_options import NON_NEGATIVE_COUNT, PROBABILITY, SCORE

Score = SCORE.schema()
Index = NON_NEGATIVE_COUNT.schema()
Texts = Union[str, list[str]]


class Prediction(msgspec.Struct):
    """A record of ``<output-dir>/predictions/<model>__<benchmark>.jsonl`` (``fspo evaluate``)."""

    index: Index
    prompt: str
    responses: list[str]
    sample_scores: list[Score]
    row_key: Optional[str] = None
    data_source: Optional[str] = None
    evidence: Optional[str] = None
    score: Optional[Score] = None
    acc: Optional[Score] = None
    em: Optional[Score] = None
    f1: Optional[Score] = None
    format_ok: Optional[Score] = None
    scorer_timeouts: Optional[Index] = None


class Verdict(msgspec.Struct):
    """A record of the answer judge's verdict cache (``<model>__<benchmark>.judgments.jsonl``)."""

    key: str
    verdict: bool
    judge_model: Optional[str] = None
    reply: Optional[str] = None


class Pair(msgspec.Struct):
    """A row of ``fspo fdpo build-pairs``' pairs file, read by ``fspo fdpo train``."""

    prompt: str
    chosen: str
    rejected: str
    fdpo_margin_weight: PROBABILITY.schema()
    chosen_hallucinated: Optional[Literal[0, 1]] = None
    rejected_hallucinated: Optional[Literal[0, 1]] = None
    flipped: Optional[bool] = None
    chosen_score: Optional[Score] = None
    rejected_score: Optional[Score] = None


class LabelledClaim(msgspec.Struct):
    """A row of a labelled file (``fspo verify --labelled FILE``, ``fspo verifier train --data``)."""

    evidence: Texts
    claim: Texts
    label: Union[Literal[0, 1], bool]


class ValidationSample(msgspec.Struct):
    """A record of verl's validation dump (``trainer.validation_data_dir/<step>.jsonl``), read by the step report."""

    input: str
    output: str
    f1: Optional[Score] = None
    score: Optional[Score] = None


class TrainerMetrics(msgspec.Struct):
    """A line of the trainer's metrics JSONL (``fspo quickstart``): a step and its metrics, which may be NaN (a
    metric over no rollouts), so only their kind is checked."""

    step: Index
    data: dict[str, Any] = {}


class Provenance(msgspec.Struct):
    """``<predictions>.provenance.json``: what a predictions file was made with (``fspo evaluate`` resumes only
    under the same)."""

    model: Optional[str] = None
    model_dir: Optional[str] = None
    prompt_format: Optional[str] = None
    backend: Optional[str] = None
    temperature: Optional[Score] = None
    top_p: Optional[Score] = None
    max_new_tokens: Optional[Index] = None
    samples: Optional[Index] = None
    seed: Optional[Index] = None


def verify_row(evidence_key: str, response_key: str) -> type:
    """The schema of ``fspo verify``'s input rows, whose two keys the command line names: evidence (a text, a
    list of texts, or null for none) and the response's text."""
    return msgspec.defstruct(
        "VerifyRow",
        [(evidence_key, Optional[Texts]), (response_key, str)],
    )
