"""An independent step judge for the synthetic world (:mod:`fspo.data.synthetic`).

The synthetic generator writes every fact of a question's world as one of six relation sentences, so the
world is known exactly: the facts in ``extra_info["evidence"]`` (the gold chain in
``extra_info["gold_facts"]`` plus the distractors). This judge reads the relation claims a reasoning step
makes (``subject relation object``, by rules on the world's entities and relation phrases) and compares
them with the world's facts. It shares nothing with the training verifiers (no word overlap, no model),
so a policy trained to please a verifier cannot please this judge by the same trick.

Verdicts:
    ``supported``: every claim of the step is a fact of the world.
    ``contradicted``: a claim is not (an invented relation between the world's entities, a swapped
        entity, an entity the world does not have), or the step names two or more of the world's
        entities with no relation phrase the world uses (an invented relation such as "founded").
    ``not_a_claim``: no claim to check ("Let me think.", "So the answer is Lima.").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SUPPORTED, CONTRADICTED, NOT_A_CLAIM = "supported", "contradicted", "not_a_claim"

# The generator's relation sentences, as (relation, pattern); every evidence fact matches one.
_FACT_PATTERNS = (
    ("born_in", re.compile(r"^(?P<s>.+?) was born in (?P<o>.+?)\.?$")),
    ("city_in", re.compile(r"^(?P<s>.+?) is a city in (?P<o>.+?)\.?$")),
    ("works_for", re.compile(r"^(?P<s>.+?) works for (?P<o>.+?)\.?$")),
    ("headquartered_in", re.compile(r"^(?P<s>.+?) is headquartered in (?P<o>.+?)\.?$")),
    ("founded_in", re.compile(r"^(?P<s>.+?) was founded in (?P<o>\d{3,4})\.?$")),
    ("mentored_by", re.compile(r"^(?P<s>.+?) was mentored by (?P<o>.+?)\.?$")),
)

# Phrases a step may use for each relation: the generator's own, its restatements (fspo.data.synthetic's
# restate: "A's birthplace is B", "The headquarters of A are in B", "B was the mentor of A") and close
# paraphrases. "is in"/"are in"/"is located in" mean city_in for a city and headquartered_in for a company
# (resolved by type). A phrase of _INVERSE names its relation's object first ("B was the mentor of A").
_STEP_PHRASES = (
    ("born_in", r"(?:was|is) born in|birthplace is|birthplace was"),
    ("city_in", r"is a city in|is a city of"),
    ("works_for", r"works for|works at|is employed by|worked for"),
    (
        "headquartered_in",
        r"is headquartered in|is based in|has its headquarters in|headquarters (?:are|is) in|headquartered in",
    ),
    ("founded_in", r"was founded in|was established in|founded in"),
    ("mentored_by", r"was mentored by|is mentored by"),
    ("mentor_of", r"(?:was|is) the mentor of|mentored"),
    ("located_in", r"is located in|are located in|is in|are in|lies in"),
)
_INVERSE = {"mentor_of": "mentored_by"}
_PHRASE = re.compile(
    r"\b(?:" + "|".join(f"(?P<{name}>{phrase})" for name, phrase in _STEP_PHRASES) + r")\b", re.IGNORECASE
)
# A capitalised name (one or more capitalised words) or a year: the spans a claim's arguments come from.
_NAME = re.compile(r"\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*|\b\d{3,4}\b")
# Capitalised words that start a sentence or refer back, never a name.
_NOT_NAMES = frozenset(
    "the a an so then therefore thus hence first next second finally also and but he she it they his her its "
    "their this that which who answer step context question we i in on at of for by to from as since".split()
)


@dataclass(frozen=True)
class Fact:
    """One relation of the world: ``subject relation object`` (``object`` of ``founded_in`` is the year)."""

    subject: str
    relation: str
    object: str


@dataclass(frozen=True)
class World:
    """The facts of one question's world and the type of each entity (person, city, country, company, year)."""

    facts: frozenset[Fact]
    types: dict[str, str]
    gold: frozenset[Fact] = frozenset()

    @property
    def entities(self) -> list[str]:
        """Entity names, longest first (so "Bolt Mills" is matched before a shorter name inside it)."""
        return sorted(self.types, key=len, reverse=True)


@dataclass(frozen=True)
class StepJudgment:
    """A step's verdict, the claims read from it, and whether every claim is a hop of the gold chain."""

    verdict: str
    claims: tuple[Fact, ...] = ()
    on_gold_chain: bool = False


_SLOT_TYPES = {
    "born_in": ("person", "city"),
    "city_in": ("city", "country"),
    "works_for": ("person", "company"),
    "headquartered_in": ("company", "city"),
    "founded_in": ("company", "year"),
    "mentored_by": ("person", "person"),
}


