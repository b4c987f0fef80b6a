"""F-DPO: pair flipping and the factuality margin against hand-worked examples of the paper's definition,
the pair builder's mix against the authors' data construction (property tests), and `fspo fdpo build-pairs` ->
`fspo fdpo train` on a tiny model."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fspo.cli.fdpo import main as fdpo_main
from fspo.data.synthetic import make_example
from fspo.methods.fdpo.loss import FDPO_BETA, FDPO_LAMBDA, fdpo_loss
from fspo.methods.fdpo.pairs import (
    FLIP_REAL_PAIRS_MIX,
    Sample,
    flip,
    hallucination_label,
    pair_row,
    preference_pairs,
    variant_pair,
    variant_sources,
)
from fspo.methods.fdpo.variants import evidence_entities, swap_corruption
from fspo.steps import reasoning_steps

EVIDENCE = "Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Piobrdell."
FACTUAL_RIGHT = "<think> Stesta Bagu works for Vigio Shipping. </think> <answer> Piobrdell </answer>"
HALLUCINATED_RIGHT = "<think> The moon base orbits Jupiter quickly. </think> <answer> Piobrdell </answer>"
FACTUAL_WRONG = "<think> Vigio Shipping is headquartered in Piobrdell. </think> <answer> Vigio </answer>"


def test_flip_and_margin_by_hand():
    factual, hallucinated = Sample("a", 0.0, 0), Sample("b", 1.0, 1)
    # The preferred (higher-scoring) response is hallucinated, the rejected one factual: the pair swaps and
    # the margin applies (h_rejected - h_chosen = 1).
    pair = flip(chosen=hallucinated, rejected=factual)
    assert (pair.chosen, pair.rejected, pair.flipped, pair.margin_weight) == (factual, hallucinated, True, 1)
    # Same factuality: unchanged, margin 0 (plain DPO).
    same = flip(Sample("c", 1.0, 1), hallucinated)
    assert not same.flipped and same.margin_weight == 0
    assert hallucination_label([1, 0, 1]) == 0 and hallucination_label([1, -1]) == 1
    # Nothing judged, nothing labelled: "every step supported" must not hold vacuously for an empty reasoning.
    assert hallucination_label([]) is None and hallucination_label([0, 0]) is None


def test_a_response_with_no_judged_step_pairs_by_score_only():
    """An unlabelled response (no reasoning to judge) never wins a pair on factuality, is never flipped over,
    and carries no margin: otherwise F-DPO teaches the policy to stop reasoning."""
    silent_wrong, silent_right = Sample("s0", 0.0, None), Sample("s1", 1.0, None)
    hallucinated_wrong, hallucinated_right = Sample("h0", 0.0, 1), Sample("h1", 1.0, 1)
    assert preference_pairs([silent_wrong, hallucinated_wrong], max_pairs=4) == []
    (pair,) = preference_pairs([silent_wrong, hallucinated_right], max_pairs=4)
    assert (pair.chosen, pair.flipped, pair.margin_weight) == (hallucinated_right, False, 0)
    (pair,) = preference_pairs([silent_right, hallucinated_wrong], max_pairs=4)
    assert (pair.chosen, pair.flipped, pair.margin_weight) == (silent_right, False, 0)


def as_text(pairs):
    return [(p.chosen.text, p.rejected.text, p.flipped, p.margin_weight) for p in pairs]


def test_pairs_of_one_prompt_by_hand():
    a, b, c, d = Sample("a", 1.0, 1), Sample("b", 1.0, 0), Sample("c", 0.0, 0), Sample("d", 0.0, 0)
    # The authors' mix: a over c and a over d are misordered (1, 0) and dropped; the right-over-wrong pairs b-c, b-d
    # first, then b over a (a tie broken by factuality, margin 1).
    assert as_text(preference_pairs([a, b, c, d], max_pairs=10)) == [
        ("b", "c", False, 0),
        ("b", "d", False, 0),
        ("b", "a", False, 1),
    ]
    # The paper's rule (--flip-real-pairs): pairs with a factuality difference first, the larger score gap first:
    # a-c and a-d (flipped), then a-b; then b-c, b-d (outcome only).
    flipped = preference_pairs([a, b, c, d], max_pairs=10, mix=FLIP_REAL_PAIRS_MIX)
    assert as_text(flipped) == [
        ("c", "a", True, 1),
        ("d", "a", True, 1),
        ("b", "a", False, 1),
        ("b", "c", False, 0),
        ("b", "d", False, 0),
    ]
    # At a cap of 2 the paper's rule keeps no right-over-wrong pair; the authors' mix keeps both.
    assert as_text(preference_pairs([a, b, c, d], max_pairs=2, mix=FLIP_REAL_PAIRS_MIX)) == as_text(flipped[:2])
    assert as_text(preference_pairs([a, b, c, d], max_pairs=2)) == [("b", "c", False, 0), ("b", "d", False, 0)]


samples = st.lists(
    st.builds(Sample, st.text(max_size=3), st.sampled_from([0.0, 0.5, 1.0]), st.sampled_from([0, 1, None])),
    max_size=7,
)


@given(samples, st.integers(1, 30))
def test_a_chosen_response_is_never_less_factual_when_real_pairs_flip(group, max_pairs):
    pairs = preference_pairs(group, max_pairs, mix=FLIP_REAL_PAIRS_MIX)
    assert len(pairs) <= max_pairs
    for pair in pairs:
        labelled = pair.chosen.hallucinated is not None and pair.rejected.hallucinated is not None
        if labelled:
            assert pair.chosen.hallucinated <= pair.rejected.hallucinated
        else:
            # Unlabelled: a pair by outcome score alone.
            assert not pair.flipped and pair.margin_weight == 0 and pair.chosen.score > pair.rejected.score
        assert pair.margin_weight in (0, 1)
        # Unflipped pairs follow the outcome score; a flip only ever moves a factual response up.
        if not pair.flipped:
            assert pair.chosen.score >= pair.rejected.score
        else:
            assert pair.chosen.score < pair.rejected.score and pair.margin_weight == 1


# VectorInstitute/Factual-Preference-Alignment, src/aixpert/data_construction/utils/data_utils.py lines 101-117:
# bucket_by_flags keeps (h_w, h_l) = (0, 0), (1, 1), (0, 1); stage_6_merging/data_merge_train.py lines 44-54 merges
# the synthetic inversions with those three buckets only, so no real (1, 0) pair reaches training.
AUTHORS_KEPT_BUCKETS = {(0, 0), (1, 1), (0, 1)}


def bucket(chosen: Sample, rejected: Sample):
    return (chosen.hallucinated, rejected.hallucinated)


def preferred_pairs(group):
    """This project's preference, restated: of two samples the higher score; at equal scores the factual one when
    both are labelled; else no pair."""
    out = []
    for i, a in enumerate(group):
        for b in group[i + 1 :]:
            if a.score != b.score:
                out.append((a, b) if a.score > b.score else (b, a))
            elif None not in (a.hallucinated, b.hallucinated) and a.hallucinated != b.hallucinated:
                out.append((a, b) if a.hallucinated < b.hallucinated else (b, a))
    return out


@given(samples, st.integers(1, 30))
def test_the_default_mix_is_the_authors_buckets_and_cuts_the_smallest_score_gap(group, max_pairs):
    """The default keeps exactly the preference pairs whose bucket the authors keep, unflipped (their flip,
    data_utils.py lines 120-125, then meets only the synthetic (1, 0) inversions); a pair with an unlabelled
    response has no bucket and stays, by score only. The cap cuts the smallest score gaps first, so no
    right-over-wrong pair is cut while a pair at equal score is kept."""
    expected = [
        (a, b) for a, b in preferred_pairs(group) if None in bucket(a, b) or bucket(a, b) in AUTHORS_KEPT_BUCKETS
    ]
    uncapped = preference_pairs(group, max_pairs=len(group) ** 2 + 1)
    assert sorted((id(p.chosen), id(p.rejected)) for p in uncapped) == sorted((id(a), id(b)) for a, b in expected)
    assert not any(p.flipped for p in uncapped)
    gaps = [p.chosen.score - p.rejected.score for p in uncapped]
    assert gaps == sorted(gaps, reverse=True)
    assert preference_pairs(group, max_pairs) == uncapped[:max_pairs]


@given(samples, st.integers(1, 7))
def test_the_default_variants_rewrite_chosen_responses_of_0_1_pairs(group, count):
    """data_synthetic_train.py lines 67-68 pick the (h_w = 0, h_l = 1) pairs and line 40 rewrites their chosen
    answer: a factual response preferred over no hallucinated one gets no variant; the best-scoring first."""
    sources = variant_sources(group, count)
    chosen_of_0_1 = {id(a) for a, b in preferred_pairs(group) if bucket(a, b) == (0, 1)}
    assert all(id(source) in chosen_of_0_1 for source in sources)
    assert len(sources) == min(count, len(chosen_of_0_1))
    assert [s.score for s in sources] == sorted((s.score for s in sources), reverse=True)


def test_only_factual_samples_make_no_variant_by_default():
    both_factual = [Sample("a", 1.0, 0), Sample("b", 0.0, 0)]
    assert variant_sources(both_factual, 1) == []
    assert variant_sources(both_factual, 1, mix=FLIP_REAL_PAIRS_MIX) == [both_factual[0]]


def test_a_variant_is_the_authors_inverted_pair_then_flipped():
    """VectorInstitute/Factual-Preference-Alignment, src/aixpert/data_construction/utils/synthetic_utils.py lines
    52-58: a synthetic variant enters as ``chosen = corrupted, rejected = factual, h_w = 1, h_l = 0``; data_utils.py
    lines 120-125 flip a (1, 0) pair: the factual response chosen, h_w = 0, h_l = 1, so the margin acts."""
    factual = Sample("factual", 0.5, 0)
    pair = variant_pair(factual, "corrupted")
    assert (pair.chosen, pair.rejected, pair.flipped, pair.margin_weight) == (
        factual,
        Sample("corrupted", 0.5, 1),
        True,
        1,
    )
    assert pair_row("q", pair, "synthetic_inversion")["source"] == "synthetic_inversion"
    # c and a are chosen over the hallucinated d, c scoring higher; without d, b beats both: no (0, 1) pair.
    group = [Sample("a", 0.2, 0), Sample("b", 1.0, 1), Sample("c", 0.9, 0), Sample("d", 0.0, 1)]
    assert variant_sources(group, 1) == [Sample("c", 0.9, 0)] == variant_sources(group[:3], 1, FLIP_REAL_PAIRS_MIX)
    assert variant_sources(group[:3], 1) == []
    with pytest.raises(ValueError, match="rewrites a factual response"):
        variant_pair(Sample("h", 1.0, 1), "x")


def sentences(text: str) -> list[str]:
    return [step.text for step in reasoning_steps(f"<think> {text} </think>")]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))
def test_swap_corruption_falsifies_2_to_3_steps_of_a_synthetic_world(world_seed, seed):
    """Over generated synthetic worlds: a response reasoning through the gold facts gets 2-3 of its steps (all of
    them when fewer) rewritten, each no longer a sentence of the evidence (an entity swapped, the object where it
    can be), and nothing outside the reasoning changes."""
    example = make_example(random.Random(world_seed))
    response = f"<think> {' '.join(example.gold_facts)} </think> <answer> {example.ground_truth} </answer>"
    corrupted = swap_corruption(response, example.evidence, random.Random(seed))
    assert corrupted is not None and corrupted.endswith(f"</think> <answer> {example.ground_truth} </answer>")
    before, after = sentences(" ".join(example.gold_facts)), [s.text for s in reasoning_steps(corrupted)]
    assert len(before) == len(after)
    changed = [new for old, new in zip(before, after) if old != new]
    assert min(2, len(before)) <= len(changed) <= 3
    facts = set(sentences(example.evidence))
    assert not facts & set(changed)


def test_swap_corruption_needs_an_entity_to_swap():
    assert swap_corruption("<think> It rains. </think> <answer> x </answer>", EVIDENCE, random.Random(0)) is None
    assert swap_corruption(FACTUAL_RIGHT, "", random.Random(0)) is None
    assert evidence_entities("The Vigio Shipping firm. In 1873 Anna left.") == ["Vigio Shipping", "1873", "Anna"]


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    from fspo_testing.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("fdpo") / "policy")


def test_fdpo_loss_by_hand_is_the_authors_formula():
    """VectorInstitute/Factual-Preference-Alignment, src/aixpert/training/training/factualdpo_trainer.py, line 1347
    (``logits = logits - (h_l - h_w) * Delta``) and line 1367 (``-F.logsigmoid(self.beta * logits)``): the margin
    sits inside beta. With beta 0.1, lambda 10, m = 3, dh = 1: -log sigmoid(0.1 * (3 - 10)) = log(1 + e^0.7)."""
    assert fdpo_loss(3.0, 0.1, 10.0, h_chosen=0, h_rejected=1) == pytest.approx(math.log1p(math.exp(0.7)), abs=1e-12)
    assert fdpo_loss(3.0, 0.1, 10.0, h_chosen=1, h_rejected=1) == pytest.approx(math.log1p(math.exp(-0.3)), abs=1e-12)
    assert fdpo_loss(-1e6, 0.1, 10.0, 0, 1) == pytest.approx(1e5 + 1.0)  # no overflow at large logits


def test_fdpo_train_at_its_defaults_computes_the_authors_loss(tiny_policy, tmp_path):
    """`fspo fdpo train`'s defaults are the authors' config (src/aixpert/training/config/config.yaml: beta 0.1 at
    line 59; lambda swept over ``deltas`` at line 40, 10 in their README's example) and its trainer's loss is
    factualdpo_trainer.py line 1347 + 1367 on a hand-worked pair: the reference raised by 3 nats on the rejected
    response makes m = 3 exactly (policy = reference before an update), so a pair with dh = 1 costs
    log(1 + e^0.7) and a pair with dh = 0 costs log(1 + e^-0.3)."""
    from fspo.cli.fdpo import build_parser, train_settings
    from fspo.methods.fdpo.trainer import build_trainer

    defaults = train_settings(
        build_parser().parse_args(["train", "--model", "m", "--pairs", "p", "--output-dir", str(tmp_path / "o")])
    )
    assert (defaults["beta"], defaults["factuality_lambda"]) == (FDPO_BETA, FDPO_LAMBDA) == (0.1, 10.0)
    pairs = [
        {"prompt": "Q: where? A:", "chosen": " Paris.", "rejected": " Mars.", "fdpo_margin_weight": 1},
        {"prompt": "Q: who? A:", "chosen": " Ann.", "rejected": " Bob.", "fdpo_margin_weight": 0},
    ]
    trainer = build_trainer(tiny_policy, pairs, tmp_path, **{**defaults, "batch_size": 2})
    batch = next(iter(trainer.get_train_dataloader()))
    batch["ref_rejected_logps"] = batch["ref_rejected_logps"] + 3.0
    loss = float(trainer.compute_loss(trainer.model, batch).detach())
    by_hand = (math.log1p(math.exp(0.7)) + math.log1p(math.exp(-0.3))) / 2
    authors = (fdpo_loss(3.0, 0.1, 10.0, 0, 1) + fdpo_loss(3.0, 0.1, 10.0, 0, 0)) / 2
    assert loss == pytest.approx(by_hand, abs=1e-5) and authors == pytest.approx(by_hand, abs=1e-12)


def build_pairs_of_one_prompt(tmp_path, *options):
    """`fspo fdpo build-pairs` with the lexical verifier on one prompt's three samples: a hallucinated right answer,
    a factual wrong one and a factual right one; its rows (chosen, rejected, flipped, margin, source) and output."""
    predictions = tmp_path / "predictions.jsonl"
    record = {
        "index": 0,
        "prompt": "Where is the employer of Stesta Bagu headquartered?",
        "evidence": EVIDENCE,
        "responses": [HALLUCINATED_RIGHT, FACTUAL_WRONG, FACTUAL_RIGHT],
        "sample_scores": [1.0, 0.0, 1.0],
    }
    predictions.write_text(json.dumps(record) + "\n")
    pairs = tmp_path / "pairs.jsonl"
    assert fdpo_main(["build-pairs", str(predictions), "--verifier", "lexical", "--pairs", str(pairs), *options]) == 0
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    return [(r["chosen"], r["rejected"], r["flipped"], r["fdpo_margin_weight"], r["source"]) for r in rows], pairs


# The best factual response's synthetic variant: its employer swapped for the other name the evidence gives.
VARIANT = FACTUAL_RIGHT.replace("works for Vigio Shipping", "works for Piobrdell")


def test_flip_real_pairs_flips_the_misordered_sampled_pair(tmp_path, capsys):
    """--flip-real-pairs (the paper's rule, the committed F-DPO runs' pairs): the hallucinated right answer loses to
    both factual responses, to the wrong one by a flip."""
    rows, _ = build_pairs_of_one_prompt(tmp_path, "--flip-real-pairs")
    assert rows == [
        (FACTUAL_WRONG, HALLUCINATED_RIGHT, True, 1, "sampled"),
        (FACTUAL_RIGHT, HALLUCINATED_RIGHT, False, 1, "sampled"),
        (FACTUAL_RIGHT, FACTUAL_WRONG, False, 0, "sampled"),
        (FACTUAL_RIGHT, VARIANT, True, 1, "synthetic_inversion"),
    ]
    out = capsys.readouterr().out
    assert "4 pairs from 1 prompts" in out and "1 sampled pairs misordered (hallucinated over factual, flipped)" in out
    assert "2 pairs flipped, 3 with a factuality margin; 1 synthetic" in out


def test_build_pairs_then_train_gives_a_model_evaluate_loads(tiny_policy, tmp_path, capsys):
    """The authors' mix: the hallucinated right answer over the factual wrong one is a (1, 0) pair and dropped;
    the right-over-wrong pair first, the factual right answer over the hallucinated one (equal scores) next, and
    the synthetic inversion the only flipped pair."""
    from fspo.evaluation.generation import GenerationSettings, build_generator

    rows, pairs = build_pairs_of_one_prompt(tmp_path)
    assert rows == [
        (FACTUAL_RIGHT, FACTUAL_WRONG, False, 0, "sampled"),
        (FACTUAL_RIGHT, HALLUCINATED_RIGHT, False, 1, "sampled"),
        (FACTUAL_RIGHT, VARIANT, True, 1, "synthetic_inversion"),
    ]
    out = capsys.readouterr().out
    assert "3 pairs from 1 prompts" in out and "1 sampled pairs misordered (hallucinated over factual, dropped)" in out
    assert "1 pairs flipped, 2 with a factuality margin; 1 synthetic" in out
    out = tmp_path / "model"
    args = [
        "train",
        "--model",
        str(tiny_policy),
        "--pairs",
        str(pairs),
        "--output-dir",
        str(out),
        "--learning-rate",
        "1e-3",
    ]
    assert fdpo_main([*args, "--batch-size", "4", "--max-length", "64"]) == 0
    from safetensors.torch import load_file

    trained, base = load_file(out / "model.safetensors"), load_file(tiny_policy / "model.safetensors")
    assert any(not torch.equal(trained[name], base[name]) for name in base)
    generator = build_generator(out, GenerationSettings(max_new_tokens=2), backend="hf")
    assert len(generator.generate(["Where?"])[0]) == 1


def test_llm_variants_are_the_authors_rewrite_over_a_chat_server(chat_server, tmp_path, capsys):
    """--variants llm sends F-DPO's corruption prompts (utils/prompt_templates.py lines 40-57) for the best factual
    response of each prompt and enters the reply as an inverted pair, flipped."""
    rewrite = "<think> Stesta Bagu works for Tarsk Mining. </think> <answer> Piobrdell </answer>"
    server = chat_server(lambda body: rewrite)
    predictions = tmp_path / "predictions.jsonl"
    record = {
        "index": 0,
        "prompt": "<rendered>",
        "question": "Where is the employer of Stesta Bagu headquartered?",
        "evidence": EVIDENCE,
        "responses": [HALLUCINATED_RIGHT, FACTUAL_RIGHT],
        "sample_scores": [1.0, 1.0],
    }
    predictions.write_text(json.dumps(record) + "\n")
    pairs = tmp_path / "pairs.jsonl"
    args = ["build-pairs", str(predictions), "--verifier", "lexical", "--pairs", str(pairs), "--variants", "llm"]
    assert fdpo_main([*args, "--variant-url", server.url]) == 0
    rows = [json.loads(line) for line in pairs.read_text().splitlines()]
    assert (rows[-1]["chosen"], rows[-1]["rejected"], rows[-1]["flipped"], rows[-1]["source"]) == (
        FACTUAL_RIGHT,
        rewrite,
        True,
        "synthetic_inversion",
    )
    (request,) = server.requests
    system, user = request["body"]["messages"]
    assert system["content"].startswith("You are a factual corruption generator.")
    assert user["content"].startswith(f"PROMPT:\n{record['question']}\n\nCORRECT ANSWER:\n{FACTUAL_RIGHT}")
    assert "1 synthetic hallucinated variants (llm)" in capsys.readouterr().out


def test_bad_inputs_get_one_line(tmp_path, capsys):
    assert fdpo_main(["build-pairs", str(tmp_path / "none.jsonl"), "--verifier", "lexical", "--pairs", "x"]) == 2
    assert fdpo_main(["train", "--model", str(tmp_path), "--pairs", "p", "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and err[0].startswith("fspo fdpo build-pairs: ") and "does not exist" in err[0]
    assert err[1].startswith("fspo fdpo train: --model")
