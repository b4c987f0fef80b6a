"""Whether a parquet file can train: its rows, data sources, scorers, evidence and prompt lengths.

A file that cannot train gets its problems named: besides missing columns and sources without a scorer,
rows that do not fit :class:`PromptRow`, the schema of verl's RL rows (:func:`row_problems`: what verl's
``RLHFDataset`` or the chat template would stop on or drop), evidence that is there but in a form the
reward manager cannot read (FSPO would silently skip those rows), and empty ground truths. Evidence is
found as training finds it: ``extra_info[evidence_key]``, else the column of that name.

The trainer runs :func:`scan_file` on ``data.train_files`` and ``data.val_files`` before Ray starts
(:func:`fspo.training.config_checks.check_data_files`); ``fspo data check`` (:mod:`fspo.data.check`) prints
the same report, so a problem found there is the problem a run would stop on.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import msgspec

from fspo.evidence import evidence_text, row_evidence
from fspo.training.outcome import known_sources, scorer_of
from fspo.training.prompt_formats import count_prompt_tokens
from fspo.utils.field_text import text_list
from fspo.utils.input_files import InputFileError, read_parquet, read_parquet_schema

REQUIRED_COLUMNS = ("prompt", "data_source", "reward_model")
# Names under which datasets keep evidence: this project's and the released FSPO files'. A file
# whose evidence sits under one of them while another key is configured would train as plain GRPO.
EVIDENCE_NAMES = ("evidence", "knowledge")
# How many row positions a message lists.
FIRST_ROWS = 5


class ChatMessage(msgspec.Struct):
    """A message of a row's ``prompt``, as verl hands it to the chat template (``RLHFDataset.__getitem__`` passes
    the messages on as they are, verl/utils/dataset/rl_dataset.py:386-389; the agent loop renders them,
    verl/utils/tokenizer/continuous_token.py:233).

    ``content`` is text: the ChatML templates (the models' own, ``qwen-base``, ``qwen-instruct``, ``chatml-think``,
    ``qwen3``) fail on null, a number or a list of parts, and ``llama-instruct`` and ``passthrough`` write its
    Python form (``None``, ``5``) into the prompt. ``role`` is one every template renders as a turn: ``qwen-base``
    and Qwen3's own template drop a message of any other role from the prompt, and a null role fails the others.
    """

    role: Literal["system", "user", "assistant"]
    content: str


class RewardModel(msgspec.Struct):
    """A row's ``reward_model``: the scorer compares the response with ``ground_truth`` (text, a number, a list of
    accepted answers or a mapping, never null)."""

    ground_truth: Union[str, int, float, bool, list[Any], dict[str, Any]]


class PromptRow(msgspec.Struct, kw_only=True):
    """A row of verl's RL parquet as training reads it (``data.train_files``/``val_files``) and ``fspo evaluate``
    reads it; other columns may be there.

    ``extra_info`` is a mapping or null: ``RLHFDataset.__getitem__`` turns null into ``{}`` and reads
    ``extra_info.get("index")`` (verl/utils/dataset/rl_dataset.py:400-402), so anything else stops it.
    """

    prompt: Annotated[list[ChatMessage], msgspec.Meta(min_length=1)]
    data_source: str
    reward_model: RewardModel
    extra_info: Optional[dict[str, Any]] = None


# What a row's value that does not fit PromptRow means, by where it is (msgspec's path, list positions dropped):
# what the rows have, and what then happens. ``{got}`` is what is there.
_TEMPLATE_FAILS = (
    "a chat template fails on it (verl then drops the row under data.filter_overlong_prompts, else its rollout "
    "stops) or writes its Python form into the prompt; store the message text as a string"
)
ROW_MISMATCHES = {
    "prompt": ("no prompt messages", ": there is nothing to roll out from"),
    "prompt[]": ("a prompt message that is {got}, not a {{role, content}} mapping", ": " + _TEMPLATE_FAILS),
    "prompt[].content": ("a prompt message whose content is {got}, not text", ": " + _TEMPLATE_FAILS),
    "prompt[].role": (
        "a prompt message whose role is {got}, not system, user or assistant",
        ": the chat templates render those turns only (qwen-base and Qwen3's own drop the message, a null role "
        "fails the others)",
    ),
    "data_source": ("data_source as {got}, not text", ": the reward manager picks the row's scorer by it"),
    "reward_model": ("no reward_model.ground_truth", ""),
    "reward_model.ground_truth": ("no reward_model.ground_truth", ""),
    "extra_info": (
        "extra_info as {got}, not a mapping",
        ": verl's RLHFDataset reads extra_info.get('index') and stops on the first such row",
    ),
}


@dataclass
class FileReport:
    """What :func:`scan_file` found in one file; ``problems`` empty means it can train."""

    path: str
    rows: int = 0
    sources: dict = field(default_factory=dict)  # data_source -> rows
    scorers: dict = field(default_factory=dict)  # data_source -> "fspo:<name>", "verl" or None
    evidence_key: str = "evidence"
    evidence_in_extra_info: int = 0
    evidence_in_column: int = 0
    evidence_chars: list = field(default_factory=list)  # per row with evidence
    evidence_tokens: list | None = None
    rows_without_evidence: list = field(default_factory=list)  # positions
    prompt_tokens: list | None = None
    prompts_over_limit: int = 0
    ground_truth_types: Counter = field(default_factory=Counter)
    problems: list = field(default_factory=list)

    @property
    def evidence_rows(self) -> int:
        return self.evidence_in_extra_info + self.evidence_in_column

    @property
    def can_train(self) -> bool:
        return not self.problems


def _first(positions: list[int]) -> str:
    shown = ", ".join(str(p) for p in positions[:FIRST_ROWS])
    return shown + (", ..." if len(positions) > FIRST_ROWS else "")


def _column(table, name: str) -> list:
    return table.column(name).to_pylist() if name in table.column_names else [None] * table.num_rows


def _get(mapping, key: str):
    return mapping.get(key) if isinstance(mapping, dict) else None


def _blank(value) -> bool:
    """No evidence stored at all: null, or an empty or whitespace-only string or list."""
    if value is None or (hasattr(value, "__len__") and not len(value)):
        return True
    if isinstance(value, str):
        return not value.strip()
    return isinstance(value, (list, tuple)) and not any(not _blank(item) for item in value)


# msgspec's names of what it found, as a message says them.
_FOUND = {
    "str": "text",
    "array": "a list",
    "object": "a mapping",
    "int": "an integer",
    "float": "a number",
    "bool": "true/false",
}
_MISMATCH = re.compile(r"got `(?P<type>\w+)`|Invalid enum value (?P<value>.+)|missing required field `(?P<field>\w+)`")


def mismatch(value, kind) -> tuple[str, str] | None:
    """Where ``value`` does not fit msgspec type ``kind`` (msgspec's path below it, list positions as ``[]``) and what
    is there (``null``, ``an integer``, ``'tool'``, ``without ground_truth``), or None when it fits."""
    try:
        msgspec.convert(value, kind, strict=True)
    except msgspec.ValidationError as error:
        reason, _, at = str(error).partition(" - at `$")
        found = _MISMATCH.search(reason)
        if found is None:  # a length: "Expected `array` of length >= 1"
            got = reason
        elif found["type"]:
            got = _FOUND.get(found["type"], found["type"])
        else:
            got = found["value"] or f"without {found['field']}"
        return re.sub(r"\[\d+\]", "[]", at.rstrip("`")), got
    return None


def row_mismatches(table, prompt_is_messages: bool) -> dict[tuple[str, str], list[int]]:
    """The positions of the rows that do not fit :class:`PromptRow`, by (where, what is there): ``("prompt[].content",
    "null")``. Each column is checked on its own, so a row is listed under every column that does not fit."""
    kinds = {info.name: info.type for info in msgspec.structs.fields(PromptRow)}
    if not prompt_is_messages:  # the column's type is the problem (_prompt_type_problem), said once
        kinds.pop("prompt")
    found: dict[tuple[str, str], list[int]] = {}
    for name, kind in kinds.items():
        for position, value in enumerate(_column(table, name)):
            problem = mismatch(value, kind)
            if problem is not None:
                found.setdefault((name + problem[0], problem[1]), []).append(position)
    return found


def row_problems(mismatches: dict[tuple[str, str], list[int]]) -> list[str]:
    """:func:`row_mismatches` as one line each, naming the first rows and what then happens.

    ``tests/test_bad_inputs.py`` holds the rows named equal to those verl's ``RLHFDataset`` and chat templates stop
    on or render otherwise than written.
    """
    problems = []
    for (place, got), positions in mismatches.items():
        subject, consequence = ROW_MISMATCHES.get(place, (f"field {place} as {{got}}", ""))
        hint = " (JSON text: parse it into a struct column)" if place == "extra_info" and got == "text" else ""
        problems.append(
            f"{len(positions)} rows have {subject.format(got=got)} (first: {_first(positions)}){consequence}{hint}"
        )
    return problems


def _prompt_type_problem(prompt_type) -> str | None:
    """verl reads ``prompt`` as a list of ``{role, content}`` messages."""
    import pyarrow as pa

    if pa.types.is_list(prompt_type) or pa.types.is_large_list(prompt_type):
        item = prompt_type.value_type
        if pa.types.is_struct(item) and {"role", "content"} <= {item.field(i).name for i in range(item.num_fields)}:
            return None
    return (
        f"column 'prompt' is {prompt_type}, not a list of {{role, content}} chat messages; put a rendered "
        "prompt in one user message and train with the passthrough template "
        "(actor_rollout_ref.model.custom_chat_template='${fspo_chat_template:passthrough}')"
    )


def scan_file(
    path: str | os.PathLike,
    evidence_key: str = "evidence",
    *,
    check_scorers: bool = True,
    check_evidence: bool = True,
    require_evidence: bool = False,
    tokenizer=None,
    prompt_format: str | None = None,
    max_prompt_length: int | None = None,
) -> FileReport:
    """Read the columns of a parquet file that training uses and report what would go wrong.

    Args:
        path: A parquet file in verl's RL format.
        evidence_key: Where a row's evidence is: ``extra_info[evidence_key]``, else the column of that name.
        check_scorers: Each data_source must have a scorer (off when a custom reward function scores).
        check_evidence: A file with no evidence under `evidence_key` but text under another usual name
            (``evidence``, ``knowledge``) is a problem: FSPO would silently become plain GRPO on it.
        require_evidence: Every row must have evidence (``fspo.require_evidence=true``).
        tokenizer: With one, evidence and prompt lengths are counted in its tokens.
        prompt_format: A :mod:`fspo.training.prompt_formats` format to render prompts with; None: the tokenizer's own.
        max_prompt_length: Prompts longer than this many tokens are counted (verl filters or rejects them).

    Returns:
        A :class:`FileReport`; a file that cannot train has ``problems``.
    """
    report = FileReport(path=str(path), evidence_key=evidence_key)
    local = Path(os.path.expanduser(str(path)))
    if not local.exists():
        report.problems.append("does not exist (build it with `fspo data ...`)")
        return report
    try:
        schema = read_parquet_schema(local)
    except InputFileError as error:
        report.problems.append(str(error).removeprefix(f"{local}: "))
        return report
    missing = [c for c in REQUIRED_COLUMNS if c not in schema.names]
    if missing:
        report.problems.append(
            f"lacks the column(s) {missing} that verl reads (it has {sorted(schema.names)}); "
            "write it with `fspo data ...` or add them in verl's RL format"
        )
        return report
    prompt_problem = _prompt_type_problem(schema.field("prompt").type)
    if prompt_problem:
        report.problems.append(prompt_problem)

    wanted = ["prompt", "data_source", "reward_model", "extra_info", *EVIDENCE_NAMES, evidence_key]
    try:
        table = read_parquet(local, columns=sorted({c for c in wanted if c in schema.names}))
    except InputFileError as error:  # a damaged file: its schema reads, its rows do not
        report.problems.append(str(error).removeprefix(f"{local}: "))
        return report
    report.rows = table.num_rows
    if not report.rows:
        report.problems.append("has no rows: verl would train on nothing")
        return report
    mismatches = row_mismatches(table, prompt_problem is None)
    report.problems += row_problems(mismatches)
    # Rows no chat template renders as written: named above, not rendered to count their tokens.
    unrendered = {row for (place, _), rows in mismatches.items() if place.startswith("prompt") for row in rows}

    sources = _column(table, "data_source")
    report.sources = dict(Counter(sources))
    report.scorers = {source: scorer_of(source) for source in report.sources}
    if check_scorers:
        for source, scorer in report.scorers.items():
            if scorer is None and isinstance(source, str):  # row_problems names a source that is not text
                rows = [i for i, s in enumerate(sources) if s == source]
                report.problems.append(
                    f"data_source {source!r} ({len(rows)} rows, first: {_first(rows)}) has no "
                    f"scorer; known: {', '.join(known_sources())} (any case) and verl's names "
                    "(openai/gsm8k, lighteval/MATH, HuggingFaceH4/MATH-500, ...)"
                )

    empty_truth = []  # a missing ground truth is row_problems'
    for position, reward_model in enumerate(_column(table, "reward_model")):
        truth = reward_model.get("ground_truth") if isinstance(reward_model, dict) else None
        report.ground_truth_types[type(truth).__name__ if truth is not None else "missing"] += 1
        if truth is not None and not text_list(truth):
            empty_truth.append(position)
    if empty_truth:
        report.problems.append(
            f"{len(empty_truth)} rows have an empty reward_model.ground_truth (first: "
            f"{_first(empty_truth)}): no answer can match it, so every rollout scores 0"
        )

    extra_infos, columns = _column(table, "extra_info"), _column(table, evidence_key)
    evidences, unusable = [], []
    for position, (extra_info, column) in enumerate(zip(extra_infos, columns)):
        # The reward manager's own lookup, and where it found the text.
        text = row_evidence({"extra_info": extra_info, evidence_key: column}, evidence_key)
        if text and evidence_text(extra_info, evidence_key):
            report.evidence_in_extra_info += 1
        elif text:
            report.evidence_in_column += 1
        else:
            report.rows_without_evidence.append(position)
            stored = [value for value in (_get(extra_info, evidence_key), column) if not _blank(value)]
            if stored:
                unusable.append((position, type(stored[0]).__name__))
        if text:
            evidences.append(text)
    report.evidence_chars = [len(text) for text in evidences]
    if unusable and check_evidence:
        kinds = ", ".join(sorted({kind for _, kind in unusable}))
        report.problems.append(
            f"{len(unusable)} rows hold evidence under '{evidence_key}' as {kinds} (first: "
            f"{_first([p for p, _ in unusable])}), which FSPO cannot read: those rows would train as plain GRPO; "
            "store the evidence as a string or a list of strings"
        )

    if check_evidence and not evidences and report.rows:
        for name in EVIDENCE_NAMES:
            if name == evidence_key:
                continue
            found = sum(
                bool(row_evidence({"extra_info": info, name: column}, name))
                for info, column in zip(extra_infos, _column(table, name))
            )
            if found:
                report.problems.append(
                    f"no row has evidence under '{evidence_key}', but '{name}' holds text in {found} rows: FSPO would "
                    f"train it as plain GRPO; set fspo.evidence_key={name} (`fspo data check --evidence-key {name}`)"
                )
    if require_evidence and report.rows_without_evidence:
        missing_rows = report.rows_without_evidence
        report.problems.append(
            f"fspo.require_evidence=true but {len(missing_rows)} of {report.rows} rows have no evidence under "
            f"'{evidence_key}' (extra_info or column; rows {_first(missing_rows)}); add it, or set "
            "fspo.require_evidence=false to train those rows as plain GRPO"
        )

    if tokenizer is not None:
        report.evidence_tokens = (
            [len(ids) for ids in tokenizer(evidences, add_special_tokens=False)["input_ids"]] if evidences else []
        )
        if not prompt_problem:
            report.prompt_tokens = [
                _prompt_length(messages, tokenizer, prompt_format)
                for row, messages in enumerate(_column(table, "prompt"))
                if row not in unrendered
            ]
            if max_prompt_length is not None:
                report.prompts_over_limit = sum(n > max_prompt_length for n in report.prompt_tokens)
                if report.prompt_tokens and report.prompts_over_limit == len(report.prompt_tokens):
                    report.problems.append(
                        f"every prompt is longer than {max_prompt_length} tokens "
                        "(data.max_prompt_length): verl would filter out every row"
                    )
    return report


def _prompt_length(messages, tokenizer, prompt_format: str | None) -> int:
    """Tokens of the rendered prompt, counted as verl's overlong-prompt filter counts them."""
    messages = [dict(m) for m in messages]
    if prompt_format:
        return count_prompt_tokens(messages, prompt_format, tokenizer)
    return len(
        tokenizer(
            tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False),
            add_special_tokens=False,
        )["input_ids"]
    )