def parse_fact(sentence: str) -> Fact | None:
    """The fact a generator sentence states ("Sam Oke works for Tide Oil."), or None for any other sentence."""
    sentence = sentence.strip()
    for relation, pattern in _FACT_PATTERNS:
        match = pattern.match(sentence)
        if match:
            return Fact(match["s"].strip(), relation, match["o"].strip())
    return None


def _sentences(text: str) -> list[str]:
    # Generator sentences end with "." and names never contain one.
    return [part.strip() for part in re.split(r"(?<=\.)\s+", text.strip()) if part.strip()]


def build_world(evidence: str, gold_facts: Iterable[str] = ()) -> World:
    """The world a synthetic row's evidence describes.

    Args:
        evidence: ``extra_info["evidence"]``: the world's facts, one generator sentence each.
        gold_facts: ``extra_info["gold_facts"]``: the hops that answer the question.

    Raises:
        ValueError: a sentence of the evidence is not one of the generator's relations (not a synthetic row).
    """
    facts, types = set(), {}
    for sentence in _sentences(evidence):
        fact = parse_fact(sentence)
        if fact is None:
            raise ValueError(f"not a synthetic-world fact: {sentence!r}")
        facts.add(fact)
        subject_type, object_type = _SLOT_TYPES[fact.relation]
        types.setdefault(fact.subject, subject_type)
        types.setdefault(fact.object, object_type)
    gold = {fact for fact in map(parse_fact, gold_facts) if fact is not None}
    return World(frozenset(facts), types, frozenset(gold))


def _mentions(text: str, world: World) -> list[tuple[int, int, str]]:
    """(start, end, name) of every entity named in `text`: the world's own, then any other name."""
    found: list[tuple[int, int, str]] = []
    taken = [False] * len(text)
    for entity in world.entities:
        for match in re.finditer(rf"\b{re.escape(entity)}\b", text):
            if not any(taken[match.start() : match.end()]):
                found.append((match.start(), match.end(), entity))
                taken[match.start() : match.end()] = [True] * (match.end() - match.start())
    for match in _NAME.finditer(text):
        words = match.group().split()
        while words and words[0].lower() in _NOT_NAMES:
            words = words[1:]
        if not words:
            continue
        start = match.end() - len(" ".join(words))
        if not any(taken[start : match.end()]):
            found.append((start, match.end(), " ".join(words)))
    return sorted(found)


def _relation(phrase_group: str, subject: str, world: World) -> str:
    if phrase_group != "located_in":
        return phrase_group
    return "headquartered_in" if world.types.get(subject) == "company" else "city_in"


def read_claims(step: str, world: World) -> tuple[list[Fact], int]:
    """The relation claims a step makes, and how many distinct entities it names.

    A claim's subject is the nearest name before its relation phrase ("Lima" in "born in Lima, which is in
    Peru"), its object the first name after it and before the next phrase. A phrase without a name on
    both sides (an anaphor: "The company is based in Lima") makes no claim.
    """
    mentions = _mentions(step, world)
    phrases = list(_PHRASE.finditer(step))
    claims = []
    for index, phrase in enumerate(phrases):
        limit = phrases[index + 1].start() if index + 1 < len(phrases) else len(step)
        before = [m for m in mentions if m[1] <= phrase.start()]
        after = [m for m in mentions if m[0] >= phrase.end() and m[1] <= limit]
        if before and after:
            subject, obj = before[-1][2], after[0][2]
            if phrase.lastgroup in _INVERSE:
                claims.append(Fact(obj, _INVERSE[phrase.lastgroup], subject))
            else:
                claims.append(Fact(subject, _relation(phrase.lastgroup, subject, world), obj))
    return claims, len({m[2] for m in mentions})


def judge_step(step: str, world: World) -> StepJudgment:
    """Judges one reasoning step against the world's facts (see the module docstring for the verdicts)."""
    claims, named = read_claims(step, world)
    if not claims:
        return StepJudgment(CONTRADICTED if named >= 2 else NOT_A_CLAIM)
    verdict = SUPPORTED if all(claim in world.facts for claim in claims) else CONTRADICTED
    on_gold = verdict == SUPPORTED and all(claim in world.gold for claim in claims)
    return StepJudgment(verdict, tuple(claims), on_gold)


def judge_steps(steps: Sequence[str], evidence: str, gold_facts: Iterable[str] = ()) -> list[StepJudgment]:
    """Judges each step of one response against the world of its row's evidence."""
    world = build_world(evidence, gold_facts)
    return [judge_step(step, world) for step in steps]
