"""The shortcut world: a test bed built for the paper's premise, where a wrong chain still reaches the right answer.

FSPO's premise is that outcome-only RL rewards "flawed positives" (a right final answer reached through
unsupported or invented steps) and so teaches hallucinated reasoning. In the default synthetic world
(:mod:`fspo.data.synthetic`) a wrong chain nearly always ends in a wrong answer, so outcome reward itself
punishes hallucinated steps. This world is built so that it does not:

- **Echo chains.** Beside the gold chain the evidence holds a second chain over the same relations, from
  another subject, that ends in the *same* answer ("Q was born in Dorvale. Dorvale is a city in Kesh."
  beside "P was born in Lumton. Lumton is a city in Kesh."). A step that takes a hop from the wrong chain
  ("P was born in Dorvale.") is contradicted by the world, yet the answer it leads to is right.
- **Shortcut facts.** Where a relation allows it, a fact links the question's subject straight to the
  answer by another relation ("P was born in Lima." for "where is P's employer headquartered?", answer
  Lima), so a step that misreads that relation ("P is headquartered in Lima.") still answers right.
- **A small answer set.** Each question kind's answers come from ``answer_set_size`` names fixed per data
  seed, so across a training set a guessed answer is often right.

Every fact is one of the default world's relation sentences, so the world judge
(:mod:`fspo.data.world_judge`) reads these rows exactly as it reads the default ones, and the
outcome scorer is the same (``data_source`` stays ``synthetic_multihop``); ``extra_info["world"]`` says
``shortcut``. It is a test bed for the premise, not a claim about natural data: report it beside the
default world, never instead of it.

    fspo data synthetic --world shortcut --size 512 --test-size 32 --seed 0
"""

from __future__ import annotations

import random
from collections.abc import Callable

from fspo.data.builder import Example
from fspo.data.synthetic_facts import (
    born_in,
    city_in,
    city_name,
    company_name,
    country_name,
    founded_in,
    headquartered_in,
    mentored_by,
    person_name,
    works_for,
)

WORLD = "shortcut"
ANSWER_SET_SIZE = 3
MAX_FACTS = 6  # as in the default world: the quickstart's prompt length holds six facts

# The kind of entity each question kind answers with.
_ANSWER_TYPES = {
    "birth_country": "country",
    "employer_city": "city",
    "employer_year": "year",
    "employer_country": "country",
    "mentor_birthplace": "city",
}
QUESTION_KINDS = tuple(_ANSWER_TYPES)  # the default world's kinds
_MAKERS: dict[str, Callable[[random.Random], str]] = {
    "person": person_name,
    "city": city_name,
    "country": country_name,
    "company": company_name,
    "year": lambda rng: str(rng.randrange(1801, 1999)),
}


def _distinct(rng: random.Random, count: int, make: Callable[[random.Random], str], taken: set[str]) -> list[str]:
    """``count`` names drawn with ``make``, distinct from each other and from ``taken`` (which they join)."""
    names: list[str] = []
    while len(names) < count:
        name = make(rng)
        if name not in taken:
            names.append(name)
            taken.add(name)
    return names


def answer_set(seed: int, size: int = ANSWER_SET_SIZE) -> dict[str, list[str]]:
    """The answers of a data seed: ``size`` names per answer type (city, country, year), the same for every split."""
    if size < 1:
        raise ValueError(f"answer_set_size must be >= 1, got {size}")
    rng, taken = random.Random(f"{seed}:shortcut-answers"), set()
    return {kind: _distinct(rng, size, _MAKERS[kind], taken) for kind in ("city", "country", "year")}


def _question(
    kind: str, answer: str, rng: random.Random, taken: set[str]
) -> tuple[str, list[str], list[str], list[str]]:
    """(question, gold facts in hop order, echo chain, shortcut and other distractor facts) for one kind."""
    p, q, r = _distinct(rng, 3, person_name, taken)
    c1, c2, c3 = _distinct(rng, 3, city_name, taken)
    (k2,) = _distinct(rng, 1, country_name, taken)
    co1, co2 = _distinct(rng, 2, company_name, taken)
    (y2,) = _distinct(rng, 1, _MAKERS["year"], taken)
    if kind == "birth_country":
        # No relation links a person to a country, so no shortcut fact: a stray city of another country instead.
        return (
            f"In which country was {p} born?",
            [born_in(p, c1), city_in(c1, answer)],
            [born_in(q, c2), city_in(c2, answer)],
            [born_in(r, c3), city_in(c3, k2)],
        )
    if kind == "employer_city":
        return (
            f"In which city is the company that {p} works for headquartered?",
            [works_for(p, co1), headquartered_in(co1, answer)],
            [works_for(q, co2), headquartered_in(co2, answer)],
            [born_in(p, answer), born_in(q, c2)],
        )
    if kind == "employer_year":
        return (
            f"In what year was the company that {p} works for founded?",
            [works_for(p, co1), founded_in(co1, answer)],
            [works_for(q, co2), founded_in(co2, answer)],
            [born_in(p, c1), founded_in(_distinct(rng, 1, company_name, taken)[0], y2)],
        )
    if kind == "employer_country":
        return (
            f"In which country is the company that {p} works for headquartered?",
            [works_for(p, co1), headquartered_in(co1, c1), city_in(c1, answer)],
            [headquartered_in(co2, c2), city_in(c2, answer)],
            [works_for(q, co2), city_in(c3, k2)],
        )
    if kind == "mentor_birthplace":
        return (
            f"In which city was the mentor of {p} born?",
            [mentored_by(p, q), born_in(q, answer)],
            [mentored_by(r, p), born_in(r, answer)],
            [born_in(p, answer), born_in(_distinct(rng, 1, person_name, taken)[0], c3)],
        )
    raise ValueError(f"unknown question kind {kind!r}")


def make_example(rng: random.Random, answers: dict[str, list[str]]) -> Example:
    """One shortcut-world question: the gold chain, an echo chain to the same answer, and 0-2 of the kind's
    shortcut and distractor facts, shuffled (at most :data:`MAX_FACTS`); the answer comes from ``answers``."""
    kind = rng.choice(QUESTION_KINDS)
    answer = rng.choice(answers[_ANSWER_TYPES[kind]])
    taken = {name for names in answers.values() for name in names}
    question, gold, echo, extra = _question(kind, answer, rng, taken)
    room = MAX_FACTS - len(gold) - len(echo)
    facts = gold + echo + rng.sample(extra, rng.randint(0, min(room, len(extra))))
    rng.shuffle(facts)
    return Example(question=question, ground_truth=answer, evidence=" ".join(facts), gold_facts=gold)


def example_maker(seed: int, answer_set_size: int = ANSWER_SET_SIZE) -> Callable[[random.Random], Example]:
    """The shortcut world's ``make_example`` for one data seed (its answer set fixed)."""
    answers = answer_set(seed, answer_set_size)
    return lambda rng: make_example(rng, answers)
