"""Fuzz the reward path: the real FSPO reward manager on seeded random rollouts.

Each rollout is random text built from the pieces a policy really emits (think/answer tags, closed or not,
nested, LaTeX, huge numbers, power towers, CJK, emoji, long runs), or random token ids, or a response cut
at a random token (mid-character included); with random data sources, ground truths of every shape and
``extra_info`` of every shape (evidence as a string, list, array, NaN, None; the row itself a string or
NaN). Every rollout goes through ``FSPORewardManager.run_single`` as verl's reward loop calls it, many at a
time. Counted, and printed per 10,000 rollouts:

- crashes: ``run_single`` raised;
- bad labels: the decoded labels do not cover the response exactly;
- non-finite rewards: NaN or infinite ``reward_score``;
- key mismatches: a rollout's ``reward_extra_info`` keys differ from the others' (verl cannot stack them);
- scorer timeouts: the outcome scorer passed ``fspo.scorer_timeout_s`` (scored 0, counted).

    PYTHONPATH=. python benchmarks/fuzz_reward.py --rollouts 20000 --seed 0
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import time
from collections import Counter

import numpy as np

SOURCES = (
    "hotpotqa", "2wikimultihopqa", "synthetic_multihop", "simplerl_math", "math500", "gsm8k", "aime2024",
    "aime2025", "truthfulqa_gen", "halueval_qa", "halluqa_gen", "truthfulqa_mc1", "truthfulqa_mc2", "halluqa_mc",
)
EVIDENCE = "Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell."
PIECES = (
    "<think>", "</think>", "<answer>", "</answer>", "<ANSWER>", "<think><think>", "</think></think>",
    " Stesta Bagu works for Vigio Shipping.", " Vigio Shipping is headquartered in Piobrdell.", " The moon is cheese.",
    "\n", "\n\n", ". ", "?", "!", "...", " ", "\t", "\u00a0", "\u200b", "\ufeff", "🙂", "👩‍👩‍👧", "é", "e\u0301",
    "巴黎是法国的首都。", "答案是B", "Piobrdell", "Paris", "yes", "no", "B", "(C)", "The answer is D",
    "$\\frac{1}{2}$", "\\boxed{42}", "\\boxed{", "\\frac{", "}", "{", "$", "$$", "\\sqrt{2}", "x^2+1", "0.5",
    "1,234", "-7", "3.0%", "$18", "1e308", "nan", "inf", "\\infty", "\\frac{3}{0}", "\\", "\x00",
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
            "Piobrdell", "3", "0.5", "B", "", "yes", _big_number(rng), ["Paris", "City of Paris"], [],
            np.array(["A", "C"], dtype=object), 42, ["\\frac{1}{2}"], "巴黎",
        ]
    )


def random_extra_info(rng: random.Random):
    evidence = rng.choice(
        [EVIDENCE, "", None, float("nan"), [EVIDENCE, "More text."], np.array([EVIDENCE], dtype=object), 7,
         [None, 3, EVIDENCE], "🙂" * 300, EVIDENCE * 50]
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
    """One rollout as verl's reward loop hands it to a reward manager, and its response length."""
    import torch
    from verl import DataProto

    if "ids" in case:
        ids = list(case["ids"])
    else:
        ids = tokenizer(case["text"], add_special_tokens=False)["input_ids"]
        if case.get("cut") and len(ids) > 1:
            ids = ids[: rng.randint(1, len(ids) - 1)]
    ids = ids or [tokenizer.pad_token_id or 0]
    padding = rng.randint(0, 8)
    prompt = tokenizer("Question?", add_special_tokens=False)["input_ids"]
    responses = torch.full((1, len(ids) + padding), tokenizer.pad_token_id or 0)
    responses[0, : len(ids)] = torch.tensor(ids)
    attention = torch.zeros(1, len(prompt) + len(ids) + padding, dtype=torch.long)
    attention[0, : len(prompt) + len(ids)] = 1
    data = DataProto.from_single_dict(
        {
            "prompts": torch.tensor([prompt]),
            "responses": responses,
            "attention_mask": attention,
            "data_source": np.array([case["data_source"]], dtype=object),
            "reward_model": np.array([{"ground_truth": case["ground_truth"], "style": "rule"}], dtype=object),
            "extra_info": np.array([case["extra_info"]], dtype=object),
        }
    )
    return data, len(ids)


def fuzz_reward_manager(reward_manager, tokenizer, cases: list[dict], seed: int = 0, concurrency: int = 64):
    """Run every case through ``reward_manager.run_single``; returns (Counter of findings, examples)."""
    from fspo.labels import decode_labels

    rng = random.Random(seed)
    counts: Counter = Counter()
    examples: list[str] = []
    keys: set | None = None

    def note(kind: str, case: dict, detail: str) -> None:
        counts[kind] += 1
        if len(examples) < 10:
            examples.append(f"{kind}: {detail} <- {case['data_source']} {str(case.get('text', case.get('ids')))[:120]!r}")

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rollouts", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scorer-timeout-s", type=float, default=10.0)
    parser.add_argument("--towers", action="store_true", help="include power towers up to 9^{9^{9^{9}}}")
    args = parser.parse_args()

    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    from fspo.reward import FSPORewardManager
    from fspo.tiny_model import qwen_tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
    block = {"enable": True, "verifier": {"name": "lexical"}, "scorer_timeout_s": args.scorer_timeout_s}
    reward_manager = FSPORewardManager(OmegaConf.create({"fspo": block}), tokenizer, compute_score=None)
    cases = fuzz_cases(args.seed, args.rollouts, len(tokenizer), towers=args.towers)
    started = time.perf_counter()
    counts, examples = fuzz_reward_manager(reward_manager, tokenizer, cases, seed=args.seed)
    seconds = time.perf_counter() - started
    total = counts["rollouts"]
    print(f"rollouts={total} seed={args.seed} towers={args.towers} seconds={seconds:.1f} "
          f"({1000 * seconds / max(total, 1):.2f} ms/rollout)")
    for kind in KINDS:
        print(f"{kind:>20}: {counts[kind]:6d}  ({10000 * counts[kind] / max(total, 1):.2f} per 10,000)")
    for example in examples:
        print("  e.g.", example)


if __name__ == "__main__":
    main()
