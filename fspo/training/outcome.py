"""The outcome reward: one answer scorer per data source of the recipe, behind verl's custom-reward signature.

    compute_score(data_source, solution_str, ground_truth, extra_info=None) -> dict

The answer is the text of the last complete ``<answer>...</answer>`` block of the response; a response
without one (e.g. cut off by the length limit) scores 0 and never raises. Every source returns the same
keys, so a batch mixing sources (the FSPO training mix) stacks cleanly in verl:

- ``score``: the reward (float);
- ``acc``: whether the answer counts as correct (0/1);
- ``em`` / ``f1``: exact match and token F1 after SQuAD normalisation (for math and multiple choice both
  equal ``acc``);
- ``format_ok``: whether an answer block was found.

Rules per source:

- ``hotpotqa``, ``2wikimultihopqa``, ``synthetic_multihop``: score = max token F1 over the gold aliases,
  acc = EM. yes/no: when the gold is "yes"/"no", a prediction starting with yes/no is reduced to that
  word, and a yes/no prediction against a non-yes/no gold (or the reverse) scores 0.
- ``simplerl_math``, ``math500``: `math_verify` equivalence of the answer and the gold (LaTeX,
  ``\\boxed{}``, fractions vs decimals).
- ``gsm8k``: the last number of the answer equals the gold number (thousands separators, ``$``, units,
  trailing ``.0`` and ``%`` ignored).
- ``aime2024``, ``aime2025``: the last integer of the answer (``\\boxed{}`` allowed) equals the gold.
- ``truthfulqa_gen``, ``halueval_qa``, ``halluqa_gen``: contrastive match: acc = 1 when the answer's best
  token F1 against the correct answers (ground truth) is above 0 and above its best F1 against
  ``extra_info["incorrect_answers"]``; score = acc; f1/em against the correct answers.
  Chinese text is compared character by character.
- ``truthfulqa_mc1``, ``truthfulqa_mc2``, ``halluqa_mc``: the chosen option letter is (one of) the gold
  letter(s).

Names: the ones above in any case, and the released FSPO files' ``HotpotQA``, ``2WikiMultiHopQA``,
``HaluEval``, ``GSM8K``, ``MATH`` (:data:`RELEASED_SOURCES`). Any other name goes to verl's
``default_compute_score`` (``openai/gsm8k``, ``lighteval/MATH``, ``HuggingFaceH4/MATH-500``...), whose
result is reported under the same keys; a name neither knows raises :class:`UnknownDataSourceError`.
"""

from __future__ import annotations

import functools
import math
import re
import string
import threading
from collections import Counter
from collections.abc import Callable, Mapping

METRIC_KEYS = ("score", "acc", "em", "f1", "format_ok")

_ANSWER_BLOCK = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
# ASCII punctuation plus the full-width marks of Chinese answers (HalluQA).
_PUNCTUATION = frozenset(string.punctuation) | frozenset("，。、：；！？“”‘’《》（）【】")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3000-\u303f\uff00-\uffef]")


def answer_span(solution_str: str | None) -> tuple[int, int] | None:
    """Character span ``[start, end)`` of the last complete ``<answer>...</answer>`` block's text (inside the
    tags); None when there is none."""
    if not solution_str:
        return None
    blocks = list(_ANSWER_BLOCK.finditer(solution_str))
    return blocks[-1].span(1) if blocks else None


def extract_answer(solution_str: str | None) -> str | None:
    """Text of the last complete ``<answer>...</answer>`` block, stripped; None when there is none."""
    span = answer_span(solution_str)
    return None if span is None else solution_str[span[0] : span[1]].strip()


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower case, no punctuation, no articles (a/an/the), single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def answer_tokens(normalized: str) -> list[str]:
    """Whitespace tokens, with every CJK character a token of its own (Chinese has no spaces)."""
    tokens: list[str] = []
    for word in normalized.split():
        if _CJK.search(word):
            tokens.extend(ch for ch in word if not ch.isspace())
        else:
            tokens.append(word)
    return tokens


