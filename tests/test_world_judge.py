"""The synthetic world's independent step judge: hand-written steps, and every generated world."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.data.synthetic import make_example
from fspo.data.world_judge import (
    CONTRADICTED,
    NOT_A_CLAIM,
    SUPPORTED,
    Fact,
    build_world,
    judge_step,
    parse_fact,
)

EVIDENCE = (
    "Nora Vik works for Bolt Mills. Sam Oke works for Tide Labs. Bolt Mills is headquartered in Limaton. "
    "Tide Labs is headquartered in Dorvale. Bolt Mills was founded in 1850. Limaton is a city in Kestland."
)
GOLD = ["Nora Vik works for Bolt Mills.", "Bolt Mills is headquartered in Limaton."]
WORLD = build_world(EVIDENCE, GOLD)


@pytest.mark.parametrize(
    "step, verdict, on_gold_chain",
    [
        # true hops, as copied and as paraphrased
        ("Nora Vik works for Bolt Mills.", SUPPORTED, True),
        ("Bolt Mills is based in Limaton", SUPPORTED, True),
        ("Nora Vik works for Bolt Mills, which is headquartered in Limaton.", SUPPORTED, True),
        ("Limaton is in Kestland.", SUPPORTED, False),
        # a copied distractor fact is true in the world, but no hop of the answer
        ("Sam Oke works for Tide Labs.", SUPPORTED, False),
        # invented relations: a phrase the world has for a pair it does not, or no phrase it has
        ("Nora Vik was born in Limaton.", CONTRADICTED, False),
        ("Nora Vik founded Bolt Mills.", CONTRADICTED, False),
        ("Nora Vik was mentored by Sam Oke.", CONTRADICTED, False),
        # swapped entities
        ("Bolt Mills is headquartered in Dorvale.", CONTRADICTED, False),
        ("Sam Oke works for Bolt Mills.", CONTRADICTED, False),
        ("Limaton is headquartered in Bolt Mills.", CONTRADICTED, False),
        ("Bolt Mills was founded in 1901.", CONTRADICTED, False),
        # an entity the world does not have
        ("Nora Vik works for Bolt Mill.", CONTRADICTED, False),
        ("Nora Vik works for Bolt Mills, which is headquartered in Paris.", CONTRADICTED, False),
        # no claim
        ("Let me think step by step.", NOT_A_CLAIM, False),
        ("So the answer is Limaton.", NOT_A_CLAIM, False),
        ("First, find the company Nora Vik works for.", NOT_A_CLAIM, False),
        ("The company is headquartered in Limaton.", NOT_A_CLAIM, False),
        ("In 1850 the world was young.", NOT_A_CLAIM, False),
    ],
)
def test_hand_written_steps(step, verdict, on_gold_chain):
    judgment = judge_step(step, WORLD)
    assert (judgment.verdict, judgment.on_gold_chain) == (verdict, on_gold_chain), judgment


def test_claims_name_the_relation_and_both_entities():
    judgment = judge_step("Nora Vik works for Bolt Mills, which is headquartered in Limaton.", WORLD)
    assert judgment.claims == (
        Fact("Nora Vik", "works_for", "Bolt Mills"),
        Fact("Bolt Mills", "headquartered_in", "Limaton"),
    )


def test_evidence_that_is_not_a_synthetic_world_is_refused():
    with pytest.raises(ValueError, match="not a synthetic-world fact"):
        build_world("The Eiffel Tower is tall.")


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=10**9))
def test_every_fact_of_a_generated_world_is_supported_and_a_swap_is_not(seed):
    example = make_example(random.Random(seed))
    world = build_world(example.evidence, example.gold_facts)
    for sentence in example.evidence.split(". "):
        assert judge_step(sentence, world).verdict == SUPPORTED, sentence
    for gold in example.gold_facts:
        assert judge_step(gold, world).on_gold_chain
        fact = parse_fact(gold)
        object_type = world.types[fact.object]
        for other in (e for e, kind in world.types.items() if kind == object_type and e != fact.object):
            swapped = gold.replace(fact.object, other)
            expected = SUPPORTED if Fact(fact.subject, fact.relation, other) in world.facts else CONTRADICTED
            assert judge_step(swapped, world).verdict == expected, swapped
