"""Reasoning span and step splitting: examples for each rule, and offset invariants on random text."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.steps import Step, is_claim, reasoning_span, reasoning_steps, split_steps

# Letters, digits, sentence punctuation, quotes, whitespace, CJK, accents, emoji, abbreviations and tags.
PIECES = [
    *"abcXYZ019 .,!?;:'\"()-*\n\t",
    *"。！？你好世界ÉéüßЖ…”’",
    "😀",
    "👍🏽",
    "\u200b",
    "Dr.",
    "U.S.",
    "e.g.",
    "1. ",
    "3.14",
    "<think>",
    "</think>",
]
random_text = st.lists(st.sampled_from(PIECES), max_size=80).map("".join)


def texts(text: str) -> list[str]:
    return [step.text for step in split_steps(text)]


def test_sentences_with_abbreviations_decimals_and_initials_stay_whole():
    text = (
        "Dr. Smith of the U.S. Army was born in 1950, i.e. before the war. "
        "The value is approx. 3.14 here. J. K. Rowling wrote it, e.g. in Edinburgh. See Fig. 2 and No. 5 on Jan. 3."
    )
    assert texts(text) == [
        "Dr. Smith of the U.S. Army was born in 1950, i.e. before the war.",
        "The value is approx. 3.14 here.",
        "J. K. Rowling wrote it, e.g. in Edinburgh.",
        "See Fig. 2 and No. 5 on Jan. 3.",
    ]


def test_lines_lists_and_paragraphs_are_steps_and_markers_stay_inside():
    text = "Plan:\n1. Find the director.\n2. Check his birth date.\n\n- A bullet.\n* Another one\n\nLast paragraph."
    assert texts(text) == [
        "Plan:",
        "1. Find the director.",
        "2. Check his birth date.",
        "- A bullet.",
        "* Another one",
        "Last paragraph.",
    ]


def test_quotes_ellipses_and_lowercase_continuations():
    text = 'He said "Yes!" and left. She wrote "It ends." Then Wait... maybe not. Hmm... So it is 5. Done etc. Next.'
    assert texts(text) == [
        'He said "Yes!" and left.',
        'She wrote "It ends."',
        "Then Wait... maybe not.",
        "Hmm...",
        "So it is 5.",
        "Done etc.",
        "Next.",
    ]


def test_chinese_sentence_ends_split_without_spaces():
    assert texts("他出生于1950年。他是导演！真的吗？是的」") == [
        "他出生于1950年。",
        "他是导演！",
        "真的吗？",
        "是的」",
    ]


def test_step_offsets_point_into_the_text():
    text = "  First one.  Second one!\n\n  third"
    steps = split_steps(text)
    assert steps == [
        Step(2, 12, "First one."),
        Step(14, 25, "Second one!"),
        Step(29, 34, "third"),
    ]


def test_reasoning_span_rules():
    assert reasoning_span("step one</think>answer") == (0, 8)
    assert reasoning_span("<think>step</think>answer") == (7, 11)
    assert reasoning_span("  <think>\nstep</think>") == (9, 14)
    # A repeated opening tag: the reasoning starts after the last one before the first closing tag.
    assert reasoning_span("<think>a<think>b</think>c</think>") == (15, 16)
    assert reasoning_span("no closing tag <think> at all") is None
    assert reasoning_span("") is None
    assert reasoning_span("</think>answer") == (0, 0)


def test_reasoning_steps_offsets_are_into_the_response():
    response = "<think>\nJaws came out in 1975. Spielberg directed it.\n</think>\n\nThe answer is Spielberg."
    steps = reasoning_steps(response)
    assert [s.text for s in steps] == [
        "Jaws came out in 1975.",
        "Spielberg directed it.",
    ]
    assert all(response[s.start : s.end] == s.text for s in steps)
    assert reasoning_steps("Truncated reasoning without an end") == []
    assert reasoning_steps("<think>  \n </think>answer") == []


def test_claims_only_drops_fillers_questions_and_markup():
    response = "Okay.\nLet me think.\nWait, is that right?\n**\n1.\nJaws came out in 1975.\nHmm...</think>x"
    assert [s.text for s in reasoning_steps(response, claims_only=True)] == ["Jaws came out in 1975."]
    assert len(reasoning_steps(response)) == 7


def test_is_claim():
    assert is_claim("Spielberg directed Jaws.")
    assert is_claim("He was born in 1946.")
    for filler in [
        "Okay.",
        "Wait,",
        "Hmm...",
        "Let me think.",
        "Let's think step by step.",
        "---",
        "1.",
        "?",
        "So,",
    ]:
        assert not is_claim(filler), filler
    assert not is_claim("Who directed Jaws?")


@settings(max_examples=150, deadline=None)
@given(random_text)
def test_steps_are_ordered_stripped_and_cover_every_non_space_character(text):
    steps = split_steps(text)
    covered = set()
    previous_end = 0
    for step in steps:
        assert previous_end <= step.start < step.end <= len(text)
        assert text[step.start : step.end] == step.text
        assert step.text == step.text.strip()
        covered.update(range(step.start, step.end))
        previous_end = step.end
    assert all(i in covered for i, char in enumerate(text) if not char.isspace())


@settings(max_examples=100, deadline=None)
@given(
    random_text,
    st.sampled_from(["", "<think>", " <think>\n"]),
    st.sampled_from(["", "</think>", "</think>\n\n"]),
    random_text,
)
def test_reasoning_steps_lie_inside_the_reasoning(reasoning, opening, closing, answer):
    response = opening + reasoning + closing + answer
    span = reasoning_span(response)
    steps = reasoning_steps(response)
    if span is None:
        assert "</think>" not in response and steps == []
        return
    start, end = span
    assert response[end:].startswith("</think>") and "</think>" not in response[start:end]
    for step in steps:
        assert start <= step.start < step.end <= end
        assert response[step.start : step.end] == step.text
    assert [s.text for s in steps] == [s.text for s in split_steps(response[start:end])]


# --- line breaks ----------------------------------------------------------------------------------
words = st.lists(
    st.sampled_from(["film", "Jaws", "directed", "Smith", "1950", "born", "river", "Paris"]), min_size=1, max_size=5
).map(" ".join)
lowercase_words = st.lists(
    st.sampled_from(["who", "which", "and", "was", "in", "born", "the"]), min_size=1, max_size=4
).map(" ".join)
capitalised = words.map(lambda w: "The " + w)
markers = st.sampled_from(["1. ", "2) ", "- ", "* ", "+ ", "• ", "# ", "> ", "a. ", "(ii) "])
open_endings = st.sampled_from([",", ";", " by", " the", " and", " was", " of", " (", " -"])
terminators = st.sampled_from([".", "!", "?", "…", ".)", '."'])


LIST_ITEM = re.compile(r"[ \t]*(?:[-*+•>|]|#{1,6}|\d+[.)]|[A-Za-z][.)]|\(\w{1,4}\))(?=\s|$)")


def step_holding(text, position):
    return next((s for s in split_steps(text) if s.start <= position < s.end), None)


def test_a_line_break_inside_a_sentence_does_not_cut_it():
    assert texts("Jaws was directed by John Smith\nwho was born in 1950.\nThe film was shot in\nMassachusetts.") == [
        "Jaws was directed by John Smith\nwho was born in 1950.",
        "The film was shot in\nMassachusetts.",
    ]
    assert texts("Steps:\n1. Find the director\nof the film.\n2. Check his birth date.\nDone.") == [
        "Steps:",
        "1. Find the director\nof the film.",
        "2. Check his birth date.",
        "Done.",
    ]


@settings(max_examples=150, deadline=None)
@given(words, st.one_of(st.just(""), open_endings), lowercase_words, st.sampled_from(["", " ", "  "]))
def test_a_line_break_before_a_lowercase_line_continues_the_step(first, ending, second, indent):
    text = f"{first}{ending}\n{indent}{second} here."
    step = step_holding(text, text.index("\n"))
    assert step is not None and step.text.endswith("here.") and step.start == 0


@settings(max_examples=150, deadline=None)
@given(words, open_endings, capitalised)
def test_a_line_ending_inside_a_sentence_continues_the_step(first, ending, second):
    text = f"{first}{ending}\n{second}."
    assert texts(text) == [text]


@settings(max_examples=150, deadline=None)
@given(words, st.one_of(st.just(""), open_endings, terminators), markers, st.one_of(words, lowercase_words))
def test_a_list_item_always_starts_a_step(first, ending, marker, item):
    text = f"{first}{ending}\n{marker}{item}"
    assert any(s.start == text.index("\n") + 1 for s in split_steps(text))


@settings(max_examples=150, deadline=None)
@given(
    words,
    st.one_of(st.just(""), open_endings, terminators),
    st.one_of(words, lowercase_words, capitalised),
    st.sampled_from(["\n\n", "\n \n", "\n\t\n\n"]),
)
def test_a_blank_line_always_ends_a_step(first, ending, second, blank):
    text = f"{first}{ending}{blank}{second}"
    assert [s.text for s in split_steps(text)] == [f"{first}{ending}".strip(), second]


@settings(max_examples=150, deadline=None)
@given(words, terminators, capitalised)
def test_a_sentence_end_before_a_capitalised_line_ends_the_step(first, terminator, second):
    text = f"{first}{terminator}\n{second}"
    assert texts(text) == [f"{first}{terminator}", second]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(random_text, words, lowercase_words, markers), max_size=8).map("\n".join))
def test_no_step_spans_a_blank_line_or_starts_mid_list_item(text):
    for step in split_steps(text):
        assert not re.search(r"\n[ \t]*\n", step.text)
        for line_start in (m.end() for m in re.finditer("\n", text) if step.start < m.end() < step.end):
            assert not LIST_ITEM.match(text[line_start:])
