"""The world judge against the generator's own templates: every relation sentence and every restatement the
generator writes, true and with a wrong entity, in both worlds; and the judge shares no code with the verifier."""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

from fspo.data import synthetic
from fspo.data.synthetic_shortcut import example_maker
from fspo.data.world_judge import CONTRADICTED, SUPPORTED, build_world, judge_step

ROOT = Path(__file__).resolve().parents[1]
# The generator's restatement table: (pattern of a relation sentence, its restatement). Every evidence fact
# matches one pattern (synthetic.restate raises otherwise), so the table also enumerates the relation sentences.
TEMPLATES = synthetic._RESTATEMENTS
EXAMPLES = 150  # per world: enough that every template gets true and wrong-entity versions (checked below)
WORLD_MAKERS = {"default": synthetic.make_example, "shortcut": example_maker(0)}


def _facts(evidence: str) -> list[str]:
    return [part if part.endswith(".") else part + "." for part in evidence.split(". ")]


def _template(fact: str) -> int:
    return next(index for index, (pattern, _) in enumerate(TEMPLATES) if pattern.match(fact))


def _wrong_entity_versions(fact: str, facts: list[str]) -> list[str]:
    """``fact`` with its subject or its object swapped for the subject or object another fact of the same
    template names, where the result is no fact of the evidence: false in the world (every relation is a
    function of its subject)."""
    pattern = TEMPLATES[_template(fact)][0]
    subject, obj = pattern.match(fact).groups()
    same = [pattern.match(other).groups() for other in facts if pattern.match(other)]
    swapped = {fact.replace(f"{subject} ", f"{other} ", 1) for other, _ in same if other != subject}
    swapped |= {fact[: -len(obj) - 1] + other + "." for _, other in same if other != obj}
    return sorted(version for version in swapped if version not in facts)


@pytest.mark.parametrize("world", sorted(WORLD_MAKERS))
def test_every_template_the_generator_writes_is_judged_right_true_and_with_a_wrong_entity(world):
    """Each evidence fact and its restatement: supported; each with a swapped subject or object: contradicted.
    Every template of the generator's table is met, true and wrong, so a template the judge misreads fails."""
    true_met, wrong_met = set(), set()
    for seed in range(EXAMPLES):
        example = WORLD_MAKERS[world](random.Random(f"templates:{seed}"))
        judged = build_world(example.evidence, example.gold_facts)
        facts = _facts(example.evidence)
        for fact in facts:
            template = _template(fact)
            for version in (fact, synthetic.restate(fact)):
                assert judge_step(version, judged).verdict == SUPPORTED, (world, version)
            true_met.add(template)
            for wrong in _wrong_entity_versions(fact, facts):
                for version in (wrong, synthetic.restate(wrong)):
                    assert judge_step(version, judged).verdict == CONTRADICTED, (world, version, example.evidence)
                wrong_met.add(template)
    assert true_met == set(range(len(TEMPLATES))), (world, true_met)
    assert wrong_met == set(range(len(TEMPLATES))), (world, wrong_met)


def _imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_the_judge_and_the_training_verifier_share_no_code():
    """world_judge imports nothing of the verifiers or the step splitter, and they import nothing of it: a policy
    that learns the verifier's blind spot cannot please the judge by the same rule."""
    judge = ROOT / "fspo" / "data" / "world_judge.py"
    assert not {m for m in _imported_modules(judge) if m.startswith(("fspo.verifiers", "fspo.steps"))}
    verifier_side = [ROOT / "fspo" / "steps.py", *sorted((ROOT / "fspo" / "verifiers").glob("*.py"))]
    for path in verifier_side:
        assert not {m for m in _imported_modules(path) if "world_judge" in m}, path
        assert "world_judge" not in path.read_text(), path
