"""fspo.training.dataset: verl's overlong-prompt filter, named by a digest instead of a pickled tokenizer."""

from __future__ import annotations

import datasets
import pytest
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.utils.tokenizer import normalize_token_ids

from fspo.data.io import read_rows, write_parquet
from fspo.training.dataset import FingerprintedRLHFDataset, filter_fingerprint

LIMIT = 40  # prompt tokens, chat template included


def _config(tmp_path, **extra):
    return OmegaConf.create(
        {"max_prompt_length": LIMIT, "filter_overlong_prompts": True, "cache_dir": str(tmp_path / "cache"), **extra}
    )


@pytest.fixture
def straddling(tmp_path):
    """Rows whose templated prompts run from well under to well over LIMIT tokens, one word at a time."""
    rows = [
        {"prompt": [{"role": "user", "content": " ".join(["word"] * words)}], "data_source": "synth", "index": words}
        for words in range(5, 45)
    ]
    return write_parquet(rows, tmp_path / "rows.parquet")


def _kept(dataset) -> list[int]:
    return [row["index"] for row in dataset.dataframe]


def _fitting(path, tokenizer, limit=LIMIT) -> list[int]:
    """The rows whose templated prompt fits ``limit`` tokens, as verl's filter measures a prompt."""
    return [
        row["index"]
        for row in read_rows(path)
        if len(normalize_token_ids(tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True))) <= limit
    ]


def test_keeps_the_rows_verl_keeps_and_reuses_a_cached_filter_only_for_the_same_inputs(
    straddling, qwen_tokenizer, tmp_path, monkeypatch
):
    ours = _kept(FingerprintedRLHFDataset([str(straddling)], qwen_tokenizer, _config(tmp_path)))
    assert ours == _kept(RLHFDataset([str(straddling)], qwen_tokenizer, _config(tmp_path)))
    assert ours == _fitting(straddling, qwen_tokenizer) and 0 < len(ours) < 40  # the limit cut the table

    # The same file filtered again: a cache hit, the same rows. A lower limit, a longer chat template: the rows
    # that fit them, not the cached ones.
    assert _kept(FingerprintedRLHFDataset([str(straddling)], qwen_tokenizer, _config(tmp_path))) == ours
    # A pool of two, as on a GPU node (verl's default is a quarter of the CPUs): the fingerprint takes a shard suffix.
    lower = _kept(
        FingerprintedRLHFDataset(
            [str(straddling)],
            qwen_tokenizer,
            _config(tmp_path, max_prompt_length=30, filter_overlong_prompts_workers=2),
        )
    )
    assert lower == _fitting(straddling, qwen_tokenizer, 30) and len(lower) < len(ours)
    monkeypatch.setattr(
        qwen_tokenizer, "chat_template", "You are careful. Think first. " + qwen_tokenizer.chat_template
    )
    longer = _kept(FingerprintedRLHFDataset([str(straddling)], qwen_tokenizer, _config(tmp_path)))
    assert longer == _fitting(straddling, qwen_tokenizer) and len(longer) < len(ours)


def test_the_fingerprint_follows_every_input_of_the_length(straddling, qwen_tokenizer, tmp_path, monkeypatch):
    table = datasets.load_dataset("parquet", data_files=str(straddling), cache_dir=str(tmp_path / "hf"))["train"]

    def fingerprint(tokenizer=qwen_tokenizer, tool_schemas=None, **config):
        dataset = FingerprintedRLHFDataset.__new__(FingerprintedRLHFDataset)  # the attributes verl's __init__ sets
        dataset.tokenizer, dataset.processor, dataset.tool_schemas = tokenizer, None, tool_schemas
        dataset.max_prompt_length = config.get("max_prompt_length", LIMIT)
        dataset.prompt_key = config.get("prompt_key", "prompt")
        dataset.apply_chat_template_kwargs = OmegaConf.create(config.get("apply_chat_template_kwargs", {}))
        return filter_fingerprint(dataset, table)

    def changed(name, value):
        with monkeypatch.context() as patch:
            patch.setattr(qwen_tokenizer, name, value)
            return fingerprint()

    base = fingerprint()
    assert base == fingerprint()  # deterministic: a resumed run finds its filtered table
    added = AutoTokenizer.from_pretrained(qwen_tokenizer.name_or_path)
    added.add_tokens(["<step>"])
    others = [
        fingerprint(added),
        changed("bos_token", "<|im_start|>"),
        changed("chat_template", qwen_tokenizer.chat_template + " "),
        fingerprint(max_prompt_length=LIMIT + 1),
        fingerprint(prompt_key="question"),
        fingerprint(apply_chat_template_kwargs={"enable_thinking": False}),
        fingerprint(tool_schemas=[{"type": "function", "function": {"name": "search"}}]),
    ]
    assert len({base, *others}) == len(others) + 1
    assert len(base) <= 64  # the longest fingerprint datasets accepts


def test_a_processor_keeps_datasets_own_hashing(qwen_tokenizer):
    dataset = FingerprintedRLHFDataset.__new__(FingerprintedRLHFDataset)
    dataset.tokenizer, dataset.processor = qwen_tokenizer, object()
    assert filter_fingerprint(dataset, table=None) is None
