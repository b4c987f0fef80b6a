"""The synthetic worlds' vocabulary: made-up names of people, cities, countries and companies, and the six
relation sentences every fact of a world is written in (the world judge reads exactly these).

Shared by the default world (:mod:`fspo.data.synthetic`) and the shortcut test bed
(:mod:`fspo.data.synthetic_shortcut`).
"""

from __future__ import annotations

import random
from collections.abc import Callable

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "th", "br", "kr", "st")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "io")
_CITY_ENDINGS = ("ton", "vale", "mora", "haven", "burg", "dell")
_COUNTRY_ENDINGS = ("ia", "land", "ar", "esh")
_COMPANY_KINDS = ("Works", "Labs", "Foundry", "Textiles", "Shipping", "Instruments")


def _word(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)).capitalize()


def distinct_names(rng: random.Random, count: int, make: Callable[[random.Random], str]) -> list[str]:
    """`count` distinct names drawn with `make`."""
    names: list[str] = []
    while len(names) < count:
        name = make(rng)
        if name not in names:
            names.append(name)
    return names


def person_name(rng):
    return f"{_word(rng, 2)} {_word(rng, rng.choice((2, 3)))}"


def city_name(rng):
    return _word(rng, 2).rstrip("aeiou") + rng.choice(_CITY_ENDINGS)


def country_name(rng):
    return _word(rng, 2).rstrip("aeiou") + rng.choice(_COUNTRY_ENDINGS)


def company_name(rng):
    return f"{_word(rng, 2)} {rng.choice(_COMPANY_KINDS)}"


# Relation sentences; every fact in the evidence is one of these.
def born_in(person, city):
    return f"{person} was born in {city}."


def city_in(city, country):
    return f"{city} is a city in {country}."


def works_for(person, company):
    return f"{person} works for {company}."


def headquartered_in(company, city):
    return f"{company} is headquartered in {city}."


def founded_in(company, year):
    return f"{company} was founded in {year}."


def mentored_by(person, mentor):
    return f"{person} was mentored by {mentor}."
