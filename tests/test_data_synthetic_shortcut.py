"""The shortcut world: every row judgeable, answerable from its gold chain, and answerable through a wrong chain."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.data.io import read_rows
from fspo.data.synthetic import DATA_SOURCE, main, make_rows
from fspo.data.synthetic_shortcut import MAX_FACTS, answer_set
from fspo.data.world_judge import CONTRADICTED, SUPPORTED, build_world, judge_steps, parse_fact
from fspo.quickstart.step_report import flawed_positives


def wrong_chain(info: dict, answer: str) -> list[str]:
    """The gold chain with its next-to-last hop sent to the subject of another evidence fact that ends in the
    answer (the echo chain's last hop), then that fact: a chain through a false step to the right answer."""
    gold = info["gold_facts"]
    last = parse_fact(gold[-1])
    facts = [parse_fact(s) for s in re.findall(r"[^.]+\.", info["evidence"])]
    echo = next(f for f in facts if f.object == answer and f.relation == last.relation and f.subject != last.subject)
    swapped = gold[-2][: -len(last.subject) - 1] + echo.subject + "."
    assert gold[-2].endswith(f" {last.subject}.")
    return [*gold[:-2], swapped, f"{echo.subject} {gold[-1][len(last.subject) + 1 :]}"]


@settings(max_examples=25, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_every_row_reaches_its_answer_through_a_contradicted_step_too(seed):
    answers = answer_set(seed)
    for row in make_rows(10, seed=seed, split="test", world="shortcut"):
        info, answer = row["extra_info"], row["reward_model"]["ground_truth"]
        assert row["data_source"] == DATA_SOURCE and info["world"] == "shortcut"
        facts = re.findall(r"[^.]+\.", info["evidence"])
        assert 4 <= len(facts) <= MAX_FACTS and all(fact in info["evidence"] for fact in info["gold_facts"])
        assert answer in info["gold_facts"][-1] and answer not in info["question"]
        assert answer in {name for names in answers.values() for name in names}
        # The judge reads every fact (build_world raises otherwise) and supports the gold chain.
        assert [j.verdict for j in judge_steps(info["gold_facts"], info["evidence"], info["gold_facts"])] == [
            SUPPORTED
        ] * len(info["gold_facts"])
        wrong = wrong_chain(info, answer)
        verdicts = [j.verdict for j in judge_steps(wrong, info["evidence"], info["gold_facts"])]
        assert verdicts.count(CONTRADICTED) == 1 and verdicts[-1] == SUPPORTED
        response = " ".join(wrong) + f" </think> <answer> {answer} </answer>"
        sample = {"response": response, "ground_truth": answer, **info}
        assert flawed_positives([sample])["flawed_positives"] == 1


def test_the_answer_set_is_small_and_shared_by_the_splits():
    answers = answer_set(4, size=2)
    assert {kind: len(set(names)) for kind, names in answers.items()} == {"city": 2, "country": 2, "year": 2}
    for split in ("train", "test"):
        got = {row["reward_model"]["ground_truth"] for row in make_rows(60, seed=4, split=split, world="shortcut")}
        assert got <= {name for names in answer_set(4).values() for name in names}
    with pytest.raises(ValueError, match="answer_set_size"):
        answer_set(0, size=0)


def test_the_default_world_is_untouched_by_the_option():
    assert make_rows(20, seed=5, split="test") == make_rows(20, seed=5, split="test", world="default")
    assert all("world" not in row["extra_info"] for row in make_rows(5, seed=5))
    assert make_rows(5, seed=5, world="shortcut") != make_rows(5, seed=5)
    with pytest.raises(ValueError, match="known worlds: default, shortcut"):
        make_rows(1, world="shortcuts")


def test_cli_builds_the_shortcut_world(tmp_path, capsys):
    assert main(["--size", "3", "--test-size", "2", "--world", "shortcut", "--output-dir", str(tmp_path)]) == 0
    rows = read_rows(tmp_path / "test.parquet")
    assert rows == make_rows(2, seed=0, split="test", world="shortcut")
    build_world(rows[0]["extra_info"]["evidence"])
    with pytest.raises(SystemExit):
        main(["--world", "nowhere", "--output-dir", str(tmp_path / "x")])
    assert "invalid choice: 'nowhere'" in capsys.readouterr().err
