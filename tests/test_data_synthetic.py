"""The synthetic multi-hop generator: deterministic, answerable from its evidence, short."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.data.io import read_rows, write_parquet
from fspo.data.synthetic import DATA_SOURCE, main, make_rows
from fspo.training.outcome import compute_score


def test_same_seed_same_rows_other_seed_other_rows():
    assert make_rows(20, seed=7) == make_rows(20, seed=7)
    assert make_rows(20, seed=7) != make_rows(20, seed=8)
    train = {r["extra_info"]["question"] for r in make_rows(30, seed=7, split="train")}
    test = {r["extra_info"]["question"] for r in make_rows(30, seed=7, split="test")}
    assert not train & test


def test_prefix_is_stable():
    # Asking for more rows does not change the first ones (row i depends only on seed, split and i).
    assert make_rows(50, seed=1)[:10] == make_rows(10, seed=1)


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_rows_are_answerable_from_their_gold_facts(seed):
    for row in make_rows(8, seed=seed):
        info, answer = row["extra_info"], row["reward_model"]["ground_truth"]
        facts = re.findall(r"[^.]+\.", info["evidence"])
        assert 3 <= len(facts) <= 6
        assert 2 <= len(info["gold_facts"]) <= 3
        assert all(fact in info["evidence"] for fact in info["gold_facts"])
        assert answer in info["gold_facts"][-1]  # the last hop states the answer
        assert answer not in info["question"]
        # The hops chain: the question names the first hop's subject, each hop's subject is the previous object.
        subjects = [re.split(r" (?:was|works|is) ", fact)[0] for fact in info["gold_facts"]]
        assert subjects[0] in info["question"]
        assert all(subject in previous for subject, previous in zip(subjects[1:], info["gold_facts"]))
        assert len(row["prompt"][1]["content"]) < 600


def test_row_format_and_scoring():
    rows = make_rows(5, seed=0, prompt_format="llama-instruct", split="test", evidence_in_prompt=False)
    for index, row in enumerate(rows):
        assert row["data_source"] == DATA_SOURCE
        assert row["extra_info"]["index"] == index and row["extra_info"]["split"] == "test"
        assert row["prompt"][1]["content"] == row["extra_info"]["question"]
        answer = row["reward_model"]["ground_truth"]
        assert compute_score(DATA_SOURCE, f"<answer>{answer}</answer>", answer, row["extra_info"])["score"] == 1.0
    with_context = make_rows(1, seed=0)[0]["prompt"][1]["content"]
    assert with_context.startswith("Context:\n") and "\n\nQuestion: " in with_context


def test_parquet_round_trip(tmp_path):
    rows = make_rows(6, seed=2)
    assert read_rows(write_parquet(rows, tmp_path / "s.parquet")) == rows


def test_cli_writes_both_splits(tmp_path, capsys):
    assert main(["--size", "4", "--test-size", "2", "--output-dir", str(tmp_path)]) == 0
    assert len(read_rows(tmp_path / "train.parquet")) == 4
    assert len(read_rows(tmp_path / "test.parquet")) == 2


def test_bad_arguments():
    with pytest.raises(ValueError, match="known formats"):
        make_rows(1, prompt_format="chatml")
    with pytest.raises(ValueError, match="num_rows"):
        make_rows(-1)
