"""`lexical`'s abstention on steps that state no claim (fspo.verifiers.lexical.is_claim, abstain_non_claims)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.config.verifier import verifier_config
from fspo.data import synthetic
from fspo.data.synthetic_shortcut import example_maker
from fspo.verifiers import build_verifier
from fspo.verifiers.lexical import LexicalVerifier, is_claim

EVIDENCE = "Nora Vale works for Bolt Mills. Bolt Mills is headquartered in Lima. Lima is a city in Kesh."


@pytest.mark.parametrize(
    "step, claim",
    [
        # fragments: one name, a clause cut before its object, filler
        ("Lima.", False),
        ("Nora Vale works for", False),
        ("Let me think step by step.", False),
        ("First, find the company Nora Vale works for.", False),
        # a conclusion that only names the answer: the outcome reward scores it
        ("So the answer is Lima.", False),
        ("The answer is 1850.", False),
        # claims: relation sentences, a conclusion with its reason, a bridging step with its own predicate
        ("Nora Vale works for Bolt Mills.", True),
        ("Lima is a city in Kesh.", True),
        ("Therefore, the answer is Kesh, since Lima is in Kesh.", True),
        ("The company is headquartered in Lima.", True),
        ("The answer to 'Which magazine was started first?' is Arthur's Magazine.", True),
    ],
)
def test_a_claim_has_a_predicate_two_content_words_and_a_whole_end(step, claim):
    assert is_claim(step) is claim


WORLD_MAKERS = [synthetic.make_example, example_maker(0)]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(WORLD_MAKERS))
def test_every_fact_the_generator_writes_is_a_claim_and_every_fact_cut_before_its_object_is_not(seed, make):
    """On the ground truth the generator knows: its relation sentences and their restatements, true or with a
    wrong entity, are claims (abstention never silences a fact of the worlds); one cut before its object, or an
    entity alone, is not."""
    example = make(random.Random(seed))
    for fact in [part.rstrip(".") + "." for part in example.evidence.split(". ")]:
        assert is_claim(fact), fact
        assert is_claim(synthetic.restate(fact)), fact
        obj = fact.rstrip(".").rsplit(" in ", 1)[-1].rsplit(" for ", 1)[-1].rsplit(" by ", 1)[-1]
        assert not is_claim(fact[: -len(obj) - 1].rstrip()), fact
        assert not is_claim(obj + "."), obj
        assert not is_claim(f"So the answer is {obj}."), obj


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.sampled_from(["a", "b", "L", "N", " ", ".", ",", "'", " works for ", " is ", " Lima", " Kesh"])).map(
        "".join
    )
)
def test_abstention_only_turns_scores_into_no_verdict(step):
    """With abstention a step scores as without it, or NaN (label 0) where it states no claim."""
    plain = LexicalVerifier(evidence_unit="sentence").score([(EVIDENCE, step)])[0]
    abstaining = LexicalVerifier(evidence_unit="sentence", abstain_non_claims=True).score([(EVIDENCE, step)])[0]
    if is_claim(step):
        assert abstaining == plain or (math.isnan(plain) and math.isnan(abstaining))
    else:
        assert math.isnan(abstaining)


def test_the_option_reaches_the_verifier_from_the_config_and_is_off_by_default():
    steps = [(EVIDENCE, "Lima."), (EVIDENCE, "Nora Vale works for Bolt Mills.")]
    default = build_verifier(verifier_config({"name": "lexical", "evidence_unit": "sentence"}))
    abstaining = build_verifier(
        verifier_config({"name": "lexical", "evidence_unit": "sentence", "abstain_non_claims": True})
    )
    assert default.score(steps) == [1.0, 1.0]
    first, second = abstaining.score(steps)
    assert math.isnan(first) and second == 1.0
