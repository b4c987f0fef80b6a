"""The lexical verifier's sentence unit: a step's clauses checked against their own evidence sentences.

Properties over generated evidence (relation sentences between made-up names), then the option's path from
the config to the backend, then the measured quality on steps a trained quickstart policy wrote.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.config.verifier import verifier_config
from fspo.config.vocabulary import ConfigError
from fspo.quickstart.cli import VERIFIER
from fspo.verifier_tools.multi_fact import JOINS, multi_fact_steps
from fspo.verifier_tools.quality import balanced_accuracy
from fspo.verifiers import build_verifier
from fspo.verifiers.clauses import split_clauses
from fspo.verifiers.lexical import clause_support, lexical_support, sentence_support

JUDGED_STEPS = Path(__file__).parent / "data" / "judged_quickstart_steps.jsonl"
# The sources of judged_steps.py that a trained policy wrote: its greedy validation and fresh answers.
TRAINED_SOURCES = ("validation-after", "trained-greedy", "trained-sampled")

# Words without vowels are never stopwords and never fold a plural "s": every generated word is a content token.
_consonants = st.text(alphabet="bcdfgklmnprtvz", min_size=3, max_size=7)
_names = st.lists(_consonants.map(str.capitalize), min_size=6, max_size=12, unique=True)
_relations = st.lists(_consonants, min_size=4, max_size=8, unique=True)


@st.composite
def worlds(draw):
    """(facts, evidence): 2-5 facts "<Subject> <relation words> <Object>." over distinct names and relations."""
    names, relations = draw(_names), draw(_relations)
    count = draw(st.integers(2, min(5, len(names) // 2, len(relations))))
    facts = [(names[2 * i], relations[i], names[2 * i + 1]) for i in range(count)]
    return facts, " ".join(f"{s} {r} {o}." for s, r, o in facts)


text = st.text(alphabet=st.characters(whitelist_categories=("Ll", "Lu", "Nd", "Zs", "Po")), max_size=80)


@given(evidence=text, claim=text)
@settings(max_examples=300, deadline=None)
def test_sentence_support_never_exceeds_the_whole_evidence_score(evidence, claim):
    whole, sentence = lexical_support(evidence, claim), sentence_support(evidence, claim)
    assert math.isnan(whole) == math.isnan(sentence)
    assert math.isnan(whole) or 0.0 <= clause_support(evidence, claim) <= sentence <= whole + 1e-12


@given(world=worlds(), pick=st.integers(0, 4))
@settings(max_examples=200, deadline=None)
def test_a_claim_copied_from_one_sentence_scores_1(world, pick):
    facts, evidence = world
    subject, relation, obj = facts[pick % len(facts)]
    assert sentence_support(evidence, f"{subject} {relation} {obj}.") == 1.0


@given(world=worlds())
@settings(max_examples=200, deadline=None)
def test_a_relation_swapped_across_two_sentences_scores_below_the_whole_evidence(world):
    facts, evidence = world
    (subject, _, _), (_, relation, obj) = facts[0], facts[1]
    claim = f"{subject} {relation} {obj}."  # every word is in the evidence, the relation is not
    assert lexical_support(evidence, claim) == 1.0
    assert sentence_support(evidence, claim) < 1.0


@given(world=worlds(), join=st.sampled_from(["{a}, which {p}", "{a} which {p}", "{a} and {b}", "{a}; {b}", "{a} {p}"]))
@settings(max_examples=200, deadline=None)
def test_a_chain_of_facts_linked_by_a_name_scores_1_and_its_swap_does_not(world, join):
    """Two facts where the second's subject is the first's object, stated in one step, pass as the evidence
    states both; the same step with the second hop's object taken from a third fact fails."""
    facts, _ = world
    (s1, r1, o1), (_, r2, o2), (_, _, o3) = facts[0], facts[1], facts[-1]
    chain = [(s1, r1, o1), (o1, r2, o2)]  # the second fact's subject is the first's object
    evidence = " ".join(f"{s} {r} {o}." for s, r, o in chain + facts[2:])
    first, second = f"{s1} {r1} {o1}", f"{o1} {r2} {o2}"
    step = join.format(a=first, b=second, p=f"{r2} {o2}") + "."
    assert sentence_support(evidence, step) == 1.0
    if len(facts) > 2:  # a third fact names another object the swap can take
        swapped = join.format(a=first, b=f"{o1} {r2} {o3}", p=f"{r2} {o3}") + "."
        assert sentence_support(evidence, swapped) < lexical_support(evidence, swapped) == 1.0


