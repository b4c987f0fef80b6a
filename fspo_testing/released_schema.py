"""Rows in the exact schema of the paper's released parquet files (github nusnlp/FSPO, data/).

Read from ``data/hotpot/qwen-base-2k/train.parquet`` and its siblings (real parquet, not LFS pointers):

    _id: string, data_source: string ("HotpotQA" | "2WikiMultiHopQA"; elsewhere "HaluEval", "GSM8K", "MATH"),
    question: string, answer: string, knowledge: string (the evidence),
    prompt: list<struct<content: string, role: string>> (one user message: the whole transcript rendered
    to text, e.g. ending "Assistant: Let me solve this step by step. <think>"),
    ability: string ("factuality"), reward_model: struct<ground_truth: string, style: string>,
    extra_info: struct<index: int64, split: string>
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema(
    [
        ("_id", pa.string()),
        ("data_source", pa.string()),
        ("question", pa.string()),
        ("answer", pa.string()),
        ("knowledge", pa.string()),
        ("prompt", pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
        ("extra_info", pa.struct([("index", pa.int64()), ("split", pa.string())])),
    ]
)


def released_row(
    index: int,
    question: str,
    answer: str,
    knowledge: str,
    prompt_text: str,
    data_source: str = "HotpotQA",
    split: str = "train",
) -> dict:
    return {
        "_id": f"{index:024x}",
        "data_source": data_source,
        "question": question,
        "answer": answer,
        "knowledge": knowledge,
        "prompt": [{"content": prompt_text, "role": "user"}],
        "ability": "factuality",
        "reward_model": {"ground_truth": answer, "style": "rule"},
        "extra_info": {"index": index, "split": split},
    }


def from_fspo_rows(rows: list[dict], render, data_source: str = "HotpotQA") -> list[dict]:
    """Released-schema rows from rows built by ``fspo data``: the evidence moves to ``knowledge`` and the
    prompt becomes the text ``render(messages)`` gives, in one user message."""
    return [
        released_row(
            row["extra_info"]["index"],
            row["extra_info"]["question"],
            str(row["reward_model"]["ground_truth"]),
            row["extra_info"]["evidence"],
            render(row["prompt"]),
            data_source,
            row["extra_info"]["split"],
        )
        for row in rows
    ]


def write_released(rows: list[dict], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), path)
    return path