def _yes_no_view(prediction: str, gold: str) -> str:
    """Reduce "yes, they are" to "yes" when the gold itself is a bare yes/no."""
    first = prediction.split(" ", 1)[0]
    if gold in ("yes", "no") and first in ("yes", "no"):
        return first
    return prediction


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 with HotpotQA's yes/no rule (a yes/no answer only matches itself)."""
    pred, truth = normalize_answer(prediction), normalize_answer(gold)
    pred = _yes_no_view(pred, truth)
    if (pred in ("yes", "no") or truth in ("yes", "no")) and pred != truth:
        return 0.0
    pred_tokens, truth_tokens = answer_tokens(pred), answer_tokens(truth)
    common = sum((Counter(pred_tokens) & Counter(truth_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(truth_tokens)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, gold: str) -> float:
    pred, truth = normalize_answer(prediction), normalize_answer(gold)
    return float(_yes_no_view(pred, truth) == truth)


def gold_list(ground_truth) -> list[str]:
    """The gold answers as a list of strings (a string, a list of aliases, or a numpy array of them)."""
    if ground_truth is None:
        return []
    if isinstance(ground_truth, (str, int, float)):
        return [str(ground_truth)]
    return [str(item) for item in ground_truth if item is not None]


def _metrics(acc: float, em: float, f1: float, score: float, format_ok: bool = True) -> dict:
    return {"score": float(score), "acc": float(acc), "em": float(em), "f1": float(f1), "format_ok": float(format_ok)}


def _binary(correct: bool) -> dict:
    return _metrics(float(correct), float(correct), float(correct), float(correct))


def score_span(answer: str, ground_truth, extra_info=None) -> dict:
    """Multi-hop QA: score = best token F1 over the aliases, acc = best exact match."""
    golds = gold_list(ground_truth)
    f1 = max((token_f1(answer, gold) for gold in golds), default=0.0)
    em = max((exact_match(answer, gold) for gold in golds), default=0.0)
    return _metrics(acc=em, em=em, f1=f1, score=f1)


def score_contrastive(answer: str, ground_truth, extra_info=None) -> dict:
    """TruthfulQA/HaluEval/HalluQA generation: closer to a correct answer than to any incorrect one."""
    golds = gold_list(ground_truth)
    # extra_info can be anything a parquet column holds (a string, NaN); only a mapping carries answers.
    incorrect = gold_list(extra_info.get("incorrect_answers")) if isinstance(extra_info, Mapping) else []
    truth_f1 = max((token_f1(answer, gold) for gold in golds), default=0.0)
    false_f1 = max((token_f1(answer, wrong) for wrong in incorrect), default=0.0)
    em = max((exact_match(answer, gold) for gold in golds), default=0.0)
    acc = float(em == 1.0 or (truth_f1 > 0 and truth_f1 > false_f1))
    return _metrics(acc=acc, em=em, f1=truth_f1, score=acc)


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def last_number(text: str) -> float | None:
    """The last number written in `text` ("1,234.50", "$18", "-3", "7 apples"), or None."""
    text = unbox(text)
    # \frac{a}{b} in a numeric answer: let its value count.
    fraction = re.search(r"\\[dt]?frac\{(-?\d+)\}\{(\d+)\}\s*$", text)
    # float(), not int(): int() refuses more than 4,300 digits; a huge value just compares unequal.
    if fraction and float(fraction.group(2)) != 0:
        return float(fraction.group(1)) / float(fraction.group(2))
    matches = _NUMBER.findall(text)
    if not matches:
        return None
    number = matches[-1].replace(",", "")
    try:
        return float(number)
    except ValueError:
        return None


def unbox(text: str) -> str:
    """The content of the last ``\\boxed{...}`` in `text` (balanced braces), or `text` itself."""
    start = text.rfind("\\boxed")
    if start < 0:
        return text
    open_brace = text.find("{", start)
    if open_brace < 0:
        return text
    depth = 0
    for position in range(open_brace, len(text)):
        if text[position] == "{":
            depth += 1
        elif text[position] == "}":
            depth -= 1
            if depth == 0:
                return text[open_brace + 1 : position]
    return text[open_brace + 1 :]


def score_gsm8k(answer: str, ground_truth, extra_info=None) -> dict:
    predicted = last_number(answer)
    golds = [last_number(gold) for gold in gold_list(ground_truth)]
    correct = predicted is not None and any(g is not None and abs(predicted - g) < 1e-6 for g in golds)
    return _binary(correct)


# Python refuses int() of more than 4,300 digits; an AIME answer is 0-999, so longer is simply wrong.
_MAX_INT_DIGITS = 4000


def _integer(digits: str) -> int | None:
    return int(digits) if len(digits.lstrip("-")) <= _MAX_INT_DIGITS else None


def score_aime(answer: str, ground_truth, extra_info=None) -> dict:
    """Right when the answer's last number is an integer equal to the gold: 3.3, 33.5 or \\frac{1}{3} are not 3
    or 33 (their last run of digits was), 33.0 is 33."""
    predicted = last_number(answer)
    golds = {_integer(g) for g in (re.sub(r"\D", "", gold) for gold in gold_list(ground_truth)) if g} - {None}
    return _binary(predicted is not None and predicted.is_integer() and int(predicted) in golds)


def _math_verify_timeout() -> int | None:
    # math_verify's timeout uses SIGALRM, which only works in the main thread (reward workers may not be).
    return 5 if threading.current_thread() is threading.main_thread() else None


def math_equal(answer: str, gold: str) -> bool:
    """`math_verify` equivalence of a response's answer and a gold answer (False on any failure)."""
    from math_verify import parse, verify

    timeout = _math_verify_timeout()
    try:
        gold_parsed = parse(gold if "$" in gold or "\\boxed" in gold else f"${gold}$", parsing_timeout=timeout)
        if not gold_parsed:
            gold_parsed = parse(gold, parsing_timeout=timeout)
        answer_parsed = parse(
            answer if "$" in answer or "\\boxed" in answer else f"${answer}$", parsing_timeout=timeout
        )
        if not answer_parsed:
            answer_parsed = parse(answer, parsing_timeout=timeout)
        if not gold_parsed or not answer_parsed:
            return normalize_answer(answer) == normalize_answer(gold)
        return bool(verify(gold_parsed, answer_parsed, timeout_seconds=timeout))
    except Exception:  # noqa: BLE001 -- math_verify can raise on odd LaTeX; a bad answer is just wrong
        return False


# A number and a unit in plain words ("5 dollars", "18.50 dollars", "12 people"): math_verify reads the words as
# variables, so the number is compared on its own too, as the MATH graders strip units (Qwen2.5-Math's strip_string).
# Words of 3+ letters: "5 pi" or "5 x" keep their meaning.
_NUMBER_AND_UNIT = re.compile(r"^\s*(-?(?:\d[\d,]*(?:\.\d+)?|\.\d+))\s+[A-Za-z]{3,}(?:\s+[A-Za-z]{3,})*\s*\.?\s*$")


def score_math(answer: str, ground_truth, extra_info=None) -> dict:
    unit = _NUMBER_AND_UNIT.match(unbox(answer))
    answers = [answer, unit.group(1)] if unit else [answer]
    return _binary(any(math_equal(a, gold) for a in answers for gold in gold_list(ground_truth)))


_ANSWER_LETTER = re.compile(r"(?:answer|答案)\s*(?:is|是|为)?\s*[:：]?\s*\(?([A-Z])(?![A-Za-z])", re.IGNORECASE)
_OPTION_LETTER = re.compile(r"(?:option|choice)\s*(?:is|是|为)?\s*[:：]?\s*\(?([A-Z])(?![A-Za-z])", re.IGNORECASE)
_LEADING_LETTER = re.compile(r"^\(?([A-Z])(?:[.:)：]|$|\s+(?![a-z]))")
_LONE_LETTER = re.compile(r"(?<![A-Za-z])([A-Z])(?![A-Za-z])")


def chosen_letter(answer: str) -> str | None:
    """The option letter an answer picks: "B", "(B)", "B. Paris", "The answer is B", "答案是B".

    Tried in order: the last letter named as the answer ("Option A is wrong; the answer is B" is B), the first
    named as an option or choice, a letter opening the answer, then the last lone capital letter other than the
    pronoun "I".
    """
    text = unbox(answer).strip()
    named = [m.group(1) for m in _ANSWER_LETTER.finditer(text) if m.group(1).isupper()]
    if named:
        return named[-1]
    for pattern in (_OPTION_LETTER, _LEADING_LETTER):
        match = pattern.search(text)
        if match and match.group(1).isupper():
            return match.group(1)
    letters = [letter for letter in _LONE_LETTER.findall(text) if letter != "I"]
    return letters[-1] if letters else None


def score_choice(answer: str, ground_truth, extra_info=None) -> dict:
    letter = chosen_letter(answer)
    golds = {gold.strip().upper() for gold in gold_list(ground_truth)}
    return _binary(letter is not None and letter in golds)


SCORERS: dict[str, Callable[[str, object, dict | None], dict]] = {
    "hotpotqa": score_span,
    "2wikimultihopqa": score_span,
    "synthetic_multihop": score_span,
    "simplerl_math": score_math,
    "math500": score_math,
    "gsm8k": score_gsm8k,
    "aime2024": score_aime,
    "aime2025": score_aime,
    "truthfulqa_gen": score_contrastive,
    "halueval_qa": score_contrastive,
    "halluqa_gen": score_contrastive,
    "truthfulqa_mc1": score_choice,
    "truthfulqa_mc2": score_choice,
    "halluqa_mc": score_choice,
}


# The data_source names of the paper's released parquet files (github nusnlp/FSPO, data/), each with
# the project's scorer for that task.
RELEASED_SOURCES = {
    "HotpotQA": "hotpotqa",
    "2WikiMultiHopQA": "2wikimultihopqa",
    "HaluEval": "halueval_qa",
    "GSM8K": "gsm8k",
    "MATH": "math500",
}
_OWN_NAMES = {**{name: name for name in SCORERS}, **RELEASED_SOURCES}
_OWN_NAMES_FOLDED = {name.casefold(): scorer for name, scorer in _OWN_NAMES.items()}


def own_scorer_name(data_source, exact: bool = False) -> str | None:
    """The project's scorer for `data_source` (its own names and the released files'), or None.

    With ``exact`` only the names as written match; otherwise case is ignored too.
    """
    if not isinstance(data_source, str):
        return None
    if data_source in _OWN_NAMES:
        return _OWN_NAMES[data_source]
    return None if exact else _OWN_NAMES_FOLDED.get(data_source.casefold())


def known_sources() -> list[str]:
    """The project's names and the released files' (one spelling each; verl's come on top)."""
    released = [name for name in RELEASED_SOURCES if name.casefold() not in SCORERS]
    return sorted([*SCORERS, *released], key=str.casefold)


class UnknownDataSourceError(ValueError):
    """A data_source that neither the project nor verl's ``default_compute_score`` scores."""


def unknown_source_message(data_source) -> str:
    return (
        f"no scorer for data_source {data_source!r}; known: {', '.join(known_sources())} (any case), and the "
        "names verl's default_compute_score takes (openai/gsm8k, lighteval/MATH, HuggingFaceH4/MATH-500, ...); "
        "rename the source or set reward.custom_reward_function"
    )


def _verl_metrics(result) -> dict:
    """verl's score (a number, or a dict with ``score`` and maybe ``acc``) as the keys every source reports.

    verl's scorers do not say whether an answer was found, so ``format_ok`` is NaN (not measured).
    """
    score = float(result["score"] if isinstance(result, Mapping) else result)
    acc = float(result["acc"]) if isinstance(result, Mapping) and "acc" in result else float(score > 0)
    return _metrics(acc=acc, em=acc, f1=acc, score=score, format_ok=math.nan)


def compute_score(data_source: str, solution_str: str, ground_truth, extra_info: dict | None = None) -> dict:
    """Score one response (verl's custom-reward signature); see the module docstring for the rules.

    Which scorer: the project's for its own names and the released FSPO files' names as written
    (``HotpotQA``, ``MATH``...); else verl's ``default_compute_score`` for the names it takes
    (``openai/gsm8k``, ``lighteval/MATH``, its ``math``...); else the project's for its names in any case.

    Args:
        data_source: the row's ``data_source``.
        solution_str: the decoded response.
        ground_truth: ``reward_model["ground_truth"]``: a string or a list of accepted answers.
        extra_info: the row's ``extra_info`` (``incorrect_answers`` is used by the contrastive scorers).

    Returns:
        ``{"score", "acc", "em", "f1", "format_ok"}`` as floats.

    Raises:
        UnknownDataSourceError: when no scorer takes `data_source`.
    """
    name = own_scorer_name(data_source, exact=True)
    if name is None:
        if not isinstance(data_source, str):
            raise UnknownDataSourceError(unknown_source_message(data_source))
        from verl.utils.reward_score import default_compute_score

        try:
            return _verl_metrics(default_compute_score(data_source, solution_str, ground_truth, extra_info))
        except NotImplementedError:
            name = own_scorer_name(data_source)
            if name is None:
                raise UnknownDataSourceError(unknown_source_message(data_source)) from None
    answer = extract_answer(solution_str)
    if answer is None:
        return _metrics(0.0, 0.0, 0.0, 0.0, format_ok=False)
    return SCORERS[name](answer, ground_truth, extra_info)


def prepare(data_source=None, **_kwargs) -> None:
    """Import what scoring ``data_source`` needs: verl's scorers (~5 s) for a name fspo does not own, math_verify
    (~1 s) for a math source or one that may reach verl's scorers.

    :class:`fspo.training.time_limit.TimeLimitedScorer` calls it before a call's time limit starts, so the first
    ``openai/gsm8k`` row of a run is not scored 0 for the import (and the import is paid once per worker), and a
    worker that scores spans only never imports sympy.
    """
    if not isinstance(data_source, str):
        return
    name = own_scorer_name(data_source, exact=True)
    if name is None:
        import verl.utils.reward_score  # noqa: F401
    if name is None or SCORERS[name] is score_math:
        import math_verify  # noqa: F401


compute_score.prepare = prepare


def scorer_of(data_source) -> str | None:
    """Which scorer :func:`compute_score` would use: ``"fspo:<name>"``, ``"verl"``, or None (an error).

    Asks verl by scoring an empty response (its dispatch raises ``NotImplementedError`` for a name it
    does not take); a verl scorer that cannot even import counts as none.
    """
    name = own_scorer_name(data_source, exact=True)
    if name is not None:
        return f"fspo:{name}"
    if isinstance(data_source, str) and _verl_scores(data_source):
        return "verl"
    name = own_scorer_name(data_source)
    return f"fspo:{name}" if name is not None else None


@functools.lru_cache(maxsize=256)
def _verl_scores(data_source: str) -> bool:
    import contextlib
    import io

    from verl.utils.reward_score import default_compute_score

    # Some of verl's scorers print (and print tracebacks) on an empty response: keep the probe quiet.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            default_compute_score(data_source, "", "")
        except (NotImplementedError, ImportError):
            return False
        except Exception:  # noqa: BLE001 - it dispatched; the empty input is what failed
            return True
    return True
