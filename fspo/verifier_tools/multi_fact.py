"""Multi-fact steps over synthetic worlds: one step that states a chain of facts, true or with one hop swapped.

A reasoning step often states two hops at once ("Nora works for Bolt Mills, which is headquartered in
Lima"), while the evidence states them in two sentences. A verifier that checks a step against one
evidence sentence must not call such a step unsupported: these steps measure that (its false-alarm rate),
and their swapped twins (the last hop's object replaced by another entity of the same kind that the
evidence names) measure that it still sees a wrong hop inside the chain.

Each world of :mod:`fspo.data.synthetic` has a gold chain of 2-3 facts, each hop's subject the previous
hop's object; a step joins the whole chain in one of the ways of ``JOINS``.
"""

from __future__ import annotations

import random
import re
from typing import NamedTuple

from fspo.data.synthetic import make_example
from fspo.data.world_judge import Fact, build_world, parse_fact

# How a step joins its hops: after the first fact, each next hop is "<join> <next hop>", where a relative
# join states only the next hop's predicate ("which is headquartered in Lima").
JOINS = {
    "relative": ", {pronoun}",  # "A works for B, which is headquartered in C."
    "relative_no_comma": " {pronoun}",  # "A works for B which is headquartered in C."
    "and": " and",  # "A works for B and B is headquartered in C."
    "comma_and": ", and",
    "semicolon": ";",
    "reduced": ", {reduced}",  # "A works for B, headquartered in C." (a reduced relative clause)
    "reduced_no_comma": " {reduced}",  # "A works for B headquartered in C." (no clause boundary at all)
}
_RELATIVE_JOINS = ("relative", "relative_no_comma")
_REDUCED_JOINS = ("reduced", "reduced_no_comma")
_AUXILIARY = re.compile(r"^(?:is|was)\s+")


class MultiFactStep(NamedTuple):
    """One multi-fact step: the evidence it is checked against, the step, 1 if every hop is true, the join."""

    evidence: str
    step: str
    label: int
    join: str
    group: str


def _predicate(fact_sentence: str, subject: str) -> str:
    """``fact_sentence`` without its subject and final period ("is headquartered in Lima")."""
    return fact_sentence.rstrip(".")[len(subject) :].strip()


def join_chain(hops: list[str], join: str, types: dict[str, str]) -> str:
    """The fact sentences ``hops`` (each hop's subject the previous hop's object) as one step joined by ``join``."""
    facts = [parse_fact(hop) for hop in hops]
    text = hops[0].rstrip(".")
    for hop, fact in zip(hops[1:], facts[1:]):
        if join in _RELATIVE_JOINS:
            pronoun = "who" if types.get(fact.subject) == "person" else "which"
            text += JOINS[join].format(pronoun=pronoun) + " " + _predicate(hop, fact.subject)
        elif join in _REDUCED_JOINS:
            text += JOINS[join].format(reduced=_AUXILIARY.sub("", _predicate(hop, fact.subject)))
        else:
            text += JOINS[join] + " " + hop.rstrip(".")
    return text + "."


def swap_last_object(hops: list[str], evidence: str) -> list[str] | None:
    """``hops`` with the last hop's object replaced by another entity of its kind that the evidence names
    (a false chain whose words all occur in the evidence), or None when the evidence names no other."""
    world = build_world(evidence)
    last: Fact = parse_fact(hops[-1])
    kind = world.types[last.object]
    others = sorted(name for name, other in world.types.items() if other == kind and name != last.object)
    others = [name for name in others if Fact(last.subject, last.relation, name) not in world.facts]
    if not others:
        return None
    return [*hops[:-1], hops[-1].rstrip(".")[: -len(last.object)] + others[0] + "."]


def multi_fact_steps(worlds: int, seed: int = 0) -> list[MultiFactStep]:
    """For each of ``worlds`` synthetic worlds and each join: its gold chain as one step (label 1) and, where
    the evidence allows, the same chain with the last hop swapped (label 0)."""
    steps = []
    for index in range(worlds):
        example = make_example(random.Random(f"{seed}:multi-fact:{index}"))
        types = build_world(example.evidence).types
        swapped = swap_last_object(list(example.gold_facts), example.evidence)
        for join in JOINS:
            for hops, label in ((list(example.gold_facts), 1), (swapped, 0)):
                if hops is not None:
                    step = join_chain(hops, join, types)
                    steps.append(MultiFactStep(example.evidence, step, label, join, example.question))
    return steps
