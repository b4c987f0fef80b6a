"""What FSPO adds to each rollout's ``reward_extra_info``, and the ``fspo/*`` metrics the trainer makes of it.

The reward manager (:mod:`fspo.training.reward`, in verl's reward workers) and the trainer (:mod:`fspo.training.trainer`, in
verl's task runner) meet only here: the keys, the label string's format and the metric names are
written in this module alone. Each metric's meaning is in :data:`fspo.config.metrics.METRICS`, which the docs'
metrics table is made from; a test holds its names equal to those :func:`update_metrics` and the trainer log.

verl carries ``reward_extra_info`` values as one scalar or string per rollout and requires the same keys
for every rollout, so each rollout reports every :class:`RolloutStats` field (``fspo_<field>``) and its
token labels travel as a string under :data:`LABELS_KEY`: run-length encoded (:func:`encode_labels`),
one part per output of an agent run joined by :data:`OUTPUT_SEPARATOR`. verl scores an agent run's
last output and copies its ``reward_extra_info`` to every output of the run; the trainer takes each
row's own part (:func:`rows_labels_and_stats`) and counts the run's numbers once.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fspo.token_labels import LABEL_VALUES

logger = logging.getLogger(__name__)

LABELS_KEY = "fspo_labels"
# Joins the run-length labels of an agent run's outputs ("," and "x" belong to encode_labels).
OUTPUT_SEPARATOR = ";"
_RUN = re.compile(r"(-1|0|1)x([1-9][0-9]*)")
_STAT_PREFIX = "fspo_"


@dataclass
class RolloutStats:
    """One rollout's FSPO numbers; each travels as ``reward_extra_info["fspo_<field>"]``."""

    steps: float = 0.0  # reasoning steps found
    supported: float = 0.0  # steps the verifier supported (+1)
    unsupported: float = 0.0  # steps it did not (-1)
    unverifiable: float = 0.0  # steps it could not score (NaN: nothing to check, or failed_steps) -> 0
    failed_steps: float = 0.0  # of those, steps whose pair the verifier failed on alone (an OOM row, no verdict)
    has_evidence: float = 0.0  # 1 when the row carries evidence
    labelled: float = 0.0  # 1 when the rollout got step labels (evidence, closed reasoning, verifier ok)
    verifier_failed: float = 0.0  # 1 when the verifier raised for this rollout -> labels 0
    verifier_seconds: float = 0.0  # how long this rollout's reward waited on the verifier
    verified: float = 0.0  # 1 when the verifier scored this rollout's steps
    verifier_ray_gpu: float = 0.0  # 1 when the process that verified it holds a GPU Ray assigned it
    step_reward: float = 0.0  # what fspo.mode adds to the outcome score (fspo.methods.reward_modes)
    correct: float = 0.0  # 1 when the answer is right (the scorer's acc, else its score, >= 0.5)
    flawed_positive: float = 0.0  # 1 for a right answer with an unsupported step (FAPO's flawed positive)
    outcome_score: float = 0.0  # the scorer's score before the step reward
    scorer_timeout: float = 0.0  # 1 when the outcome scorer passed fspo.scorer_timeout_s (scored 0)

    def as_info(self) -> dict[str, float]:
        """The ``reward_extra_info`` entries of these numbers."""
        return {_STAT_PREFIX + name: float(value) for name, value in dataclasses.asdict(self).items()}

    @classmethod
    def from_info(cls, info: Mapping) -> RolloutStats:
        """The numbers in a rollout's ``reward_extra_info`` (0 for a missing or empty entry)."""
        return cls(**{f.name: float(info.get(_STAT_PREFIX + f.name) or 0.0) for f in dataclasses.fields(cls)})


# Every key a rollout's reward_extra_info holds besides the outcome scorer's own.
STAT_KEYS = tuple(_STAT_PREFIX + f.name for f in dataclasses.fields(RolloutStats))


