"""Outcome scorers: table-driven cases per data source, plus properties of the pure helpers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fspo.training.outcome import (
    METRIC_KEYS,
    RELEASED_SOURCES,
    SCORERS,
    UnknownDataSourceError,
    chosen_letter,
    compute_score,
    extract_answer,
    normalize_answer,
    own_scorer_name,
    scorer_of,
    token_f1,
)


def answer(text: str) -> str:
    return f"<think>some reasoning</think> <answer>{text}</answer>"


CASES = [
    # (data_source, response, ground truth, extra_info, expected score, expected acc)
    ("hotpotqa", answer("Arthur's Magazine"), "Arthur's Magazine", None, 1.0, 1.0),
    ("hotpotqa", answer("the Arthur's magazine."), "Arthur's Magazine", None, 1.0, 1.0),  # articles, case, punctuation
    ("hotpotqa", answer("Delhi, India"), "Delhi", None, pytest.approx(2 / 3), 0.0),  # partial F1, no EM
    ("hotpotqa", answer("yes"), "yes", None, 1.0, 1.0),
    ("hotpotqa", answer("Yes, both are American."), "yes", None, 1.0, 1.0),  # yes/no reduced to the word
    ("hotpotqa", answer("no"), "yes", None, 0.0, 0.0),
    ("hotpotqa", answer("yes"), "yes indeed", None, 0.0, 0.0),  # a yes/no answer only matches a yes/no gold
    ("2wikimultihopqa", answer("NYC"), ["New York City", "NYC"], None, 1.0, 1.0),  # aliases
    ("2wikimultihopqa", answer("Paris"), ["New York City", "NYC"], None, 0.0, 0.0),
    ("synthetic_multihop", answer("Siosburg"), "Siosburg", None, 1.0, 1.0),
    ("synthetic_multihop", "<think>The mentor was born in Siosburg</think> <answer>Sios", "Siosburg", None, 0.0, 0.0),
    ("synthetic_multihop", answer("Virburg") + " <answer>Siosburg</answer>", "Siosburg", None, 1.0, 1.0),  # last block
    ("synthetic_multihop", answer("Siosburg") + " and then the text was cut", "Siosburg", None, 1.0, 1.0),
    ("math500", answer("\\frac{1}{2}"), "0.5", None, 1.0, 1.0),  # LaTeX fraction vs decimal
    ("math500", answer("0.5"), "\\frac{1}{2}", None, 1.0, 1.0),
    ("math500", answer("\\boxed{\\frac{3}{4}}"), "\\frac34", None, 1.0, 1.0),
    ("math500", answer("\\boxed{3}"), "\\frac{3}{4}", None, 0.0, 0.0),
    ("simplerl_math", answer("x = 2\\sqrt{2}"), "2\\sqrt{2}", None, 1.0, 1.0),
    (
        "simplerl_math",
        answer("\\left( 3, \\frac{\\pi}{2} \\right)"),
        "\\left( 3, \\frac{\\pi}{2} \\right)",
        None,
        1.0,
        1.0,
    ),
    ("gsm8k", answer("1,234"), "1234", None, 1.0, 1.0),  # thousands separator
    ("gsm8k", answer("$18.00"), "18", None, 1.0, 1.0),  # dollar sign, trailing zeros
    ("gsm8k", answer("She makes 18 dollars."), "18", None, 1.0, 1.0),  # units and words
    ("gsm8k", answer("18.0"), "18", None, 1.0, 1.0),
    ("gsm8k", answer("\\boxed{70}"), "70", None, 1.0, 1.0),
    ("gsm8k", answer("17"), "18", None, 0.0, 0.0),
    ("gsm8k", answer("no idea"), "18", None, 0.0, 0.0),
    ("aime2024", answer("\\boxed{070}"), "70", None, 1.0, 1.0),
    ("aime2025", answer("The answer is 588."), "588", None, 1.0, 1.0),
    ("aime2025", answer("587"), "588", None, 0.0, 0.0),
    ("aime2025", answer("3.3"), "3", None, 0.0, 0.0),  # not an integer: its last digits are not the answer
    ("aime2025", answer("\\frac{1}{3}"), "3", None, 0.0, 0.0),
    ("aime2024", answer("33.0"), "33", None, 1.0, 1.0),
    ("math500", answer("5 dollars"), "5", None, 1.0, 1.0),  # a unit in plain words, as the MATH graders strip it
    ("math500", answer("18.50 dollars"), "18.5", None, 1.0, 1.0),
    ("math500", answer("5 dollars"), "6", None, 0.0, 0.0),
    ("math500", answer("5 pi"), "5", None, 0.0, 0.0),  # a word of two letters may be math: kept
    ("truthfulqa_mc1", answer("Option A is incorrect. The answer is B."), "B", None, 1.0, 1.0),
    ("truthfulqa_mc1", answer("(B)"), "B", None, 1.0, 1.0),
    ("truthfulqa_mc1", answer("The answer is C"), "B", None, 0.0, 0.0),
    ("truthfulqa_mc2", answer("D. Nothing happens"), ["A", "D"], None, 1.0, 1.0),
    ("halluqa_mc", answer("答案是C"), "C", None, 1.0, 1.0),
    (
        "truthfulqa_gen",
        answer("Nothing happens if you crack your knuckles"),
        ["Nothing in particular happens if you crack your knuckles a lot", "Nothing happens"],
        {"incorrect_answers": ["You will get arthritis"]},
        1.0,
        1.0,
    ),
    (
        "truthfulqa_gen",
        answer("You get arthritis"),
        ["Nothing happens"],
        {"incorrect_answers": ["You will get arthritis"]},
        0.0,
        0.0,
    ),
    ("halueval_qa", answer("Delhi"), "Delhi", {"incorrect_answers": ["It is based in Mumbai."]}, 1.0, 1.0),
    ("halueval_qa", answer("Mumbai"), "Delhi", {"incorrect_answers": ["It is based in Mumbai."]}, 0.0, 0.0),
    (
        "halluqa_gen",
        answer("我没有上过大学"),
        ["我没有上过大学。"],
        {"incorrect_answers": ["我毕业于清华大学。"]},
        1.0,
        1.0,
    ),
    ("halluqa_gen", answer("清华大学"), ["我没有上过大学。"], {"incorrect_answers": ["我毕业于清华大学。"]}, 0.0, 0.0),
]


@pytest.mark.parametrize("data_source, response, ground_truth, extra_info, score, acc", CASES)
def test_compute_score(data_source, response, ground_truth, extra_info, score, acc):
    result = compute_score(data_source, response, ground_truth, extra_info)
    assert set(result) == set(METRIC_KEYS)
    assert result["score"] == score
    assert result["acc"] == acc
    assert result["format_ok"] == float("</answer>" in response)


@pytest.mark.parametrize("data_source", sorted(SCORERS))
@pytest.mark.parametrize(
    "response",
    ["", "<think>no answer block at all", "<answer>cut off by the length lim", "</answer>", None],
)
def test_no_answer_block_scores_zero(data_source, response):
    result = compute_score(data_source, response, "1", {"incorrect_answers": []})
    assert result == {"score": 0.0, "acc": 0.0, "em": 0.0, "f1": 0.0, "format_ok": 0.0}


@pytest.mark.parametrize("data_source", sorted(SCORERS))
def test_every_source_returns_the_same_float_keys(data_source):
    result = compute_score(data_source, answer("garbage \\frac{"), ["x"], {})
    assert list(result) == list(METRIC_KEYS)
    assert all(isinstance(value, float) for value in result.values())


def test_unknown_source_names_the_known_ones():
    with pytest.raises(ValueError, match="known: .*hotpotqa"):
        compute_score("squad", answer("x"), "x")


def test_empty_ground_truth_scores_zero():
    assert compute_score("hotpotqa", answer("x"), [])["score"] == 0.0
    assert compute_score("hotpotqa", answer(""), "")["score"] == 0.0


@pytest.mark.parametrize(
    "text, letter",
    [
        ("B", "B"),
        ("(C)", "C"),
        ("B. Paris", "B"),
        ("I think the answer is D", "D"),
        ("I pick E.", "E"),
        ("none", None),
        ("Option A is incorrect. The answer is B.", "B"),
        ("The answer is not A. The answer is C.", "C"),
        ("答案是B", "B"),
    ],
)
def test_chosen_letter(text, letter):
    assert chosen_letter(text) == letter


@given(st.text(max_size=40))
def test_extract_answer_round_trips(text):
    if "</answer>" not in text.lower() and "<answer>" not in text.lower():
        assert extract_answer(f"prefix <answer>{text}</answer> suffix") == text.strip()


@given(st.text(max_size=30), st.text(max_size=30))
def test_token_f1_is_bounded_and_symmetric_outside_yes_no(a, b):
    value = token_f1(a, b)
    assert 0.0 <= value <= 1.0
    first_words = {(normalize_answer(text).split() or [""])[0] for text in (a, b)}
    if not first_words & {"yes", "no"}:  # the yes/no rule is one-sided by design (the gold decides)
        assert value == pytest.approx(token_f1(b, a))


@given(st.text(alphabet=st.characters(categories=["Lu", "Ll", "Nd"]), min_size=1, max_size=20))
def test_token_f1_of_an_answer_with_itself_is_one(text):
    if normalize_answer(text):
        assert token_f1(text, text) == 1.0


# The names the paper's released parquet files use (github nusnlp/FSPO, data/), with a response each
# scorer must accept and one it must reject.
RELEASED_CASES = [
    ("HotpotQA", answer("University of Wyoming"), answer("Wyoming State"), "University of Wyoming"),
    ("2WikiMultiHopQA", answer("Kim Marton"), answer("Paris"), "Kim Marton"),
    ("HaluEval", answer("Yes"), answer("No"), "Yes"),
    ("GSM8K", answer("18"), answer("17"), "18"),
    ("MATH", answer("\\left( 3, \\frac{\\pi}{2} \\right)"), answer("(3, \\pi)"), "\\left( 3, \\frac{\\pi}{2} \\right)"),
]


@pytest.mark.parametrize("data_source, right, wrong, gold", RELEASED_CASES)
def test_released_file_names_score_with_the_projects_scorers(data_source, right, wrong, gold):
    assert scorer_of(data_source).startswith("fspo:")
    # (Lower case is not tried: `math` is verl's own name, scored by verl.)
    for spelling in (data_source, data_source.upper(), data_source.capitalize()):
        assert compute_score(spelling, right, gold, {"index": 0, "split": "train"})["acc"] == 1.0
        assert compute_score(spelling, wrong, gold, {"index": 0, "split": "train"})["acc"] == 0.0


# verl's preprocessors' names and answer formats (verl/utils/reward_score), scored by verl.
VERL_CASES = [
    ("openai/gsm8k", "Let's think. #### 72", "Let's think. #### 71", "72"),
    ("lighteval/MATH", "so \\boxed{\\frac{1}{2}}", "so \\boxed{3}", "\\frac{1}{2}"),
    ("HuggingFaceH4/MATH-500", "so \\boxed{10}", "so \\boxed{11}", "10"),
    ("math", "Answer: 5", "Answer: 6", "5"),  # verl's own `math` (math_dapo), not the released `MATH`
]


@pytest.mark.parametrize("data_source, right, wrong, gold", VERL_CASES)
def test_verl_names_fall_back_to_verls_scorer_with_the_same_keys(data_source, right, wrong, gold):
    assert scorer_of(data_source) == "verl"
    good, bad = compute_score(data_source, right, gold), compute_score(data_source, wrong, gold)
    assert list(good) == list(METRIC_KEYS) and list(bad) == list(METRIC_KEYS)
    assert all(isinstance(value, float) for value in [*good.values(), *bad.values()])
    assert good["acc"] == 1.0 and good["score"] == 1.0
    assert bad["acc"] == 0.0 and bad["score"] <= 0.0


@pytest.mark.parametrize("data_source", ["squad", "Hotpot", "hiyouga/geometry3k-typo", None])
def test_a_source_no_scorer_knows_is_none_and_an_error_naming_the_known(data_source):
    assert scorer_of(data_source) is None
    with pytest.raises(UnknownDataSourceError, match="known: .*HaluEval.*openai/gsm8k"):
        compute_score(data_source, answer("x"), "x")


@given(st.sampled_from(sorted(SCORERS) + sorted(RELEASED_SOURCES)), st.lists(st.booleans(), min_size=1, max_size=40))
def test_own_names_match_in_any_case(name, upper):
    spelling = "".join(c.upper() if u else c.lower() for c, u in zip(name, upper * len(name)))
    expected = RELEASED_SOURCES.get(name, name)
    assert own_scorer_name(spelling) == expected


def test_an_aime_answer_beyond_python_int_digit_limit_scores_zero():
    # int() refuses strings of more than 4,300 digits (ValueError) since Python 3.11.
    assert compute_score("aime2024", answer("9" * 5000), "7")["score"] == 0.0
    assert compute_score("aime2024", answer("1" * 5000 + " so 7"), "7")["score"] == 1.0
    assert compute_score("aime2025", answer("7"), "9" * 5000)["score"] == 0.0


@pytest.mark.parametrize("data_source", ["truthfulqa_gen", "halueval_qa", "halluqa_gen"])
@pytest.mark.parametrize("extra_info", ["a string", float("nan"), 3, ["list"], None])
def test_contrastive_scorers_take_any_extra_info(data_source, extra_info):
    result = compute_score(data_source, answer("Paris"), ["Paris"], extra_info)
    assert result["score"] == 1.0


def test_a_gsm8k_fraction_beyond_python_int_digit_limit_scores_zero():
    assert compute_score("gsm8k", answer("\\frac{" + "9" * 5000 + "}{2}"), "3")["score"] == 0.0
    assert compute_score("gsm8k", answer("\\frac{7}{2}"), "3.5")["score"] == 1.0