def test_multi_fact_steps_of_the_synthetic_world_are_no_false_alarms():
    """Every join of JOINS over 40 synthetic worlds: true chains score 1, chains with the last hop swapped do not."""
    steps = multi_fact_steps(40)
    assert {step.join for step in steps} == set(JOINS)
    for step in steps:
        assert (sentence_support(step.evidence, step.step) == 1.0) == bool(step.label), step


def test_a_relative_clause_is_read_about_its_antecedent():
    assert split_clauses("Nora works for Bolt Mills, which is headquartered in Lima.") == [
        "Nora works for Bolt Mills",
        "Bolt Mills which is headquartered in Lima.",
    ]
    assert split_clauses("The price was 1,250 dollars at 10:30") == ["The price was 1,250 dollars at 10:30"]
    evidence = "Nora works for Bolt Mills. Tide Oil is headquartered in Lima. Bolt Mills is headquartered in Kelton."
    assert sentence_support(evidence, "Nora works for Bolt Mills, which is headquartered in Lima.") < 1.0
    assert sentence_support(evidence, "Nora works for Bolt Mills, which is headquartered in Kelton.") == 1.0


def test_evidence_unit_reaches_the_lexical_backend_and_refuses_other_values():
    evidence, claim = "Nora was born in Kelton. Sam was born in Lima.", "Nora was born in Lima."
    whole = build_verifier(verifier_config({"name": "lexical"}))
    sentence = build_verifier(verifier_config({"name": "lexical", "evidence_unit": "sentence"}))
    assert whole.score([(evidence, claim)]) == [1.0]
    assert sentence.score([(evidence, claim)])[0] < 1.0
    with pytest.raises(ConfigError, match="fspo.verifier.evidence_unit must be one of whole, sentence"):
        verifier_config({"name": "lexical", "evidence_unit": "chunk"})


def _judged_steps() -> list[dict]:
    return [json.loads(line) for line in JUDGED_STEPS.read_text().splitlines() if line.strip()]


def test_the_quickstart_verifier_separates_judge_labelled_steps_of_the_quickstart_model():
    """The quickstart's training verifier, as it configures it, on the held-out half of the steps the quickstart's
    model wrote before and after 12 training steps (benchmarks/judged_steps.py built the file from a finished
    seed-0 run), labelled by the world judge: balanced accuracy at least 0.9 on all of them and on the trained
    policy's alone, and above the whole-evidence unit's."""
    rows = [row for row in _judged_steps() if row["split"] == "heldout"]
    trained = [row for row in rows if row["source"] in TRAINED_SOURCES]
    assert len(trained) >= 50 and 0 < sum(row["label"] for row in trained) < len(trained)
    pairs, labels = [(row["evidence"], row["claim"]) for row in rows], [row["label"] for row in rows]
    assert 0 < sum(labels) < len(labels)
    quickstart = build_verifier(verifier_config(VERIFIER))
    accuracy = balanced_accuracy(quickstart.score(pairs), labels, VERIFIER["threshold"])
    whole = build_verifier(verifier_config({**VERIFIER, "evidence_unit": "whole"}))
    assert accuracy >= 0.9
    assert accuracy > balanced_accuracy(whole.score(pairs), labels, VERIFIER["threshold"])
    trained_scores = quickstart.score([(row["evidence"], row["claim"]) for row in trained])
    assert balanced_accuracy(trained_scores, [row["label"] for row in trained], VERIFIER["threshold"]) >= 0.9