def encode_labels(labels: Sequence[int]) -> str:
    """Run-length encode labels as a string, e.g. `[0, 0, 1, -1]` -> `"0x2,1x1,-1x1"`; `[]` -> `""`."""
    runs: list[str] = []
    previous, count = None, 0
    for label in labels:
        label = int(label)
        if label not in LABEL_VALUES:
            raise ValueError(f"labels must be -1, 0 or 1, got {label}")
        if label == previous:
            count += 1
            continue
        if previous is not None:
            runs.append(f"{previous}x{count}")
        previous, count = label, 1
    if previous is not None:
        runs.append(f"{previous}x{count}")
    return ",".join(runs)


def decode_labels(encoded: str, length: int | None = None) -> list[int]:
    """Inverse of `encode_labels`.

    Args:
        encoded: A string made by `encode_labels`.
        length: If given, the number of labels expected; a different number raises (no padding or cutting:
            a mismatch means labels and tokens got out of step).

    Raises:
        ValueError: On a malformed run (naming it) or a length mismatch.
        TypeError: If `encoded` is not a str.
    """
    if not isinstance(encoded, str):
        raise TypeError(f"encoded labels must be a str, got {type(encoded).__name__}")
    labels: list[int] = []
    if encoded:
        for position, run in enumerate(encoded.split(",")):
            match = _RUN.fullmatch(run)
            if match is None:
                raise ValueError(
                    f"malformed label run {run!r} at position {position} in {encoded[:80]!r}: "
                    "expected '<label>x<count>' with label -1, 0 or 1 and a positive count"
                )
            count = int(match.group(2))
            # Check before allocating: a corrupt run such as "1x99999999999" must not exhaust memory.
            if length is not None and len(labels) + count > length:
                raise ValueError(f"encoded labels hold more than {len(labels) + count - 1} labels, expected {length}")
            labels.extend([int(match.group(1))] * count)
    if length is not None and len(labels) != length:
        raise ValueError(f"encoded labels hold {len(labels)} labels, expected {length}")
    return labels


def encode_outputs(labels_of_outputs: Sequence[Sequence[int]]) -> str:
    """The :data:`LABELS_KEY` value of an agent run: each output's labels encoded, joined by ``OUTPUT_SEPARATOR``."""
    return OUTPUT_SEPARATOR.join(encode_labels(labels) for labels in labels_of_outputs)


def sample_info(extra_fields) -> Mapping:
    """The reward manager's ``reward_extra_info`` from one sample's ``extra_fields`` ({} when absent)."""
    if isinstance(extra_fields, Mapping):
        info = extra_fields.get("reward_extra_info", {})
        return info if isinstance(info, Mapping) else {}
    return {}


