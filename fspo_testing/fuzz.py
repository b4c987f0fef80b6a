"""Seeded hostile rollouts for the reward path, shared by ``tests/test_reward_fuzz.py`` and
``benchmarks/fuzz_reward.py`` (which runs the same generator at a larger count).

A rollout is random text built from the pieces a policy really emits, or random token ids, or a response
cut at a random token; with random data sources, ground truths and ``extra_info`` of every shape.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter

import numpy as np

from fspo_testing.rollouts import single_rollout

SOURCES = (
    "hotpotqa",
    "2wikimultihopqa",
    "synthetic_multihop",
    "simplerl_math",
    "math500",
    "gsm8k",
    "aime2024",
    "aime2025",
    "truthfulqa_gen",
    "halueval_qa",
    "halluqa_gen",
    "truthfulqa_mc1",
    "truthfulqa_mc2",
    "halluqa_mc",
)
EVIDENCE = "Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell."
PIECES = (
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<ANSWER>",
    "<think><think>",
    "</think></think>",
    " Stesta Bagu works for Vigio Shipping.",
    " Vigio Shipping is headquartered in Piobrdell.",
    " The moon is cheese.",
    "\n",
    "\n\n",
    ". ",
    "?",
    "!",
    "...",
    " ",
    "\t",
    "\u00a0",
    "\u200b",
    "\ufeff",
    "🙂",
    "👩‍👩‍👧",
    "é",
    "e\u0301",
    "巴黎是法国的首都。",
    "答案是B",
    "Piobrdell",
    "Paris",
    "yes",
    "no",
    "B",
    "(C)",
    "The answer is D",
    "$\\frac{1}{2}$",
    "\\boxed{42}",
    "\\boxed{",
    "\\frac{",
    "}",
    "{",
    "$",
    "$$",
    "\\sqrt{2}",
    "x^2+1",
    "0.5",
    "1,234",
    "-7",
    "3.0%",
    "$18",
    "1e308",
    "nan",
    "inf",
    "\\infty",
    "\\frac{3}{0}",
    "\\",
    "\x00",
)


def _random_character(rng: random.Random) -> str:
    # Any code point but the surrogates: a policy's text is decoded from tokens and never holds one.
    code = rng.randint(32, 0x2FFFF)
    return chr(code) if not 0xD800 <= code <= 0xDFFF else "?"


def _big_number(rng: random.Random) -> str:
    return str(rng.randint(1, 9)) * rng.choice((10, 400, 4301, 6000))


def _power_tower(rng: random.Random, towers: bool) -> str:
    top = 9 if towers else 3
    levels = [str(rng.randint(2, top)) for _ in range(rng.randint(2, 4 if towers else 3))]
    expression = levels[-1]
    for base in reversed(levels[:-1]):
        expression = f"{base}^{{{expression}}}"
    return f"${expression}$"


def random_text(rng: random.Random, towers: bool) -> str:
    parts = []
    for _ in range(rng.randint(0, 40)):
        roll = rng.random()
        if roll < 0.04:
            parts.append(_big_number(rng))
        elif roll < 0.06:
            parts.append(_power_tower(rng, towers))
        elif roll < 0.08:
            parts.append(rng.choice(PIECES) * rng.randint(20, 200))
        elif roll < 0.12:
            parts.append("".join(_random_character(rng) for _ in range(rng.randint(1, 12))))
        else:
            parts.append(rng.choice(PIECES))
    return "".join(parts)


def random_ground_truth(rng: random.Random):
    return rng.choice(
        [
            "Piobrdell",
            "3",
            "0.5",
            "B",
            "",
            "yes",
            _big_number(rng),
            ["Paris", "City of Paris"],
            [],
            np.array(["A", "C"], dtype=object),
            42,
            ["\\frac{1}{2}"],
            "巴黎",
        ]
    )


def random_extra_info(rng: random.Random):
    evidence = rng.choice(
        [
            EVIDENCE,
            "",
            None,
            float("nan"),
            [EVIDENCE, "More text."],
            np.array([EVIDENCE], dtype=object),
            7,
            [None, 3, EVIDENCE],
            "🙂" * 300,
            EVIDENCE * 50,
        ]
    )
    incorrect = rng.choice([["Jupiter"], "Jupiter", None, float("nan"), [], np.array(["x"], dtype=object)])
    return rng.choice(
        [
            {"index": 1, "split": "train", "evidence": evidence, "incorrect_answers": incorrect},
            {"evidence": evidence},
            {},
            None,
            float("nan"),
            "a string where a dict belongs",
        ]
    )


def fuzz_cases(seed: int, count: int, vocab_size: int, towers: bool = False) -> list[dict]:
    """``count`` seeded rollouts: {"text" or "ids", "cut", "data_source", "ground_truth", "extra_info"}."""
    rng = random.Random(seed)
    cases = []
    for _ in range(count):
        case = {
            "data_source": rng.choice(SOURCES),
            "ground_truth": random_ground_truth(rng),
            "extra_info": random_extra_info(rng),
        }
        if rng.random() < 0.1:  # raw token ids: byte tokens that decode to nothing or to U+FFFD
            case["ids"] = [rng.randrange(vocab_size) for _ in range(rng.randint(1, 200))]
        else:
            case["text"] = random_text(rng, towers)
            case["cut"] = rng.random() < 0.2  # cut at a random token, possibly inside a character
        cases.append(case)
    return cases


def build_rollout(tokenizer, case: dict, rng: random.Random):
    """One rollout of ``case`` as verl's reward loop hands it to a reward manager, and its response length."""
    if "ids" in case:
        ids = list(case["ids"])
    else:
        ids = tokenizer(case["text"], add_special_tokens=False)["input_ids"]
        if case.get("cut") and len(ids) > 1:
            ids = ids[: rng.randint(1, len(ids) - 1)]
    ids = ids or [tokenizer.pad_token_id or 0]
    return single_rollout(
        tokenizer,
        ids,
        data_source=case["data_source"],
        ground_truth=case["ground_truth"],
        extra_info=case["extra_info"],
        padding=rng.randint(0, 8),
    )


