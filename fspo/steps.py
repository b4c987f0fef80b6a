"""Reasoning steps: find the `<think>` reasoning in a response and cut it into steps with exact offsets.

FSPO verifies each step of the reasoning separately, then labels the step's tokens. Everything here works on
character offsets into the string it is given, so a step can be mapped back to tokens exactly
(see `fspo.token_labels`).

Splitting rules (`split_steps`), chosen for model-written reasoning rather than edited prose:

- A line break ends a step, unless it breaks a sentence: a single line break is read as a space when the
  next line starts with a lowercase letter, or when the line ends inside a sentence (after a comma,
  semicolon, dash, opening bracket or "&", or after a word such as "by", "the", "and", "was" that cannot
  end one), so "directed by John Smith\\nwho was born in 1950." is one step. A blank line, a next line
  that starts a list item or markup ("1.", "2)", "a.", "(i)", "-", "*", "+", "•", "#", ">", "|") and a
  line that ends a sentence before a capitalised line always end the step: numbered lists, bullets and
  paragraphs become separate steps. A list marker stays inside the step it starts.
- Inside a line, a step ends after a run of `.`, `!`, `?` or `…` (plus closing quotes/brackets) that is
  followed by whitespace and then by something that is not a lowercase letter. So "e.g. his", "Wait... maybe",
  '"Yes!" he said' and decimals such as "3.14" (no whitespace after the dot) do not split.
- A single `.` does not end a step after an abbreviation: a title or common Latin/English abbreviation
  (Dr., Mr., St., e.g., vs., Fig., No., Jan., ...), an acronym with inner dots (U.S., a.m.), a single
  letter (initials: "J. K. Rowling"), or a number at the start of a line (a list marker).
  Known limitation: "the answer is A. Then ..." stays one step.
- CJK sentence ends (。！？ and fullwidth ．) end a step whether or not whitespace follows.
- Steps are stripped of surrounding whitespace; whitespace-only steps are dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

_LINE = re.compile(r"[^\n]+")
# A line that starts a list item or markup: it always starts a new step.
_LIST_OR_MARKUP = re.compile(r"[ \t]*(?:[-*+•>|]|#{1,6}|\d+[.)]|[A-Za-z][.)]|\(\w{1,4}\))(?=\s|$)")
# A line ending in one of these (or in a word of _OPEN_WORDS) stops inside a sentence.
_OPEN_ENDINGS = frozenset(",;([{-–—/&，、；")
# A sentence-ending run: Latin terminators followed by closers (then whitespace is required), or CJK
# terminators followed by closers (no whitespace required).
_LATIN_END = re.compile(r"(?:[.!?]+|…+)[\"'”’)\]»]*(?=\s)")
_CJK_END = re.compile(r"[。！？．]+[」』”’）)\]»]*")
_WORD_BEFORE_DOT = re.compile(r"([A-Za-z][A-Za-z.]*)\.$")
_LIST_NUMBER_BEFORE_DOT = re.compile(r"^[\s>*#_(\[-]*\d+\.$")

# Abbreviations after which a single "." does not end a sentence (compared lowercased, without the dot).
# Words that usually end sentences ("etc", "Inc") are left out: a capitalised word after them starts a new step.
# fmt: off
_ABBREVIATIONS = frozenset((
    "mr", "mrs", "ms", "mx", "dr", "prof", "sr", "jr", "st", "mt", "ft", "gen", "col", "lt", "sgt", "capt",
    "cpl", "adm", "gov", "sen", "rep", "pres", "rev", "hon", "fr", "messrs", "eg", "ie", "cf", "vs", "viz",
    "al", "approx", "ca", "no", "nos", "fig", "figs", "eq", "eqs", "vol", "vols", "ch", "chap", "sec",
    "sect", "art", "op", "ed", "eds", "pp", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept",
    "oct", "nov", "dec",
))

# Steps that are not claims: fillers that open or pace reasoning (compared lowercased, without punctuation).
_FILLERS = frozenset((
    "ok", "okay", "alright", "right", "wait", "hmm", "hm", "hmmm", "um", "uh", "so", "well", "yes", "no",
    "sure", "good", "great", "fine", "first", "next", "then", "now", "let me think", "let me see",
    "let me check", "let me verify", "let me recall", "let me start", "lets think", "lets see", "lets start",
    "lets check", "let us think", "let me double check", "let me think step by step",
    "lets think step by step", "hold on", "i see", "got it", "ok so", "okay so", "alright so", "wait wait",
))
# Words a sentence does not end with: a line ending in one continues on the next line.
_OPEN_WORDS = frozenset((
    "a", "an", "the", "of", "by", "and", "or", "nor", "but", "in", "on", "at", "to", "for", "with", "from",
    "into", "onto", "about", "as", "than", "that", "which", "who", "whom", "whose", "where", "when", "is",
    "was", "are", "were", "be", "been", "being", "has", "had", "have", "his", "her", "its", "their", "our",
    "my", "your", "this", "these", "those", "between", "after", "before", "during", "because", "since", "via",
))
# fmt: on
_CLAIM_MIN_WORD_CHARS = 3


@dataclass(frozen=True)
class Step:
    """One reasoning step.

    Args:
        start: Offset of the step's first character in the string it was cut from.
        end: Offset one past its last character.
        text: `original[start:end]`; never starts or ends with whitespace.
    """

    start: int
    end: int
    text: str


def reasoning_span(response: str) -> tuple[int, int] | None:
    """Character span of the `<think>` reasoning in a response.

    The paper's prompts end with `<think>`, so a response usually starts inside the reasoning. The reasoning
    ends at the first `</think>`. It starts after the last `<think>` that comes before that `</think>`
    (a response that opens `<think>` itself, or repeats the tag, is handled the same way), or at 0 when there
    is none. Anything after the first `</think>`, including further think blocks, is answer, not reasoning.

    Args:
        response: The decoded response (prompt not included).

    Returns:
        `(start, end)` with `response[start:end]` the reasoning, not stripped; it may be empty or whitespace
        only (then `reasoning_steps` returns no steps). `None` when there is no closed reasoning: no
        `</think>` (format error, or the response was truncated at the length limit).
    """
    end = response.find(THINK_CLOSE)
    if end < 0:
        return None
    opened = response.rfind(THINK_OPEN, 0, end)
    start = 0 if opened < 0 else opened + len(THINK_OPEN)
    return start, end


def split_steps(text: str) -> list[Step]:
    """Cut text into steps: lines joined where a line break continues a sentence, then sentences
    (rules in the module docstring).

    Args:
        text: Any text.

    Returns:
        Steps in order, not overlapping, each with `text[step.start:step.end] == step.text` and no
        surrounding whitespace.
    """
    steps: list[Step] = []
    for block_start, block_end in _blocks(text):
        piece_start = block_start
        for cut in _sentence_cuts(text, block_start, block_end):
            _append_stripped(steps, text, piece_start, cut)
            piece_start = cut
        _append_stripped(steps, text, piece_start, block_end)
    return steps


def line_break_continues(line: str, next_line: str) -> bool:
    """Whether a single line break between ``line`` and ``next_line`` sits inside one sentence.

    True when ``next_line`` starts with a lowercase letter or ``line`` ends inside a sentence, unless
    ``next_line`` starts a list item or markup or either line is blank.
    """
    line, following = line.rstrip(), next_line.lstrip()
    if not line or not following or _LIST_OR_MARKUP.match(next_line):
        return False
    if following[0].islower():
        return True
    if line[-1] in _OPEN_ENDINGS:
        return True
    last_word = re.search(r"[A-Za-z]+$", line)
    return last_word is not None and last_word.group().lower() in _OPEN_WORDS


def _blocks(text: str) -> list[tuple[int, int]]:
    """Spans of lines joined by line breaks that continue a sentence."""
    blocks: list[tuple[int, int]] = []
    for line in _LINE.finditer(text):
        if blocks:
            start, end = blocks[-1]
            last_line = text[start:end].rsplit("\n", 1)[-1]
            if text[end : line.start()] == "\n" and line_break_continues(last_line, line.group()):
                blocks[-1] = (start, line.end())
                continue
        blocks.append((line.start(), line.end()))
    return blocks


def reasoning_steps(response: str, claims_only: bool = False) -> list[Step]:
    """Steps of a response's reasoning, with offsets into `response`.

    Args:
        response: The decoded response.
        claims_only: Drop steps for which `is_claim` is False, so they are not verified and keep label 0.

    Returns:
        The steps, or `[]` when the response has no closed reasoning (see `reasoning_span`).
    """
    span = reasoning_span(response)
    if span is None:
        return []
    start, end = span
    steps = [Step(s.start + start, s.end + start, s.text) for s in split_steps(response[start:end])]
    if claims_only:
        steps = [step for step in steps if is_claim(step.text)]
    return steps


def is_claim(step_text: str) -> bool:
    """Whether a step states something that can be checked against evidence.

    False for a question (ends with "?"), for a filler such as "Okay.", "Wait,", "Hmm...", "Let me think."
    (compared lowercased without punctuation), and for a step with fewer than 3 letters or digits
    (punctuation, markup, a bare list marker). Everything else is a claim.
    """
    stripped = step_text.strip()
    if stripped.endswith(("?", "？")):
        return False
    words = re.findall(r"\w+", stripped.lower().replace("'", "").replace("’", ""))
    if sum(len(word) for word in words) < _CLAIM_MIN_WORD_CHARS:
        return False
    return " ".join(words) not in _FILLERS


def _sentence_cuts(text: str, line_start: int, line_end: int) -> list[int]:
    """Offsets inside one block of lines where a sentence ends (the cut is after the terminator and closers)."""
    cuts = []
    for match in _LATIN_END.finditer(text, line_start, line_end):
        following = text[match.end() : line_end].lstrip()
        if not following or following[0].islower():
            continue
        if match.group().startswith(".") and _dot_is_abbreviation(text, line_start, match):
            continue
        cuts.append(match.end())
    for match in _CJK_END.finditer(text, line_start, line_end):
        if match.end() < line_end:
            cuts.append(match.end())
    return sorted(set(cuts))


def _dot_is_abbreviation(text: str, line_start: int, match: re.Match) -> bool:
    """Whether a single "." ends an abbreviation, an initial or a list number rather than a sentence."""
    terminator = match.group().rstrip("\"'”’)]»")
    if terminator != ".":
        return False
    before = text[line_start : match.start() + 1]
    if _LIST_NUMBER_BEFORE_DOT.match(before):
        return True
    word = _WORD_BEFORE_DOT.search(before)
    if word is None:
        return False
    word_text = word.group(1)
    if len(word_text) == 1 or "." in word_text:
        return True
    return word_text.lower() in _ABBREVIATIONS


def _append_stripped(steps: list[Step], text: str, start: int, end: int) -> None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start < end:
        steps.append(Step(start, end, text[start:end]))
