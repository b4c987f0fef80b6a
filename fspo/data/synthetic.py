"""Synthetic evidence-grounded multi-hop QA over fictional people, cities, countries and companies.

Each row is a small made-up world: a chain of 2-3 facts answers the question, and 1-3 distractor facts
about other made-up entities share its relations. Nothing can be answered from world knowledge, so a
model must read the evidence, and a step verifier can be scored against known truth: the gold fact
behind each hop is in ``extra_info["gold_facts"]``.

    fspo data synthetic --size 1000 --test-size 100 --seed 0

``--world shortcut`` builds instead the test bed of :mod:`fspo.data.synthetic_shortcut`, where a wrong chain
often still reaches the right answer (the paper's "flawed positives").
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from collections.abc import Callable

from fspo.config.numeric_options import NON_NEGATIVE_COUNT, SEED
from fspo.data.builder import Example
from fspo.data.io import make_row, write_parquet
from fspo.data.synthetic_facts import (
    born_in,
    city_in,
    city_name,
    company_name,
    country_name,
    distinct_names,
    founded_in,
    headquartered_in,
    mentored_by,
    person_name,
    works_for,
)
from fspo.data.synthetic_shortcut import example_maker as shortcut_example_maker
from fspo.training.prompt_formats import PROMPT_FORMATS, build_messages, check_prompt_format
from fspo.utils.arguments import HelpFormatter, UsageError, check_count, refuse
from fspo.utils.output_dir import check_output_paths, output_option, output_set

DATA_SOURCE = "synthetic_multihop"
# "default" is the world above; "shortcut" the test bed of fspo.data.synthetic_shortcut.
WORLDS = ("default", "shortcut")


def _world(rng: random.Random) -> dict:
    people = distinct_names(rng, 3, person_name)
    cities = distinct_names(rng, 3, city_name)
    return {
        "people": people,
        "cities": cities,
        "countries": distinct_names(rng, 2, country_name),
        "companies": distinct_names(rng, 2, company_name),
        "years": rng.sample(range(1801, 1999), 2),
    }


def _question(kind: str, w: dict) -> tuple[str, str, list[str], list[str]]:
    """(question, answer, gold facts in hop order, distractor facts) for one question kind."""
    p, q, r = w["people"]
    c1, c2, c3 = w["cities"]
    k1, k2 = w["countries"]
    co1, co2 = w["companies"]
    y1, y2 = w["years"]
    if kind == "birth_country":
        return (
            f"In which country was {p} born?",
            k1,
            [born_in(p, c1), city_in(c1, k1)],
            [born_in(q, c2), city_in(c2, k2), city_in(c3, k1)],
        )
    if kind == "employer_city":
        return (
            f"In which city is the company that {p} works for headquartered?",
            c1,
            [works_for(p, co1), headquartered_in(co1, c1)],
            [works_for(q, co2), headquartered_in(co2, c2)],
        )
    if kind == "employer_year":
        return (
            f"In what year was the company that {p} works for founded?",
            str(y1),
            [works_for(p, co1), founded_in(co1, y1)],
            [works_for(q, co2), founded_in(co2, y2), born_in(p, c1)],
        )
    if kind == "employer_country":
        return (
            f"In which country is the company that {p} works for headquartered?",
            k1,
            [works_for(p, co1), headquartered_in(co1, c1), city_in(c1, k1)],
            [headquartered_in(co2, c2), city_in(c2, k2)],
        )
    if kind == "mentor_birthplace":
        return (
            f"In which city was the mentor of {p} born?",
            c2,
            [mentored_by(p, q), born_in(q, c2)],
            [born_in(p, c1), mentored_by(r, p), born_in(r, c3)],
        )
    raise ValueError(f"unknown question kind {kind!r}")


QUESTION_KINDS = ("birth_country", "employer_city", "employer_year", "employer_country", "mentor_birthplace")


def _example_and_world(rng: random.Random) -> tuple[Example, dict]:
    kind = rng.choice(QUESTION_KINDS)
    world = _world(rng)
    question, answer, gold, distractors = _question(kind, world)
    chosen = rng.sample(distractors, rng.randint(1, min(3, len(distractors), 6 - len(gold))))
    facts = gold + chosen
    rng.shuffle(facts)
    return Example(question=question, ground_truth=answer, evidence=" ".join(facts), gold_facts=gold), world


def make_example(rng: random.Random) -> Example:
    """One question over a fresh fictional world: 2-3 gold facts and 1-3 distractors, shuffled (3-6 facts)."""
    return _example_and_world(rng)[0]


def _false_counterpart(fact: str, world: dict, rng: random.Random) -> str:
    """``fact`` with its object swapped for another entity of the same kind from the same world.

    Every relation is a function of its subject (one birthplace, one employer, one mentor, ...), so the
    swapped sentence is false in the world. The new object often appears in the evidence through a
    distractor fact, so word overlap alone cannot tell the two apart.
    """
    for entities in world.values():
        names = [str(e) for e in entities]
        for name in names:
            if fact.endswith(f" {name}."):
                others = [n for n in names if n != name and n not in fact]
                return fact[: -len(name) - 1] + rng.choice(others) + "."
    raise ValueError(f"no entity of the world ends the fact {fact!r}")


# Each relation sentence restated in other words, as a reasoning step would (subject, object order kept).
_RESTATEMENTS = (
    (re.compile(r"(.+) was born in (.+)\.$"), "{0}'s birthplace is {1}."),
    (re.compile(r"(.+) is a city in (.+)\.$"), "{0} lies in {1}."),
    (re.compile(r"(.+) works for (.+)\.$"), "{0} is employed by {1}."),
    (re.compile(r"(.+) is headquartered in (.+)\.$"), "The headquarters of {0} are in {1}."),
    (re.compile(r"(.+) was founded in (.+)\.$"), "{0} was established in {1}."),
    (re.compile(r"(.+) was mentored by (.+)\.$"), "{1} was the mentor of {0}."),
)


def restate(fact: str) -> str:
    """A relation sentence in other words ("A works for B." -> "A is employed by B.")."""
    for pattern, template in _RESTATEMENTS:
        match = pattern.match(fact)
        if match:
            return template.format(*match.groups())
    raise ValueError(f"not a relation sentence of the synthetic world: {fact!r}")


def labelled_facts(rng: random.Random, restated: bool = False) -> tuple[Example, list[tuple[str, int]]]:
    """A world's example and verifier claims about it: each gold fact (label 1) and its false counterpart (label 0).

    The claims are checked against ``example.evidence``, the gold and distractor facts a model reads.
    ``restated`` puts both in other words: a gold fact copied from the evidence is caught by exact match
    alone, a restated one needs the verifier to read.
    """
    example, world = _example_and_world(rng)
    claims = []
    for fact in example.gold_facts:
        claims += [(fact, 1), (_false_counterpart(fact, world, rng), 0)]
    if restated:
        claims = [(restate(claim), label) for claim, label in claims]
    return example, claims


def make_rows(
    num_rows: int,
    seed: int = 0,
    prompt_format: str = "qwen-base",
    split: str = "train",
    evidence_in_prompt: bool = True,
    world: str = "default",
) -> list[dict]:
    """`num_rows` synthetic multi-hop rows in the project's verl format; the same seed gives the same rows.

    Rows of different splits come from different random streams, so train and test do not repeat each other.
    ``world`` is one of :data:`WORLDS`; a ``shortcut`` row says so in ``extra_info["world"]``.
    """
    check_prompt_format(prompt_format)
    if num_rows < 0:
        raise ValueError(f"num_rows must be >= 0, got {num_rows}")
    make = _example_maker(world, seed)
    rows = []
    for index in range(num_rows):
        example = make(random.Random(f"{seed}:{split}:{index}"))
        rows.append(
            make_row(
                data_source=DATA_SOURCE,
                prompt=build_messages(example.user_text(evidence_in_prompt), prompt_format),
                ability="factual_qa",
                ground_truth=example.ground_truth,
                index=index,
                split=split,
                question=example.question,
                evidence=example.evidence,
                gold_facts=example.gold_facts,
            )
        )
    for row in rows if world != "default" else ():
        row["extra_info"]["world"] = world
    return rows


def _example_maker(world: str, seed: int) -> Callable[[random.Random], Example]:
    if world == "default":
        return make_example
    if world == "shortcut":
        return shortcut_example_maker(seed)
    raise ValueError(f"unknown world {world!r}; known worlds: {', '.join(WORLDS)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        formatter_class=HelpFormatter, prog="fspo data synthetic", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--output-dir",
        type=output_option("fspo data synthetic", "--output-dir"),
        default="data/synthetic",
        help="where <split>.parquet is written",
    )
    parser.add_argument("--size", type=NON_NEGATIVE_COUNT.parse, default=1000, help="train rows")
    parser.add_argument("--test-size", type=NON_NEGATIVE_COUNT.parse, default=100, help="test rows")
    parser.add_argument(
        "--seed", type=SEED.parse, default=0, help="seed of the worlds and questions (same seed, same rows)"
    )
    parser.add_argument(
        "--prompt-format",
        default="qwen-base",
        choices=PROMPT_FORMATS,
        help="chat format of the prompts (fspo.training.prompt_formats)",
    )
    parser.add_argument(
        "--evidence-in-prompt",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="put the evidence in the prompt as context",
    )
    parser.add_argument(
        "--world",
        default="default",
        choices=WORLDS,
        help="default: the world above; shortcut: a test bed where wrong chains often reach the right answer",
    )
    args = parser.parse_args(argv)

    try:
        # 0 skips a split, as `fspo data` builders build only the splits asked for; a negative size is a typo.
        check_count("--size", args.size, minimum=0)
        check_count("--test-size", args.test_size, minimum=0)
        if not args.size and not args.test_size:
            raise UsageError("--size and --test-size are both 0: nothing to build")
        sizes = {split: size for split, size in (("train", args.size), ("test", args.test_size)) if size > 0}
        folder = check_output_paths(
            "--output-dir", args.output_dir, [f"{split}.parquet" for split in sizes], "fspo data synthetic"
        )
    except UsageError as error:
        return refuse("fspo data synthetic: error", error)
    built = {}
    with output_set(folder, "--output-dir", "fspo data synthetic") as staging:  # the splits move in together
        for split, size in sizes.items():
            rows = make_rows(size, args.seed, args.prompt_format, split, args.evidence_in_prompt, args.world)
            write_parquet(rows, staging / f"{split}.parquet")
            built[split] = len(rows)
    for split, count in built.items():
        print(f"synthetic {split}: {count} rows -> {folder / f'{split}.parquet'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