def fuzz_reward_manager(reward_manager, tokenizer, cases: list[dict], seed: int = 0, concurrency: int = 64):
    """Run every case through ``reward_manager.run_single``; returns (Counter of findings, examples)."""
    from fspo.training.reward_extra_info import decode_labels

    rng = random.Random(seed)
    counts: Counter = Counter()
    examples: list[str] = []
    keys: set | None = None

    def note(kind: str, case: dict, detail: str) -> None:
        counts[kind] += 1
        if len(examples) < 10:
            examples.append(
                f"{kind}: {detail} <- {case['data_source']} {str(case.get('text', case.get('ids')))[:120]!r}"
            )

    async def one(case: dict):
        data, length = build_rollout(tokenizer, case, rng)
        try:
            return case, length, await reward_manager.run_single(data)
        except Exception as error:  # noqa: BLE001 - a crash is what this counts
            return case, length, error

    async def run_all():
        results = []
        for start in range(0, len(cases), concurrency):
            results += await asyncio.gather(*(one(c) for c in cases[start : start + concurrency]))
        return results

    for case, length, out in asyncio.run(run_all()):
        counts["rollouts"] += 1
        if isinstance(out, Exception):
            note("crashes", case, repr(out)[:200])
            continue
        info = out["reward_extra_info"]
        try:
            decode_labels(info["fspo_labels"], length)
        except Exception as error:  # noqa: BLE001
            note("bad_labels", case, str(error)[:200])
        if not math.isfinite(float(out["reward_score"])):
            note("non_finite_rewards", case, repr(out["reward_score"]))
        keys = keys if keys is not None else set(info)
        if set(info) != keys:
            note("key_mismatches", case, str(set(info) ^ keys))
        counts["scorer_timeouts"] += int(info.get("fspo_scorer_timeout", 0))
    return counts, examples


KINDS = ("crashes", "bad_labels", "non_finite_rewards", "key_mismatches", "scorer_timeouts")