def output_index(key: str) -> int | None:
    """Which output of its agent run a row is, from its TransferQueue key ``{uid}_{session_id}_{index}``.

    ``None`` when the key has another form (a custom agent-loop manager): the row is then taken to be
    the run's last output, the one verl scores.
    """
    tail = str(key).rsplit("_", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else None


def rows_labels_and_stats(
    infos: Sequence[Mapping], keys: Sequence[str], padding: Sequence[bool]
) -> tuple[list[str], list[Mapping], int]:
    """Each row's own run-length labels, the infos whose FSPO numbers count, and the rows rejected.

    A row takes the part of the labels string at its own output index; the run's numbers are counted
    once, on its last output. Rows that verl added to pad the batch (tag ``is_padding``, a copy of
    sample 0's fields) get no labels and count nowhere, as in verl's own metrics. A row whose index has
    no part is rejected.
    """
    texts: list[str] = []
    counted: list[Mapping] = []
    rejects = 0
    for row, (info, key, is_pad) in enumerate(zip(infos, keys, padding)):
        if is_pad:
            texts.append("")
            continue
        parts = str(info.get(LABELS_KEY, "") or "").split(OUTPUT_SEPARATOR)
        index = output_index(key)
        index = len(parts) - 1 if index is None else index
        if index >= len(parts):
            rejects += 1
            logger.warning(
                "fspo: ignoring the step labels of sample %d: output %d of a run with %d labelled outputs",
                row,
                index,
                len(parts),
            )
            texts.append("")
            continue
        texts.append(parts[index])
        if index == len(parts) - 1:
            counted.append(info)
    return texts, counted, rejects


def step_metrics(infos: Sequence[Mapping]) -> dict[str, float]:
    """The ``fspo/*`` metrics of one actor update from its counted rollouts' ``reward_extra_info``."""
    stats = [RolloutStats.from_info(info) for info in infos]

    def total(name: str) -> float:
        return float(sum(getattr(s, name) for s in stats))

    rollouts = len(stats)
    with_evidence = total("has_evidence")
    judged = total("supported") + total("unsupported")
    steps = total("steps")
    verified = total("verified")
    metrics = {
        # The rollouts these numbers are over (pad rows and earlier outputs of an agent run excluded).
        "fspo/rollouts": float(rollouts),
        "fspo/evidence_rollout_frac": with_evidence / rollouts if rollouts else 0.0,
        "fspo/steps_per_response": steps / with_evidence if with_evidence else 0.0,
        "fspo/supported_step_rate": total("supported") / judged if judged else 0.0,
        "fspo/unverifiable_step_rate": total("unverifiable") / steps if steps else 0.0,
        # Rollouts with evidence that got no labels: no closed <think>, no steps, or a verifier failure.
        "fspo/unverifiable_rollout_rate": (with_evidence - total("labelled")) / with_evidence if with_evidence else 0.0,
        "fspo/verifier_failures": total("verifier_failed"),
        # Rollouts the verifier scored (with verifier_failures: the rollouts sent to it; fspo.training.verifier_loss).
        "fspo/verified_rollouts": verified,
        # Steps of verified rollouts whose pair the verifier failed on alone (NaN, label 0), and the same as
        # rollouts' worth: each verified rollout counts the share of its steps that failed (fspo.training.verifier_loss).
        "fspo/verifier_failed_steps": total("failed_steps"),
        "fspo/verifier_failed_step_rollouts": float(
            sum(s.failed_steps / s.steps for s in stats if s.verified and s.steps)
        ),
        # Mean time a rollout's reward waited on the (batched) verifier.
        "fspo/verifier_seconds": total("verifier_seconds") / with_evidence if with_evidence else 0.0,
        "fspo/step_reward_mean": total("step_reward") / rollouts if rollouts else 0.0,
        # Rollouts whose outcome scorer passed fspo.scorer_timeout_s (scored 0).
        "fspo/scorer_timeouts": total("scorer_timeout"),
        # FAPO's flawed positives (right answer, an unsupported step) among the right answers, in every mode.
        "fspo/flawed_positive_rate": total("flawed_positive") / total("correct") if total("correct") else 0.0,
    }
    if verified:
        # Share of verified rollouts whose verifier ran in a process Ray gave a GPU (colocated / ray placement).
        # Absent when nothing was verified: verl averages the actor updates of a step, and a 0.0 there would
        # halve a true 1.0.
        metrics["fspo/verifier_ray_gpu_frac"] = total("verifier_ray_gpu") / verified
    return metrics


def update_metrics(infos: Sequence[Mapping], flip: Mapping[str, float], rejected_rows: int) -> dict[str, float]:
    """Every ``fspo/*`` metric of one actor update: the rollouts' numbers (:func:`step_metrics`), the flip's
    (:func:`fspo.advantage.flip_stats`) and the rows whose labels were rejected."""
    return {
        **step_metrics(infos),
        **{f"fspo/{name}": value for name, value in flip.items()},
        "fspo/rejected_label_rows": float(rejected_rows),
    }


def rollout_groups(
    keys: Sequence[str], infos: Sequence[Mapping], padding: Sequence[bool]
) -> list[list[tuple[bool, bool]]]:
    """Each prompt's rollouts as ``(correct, flawed_positive)``, from a V1 batch's row keys and ``reward_extra_info``.

    Rows are keyed ``<uid>_<rollout>_<output>``; the outputs of one agent run share its numbers and count once,
    verl's pad rows not at all.
    """
    groups: dict[str, dict[str, tuple[bool, bool]]] = {}
    for key, info, is_pad in zip(keys, infos, padding):
        if is_pad:
            continue
        uid, _, rest = str(key).partition("_")
        run = rest.rsplit("_", 1)[0]
        stats = RolloutStats.from_info(info)
        groups.setdefault(uid, {})[run] = (bool(stats.correct), bool(stats.flawed_positive))
    return [list(runs.values()) for runs in groups.values()]
