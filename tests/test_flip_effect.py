"""The paired one-update measurement of FSPO's flip (benchmarks/flip_effect.py), on a tiny model in seconds."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from fspo.advantage import apply_step_labels

_spec = importlib.util.spec_from_file_location(
    "flip_effect", Path(__file__).resolve().parents[1] / "benchmarks" / "flip_effect.py"
)
flip_effect = importlib.util.module_from_spec(_spec)
sys.modules["flip_effect"] = flip_effect  # dataclasses look their module up
_spec.loader.exec_module(flip_effect)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fspo_testing.tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path_factory.mktemp("tiny"))
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), AutoTokenizer.from_pretrained(path)


def _reversed_flip(advantages, labels, mask):
    return apply_step_labels(advantages, -labels, mask)


def _no_flip(advantages, labels, mask):
    return advantages


def _differences(tiny, flip, seeds):
    model, tokenizer = tiny
    repeats = flip_effect.measure(
        model, tokenizer, seeds=seeds, batches=1, prompts=4, n=4, lr=1e-2, optimizer="sgd", flip=flip
    )
    return flip_effect.summarise(repeats)


def test_the_flip_moves_labelled_steps_its_way_against_grpo_and_a_missing_or_reversed_flip_is_seen(tiny):
    """From the same weights and rollouts, FSPO's update raises a judge-supported step's log-probability more than
    GRPO's (the 95% interval of FSPO - GRPO is above 0) and lowers a contradicted one's more on average. Without the
    flip the two updates are one (difference exactly 0); with its sign reversed the differences turn over.

    On this tiny random model the contradicted steps' interval still spans 0 (their names are the supported steps'
    names, which the update raises); `python benchmarks/flip_effect.py` measures it on SmolLM2."""
    fspo = _differences(tiny, apply_step_labels, [0, 1, 2])
    assert fspo["judge/same/supported"]["lower"] > 0, fspo
    assert fspo["judge/same/contradicted"]["fspo_minus_grpo"] < 0, fspo
    assert _differences(tiny, _no_flip, [0])["judge/same/supported"]["fspo_minus_grpo"] == 0
    reversed_flip = _differences(tiny, _reversed_flip, [0])
    assert (
        reversed_flip["judge/same/supported"]["fspo_minus_grpo"]
        < 0
        < reversed_flip["judge/same/contradicted"]["fspo_minus_grpo"]
    )


@hypothesis_settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(-5, 5)), min_size=1, max_size=12))
def test_grpo_advantages_are_verls(members):
    """Against verl's own ``compute_grpo_outcome_advantage`` (verl 0.9.1, verl/trainer/ppo/core_algos.py)."""
    from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

    groups, rewards = [m[0] for m in members], [m[1] for m in members]
    scores = torch.zeros(len(members), 3)
    scores[:, -1] = torch.tensor(rewards)
    expected, _ = compute_grpo_outcome_advantage(scores, torch.ones(len(members), 3), __import__("numpy").array(groups))
    assert torch.allclose(flip_effect.grpo_advantages(rewards, groups), expected[:, 0], atol=1e-5)


@hypothesis_settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**31), st.floats(0.05, 0.5))
def test_policy_loss_is_verls_vanilla_token_mean_loss(seed, clip):
    """Against verl's ``compute_policy_loss_vanilla`` (verl 0.9.1, verl/trainer/ppo/core_algos.py), ``token-mean``."""
    from verl.trainer.ppo.core_algos import compute_policy_loss_vanilla
    from verl.workers.config import ActorConfig

    generator = torch.Generator().manual_seed(seed)
    shape = (3, 5)
    log_prob, old_log_prob = torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)
    advantages = torch.randn(shape, generator=generator)
    mask = (torch.rand(shape, generator=generator) > 0.3).float()
    mask[0, 0] = 1
    config = ActorConfig(
        clip_ratio=clip, clip_ratio_low=clip, clip_ratio_high=clip, strategy="fsdp", rollout_n=1, use_dynamic_bsz=True
    )
    expected = compute_policy_loss_vanilla(old_log_prob, log_prob, advantages, mask, "token-mean", config)[0]
    assert torch.allclose(flip_effect.policy_loss(log_prob, old_log_prob, advantages, mask, clip), expected, atol=1e-6)


def test_scripted_rollouts_hold_flawed_positives_and_the_judges_steps(tiny):
    _, tokenizer = tiny
    rows = flip_effect.quickstart_rows(3, 0, "train")
    rollouts = flip_effect.scripted_rollouts(tokenizer, rows, 8, random.Random(0))
    flawed = [r for r in rollouts if r.reward > 0 and any("contradicted" in s.groups for s in r.spans)]
    assert flawed and any(r.reward == 0 for r in rollouts)
    for rollout in rollouts:
        for span in rollout.spans:
            for verdict, sign in (("supported", 1), ("contradicted", -1)):
                if verdict in span.groups:
                    assert set(rollout.labels["judge"][span.start : span.end]) == {sign}


def test_each_claim_is_measured_as_copied_or_not_and_a_right_responses_answer_as_such(tiny):
    """A claim is in exactly one of "copied" and "own words" (a verbatim piece of the evidence or not), beside its
    verdict; a response scored 1 adds its <answer> text, whose tokens hold the answer; a wrong one adds none."""
    from fspo.quickstart.step_report import is_copy
    from fspo.training.outcome import extract_answer

    _, tokenizer = tiny
    rows = flip_effect.quickstart_rows(3, 1, "train")
    rollouts = flip_effect.scripted_rollouts(tokenizer, rows, 8, random.Random(1))
    for rollout in rollouts:
        text = tokenizer.decode(list(rollout.response_ids), skip_special_tokens=True)
        evidence = rows[rollout.group]["extra_info"]["evidence"]
        answers = [s for s in rollout.spans if flip_effect.RIGHT_ANSWER in s.groups]
        assert len(answers) == (1 if rollout.reward == 1.0 else 0)
        for span in answers:
            assert span.groups == (flip_effect.RIGHT_ANSWER,)
            # Tokens that overlap the answer: a token may straddle a tag (">Siosburg").
            decoded = tokenizer.decode(list(rollout.response_ids[span.start : span.end]))
            assert extract_answer(text) in decoded and decoded in text[text.rindex("<answer") :]
        claims = [s for s in rollout.spans if flip_effect.RIGHT_ANSWER not in s.groups]
        for span in claims:
            kinds = {flip_effect.COPIED, flip_effect.OWN_WORDS} & set(span.groups)
            assert len(kinds) == 1
            step = tokenizer.decode(list(rollout.response_ids[span.start : span.end]))
            assert (flip_effect.COPIED in kinds) == is_copy(step, evidence)
    groups = {group for rollout in rollouts for span in rollout.spans for group in span.groups}
    assert groups == set(flip_effect.GROUPS)


def test_the_micro_batched_update_is_the_whole_batch_update(tiny):
    """The benchmark accumulates the token-mean loss's gradient over micro-batches (memory): the step it takes is
    the one a single pass over the whole batch takes, and so are the step log-probabilities it reads back."""
    from fspo.data.synthetic import make_rows

    model, tokenizer = tiny
    rollouts = flip_effect.scripted_rollouts(tokenizer, make_rows(3, seed=5, split="train"), 3, random.Random(5))
    batch = flip_effect.padded_batch(rollouts, tokenizer.pad_token_id)
    advantages = flip_effect.token_advantages(rollouts, batch, apply_step_labels)
    whole = flip_effect.updated_model(model, batch, advantages, 1e-2, "sgd", micro_batch_size=len(rollouts))
    parts = flip_effect.updated_model(model, batch, advantages, 1e-2, "sgd", micro_batch_size=2)
    for a, b in zip(whole.parameters(), parts.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        direct = flip_effect.step_log_probs(flip_effect.response_log_probs(whole, batch), rollouts)
    micro = flip_effect._step_log_probs_of(whole, rollouts, tokenizer.pad_token_id)
    for verdict in direct:
        torch.testing.assert_close(torch.tensor(micro[verdict]), torch.tensor(direct[verdict]), rtol=1e-5, atol=1e-5)


RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "flip_effect_smollm2.json"


def test_runs_of_other_seeds_merge_into_one_interval_and_other_settings_do_not(tmp_path):
    """`--table` pools side-by-side runs of other seeds (how the SmolLM2 figure was measured) into the interval
    one run of all the seeds gives; runs of other settings, or of one seed twice, are refused with one line."""
    measured = json.loads(RESULTS.read_text())
    halves = [
        {"args": measured["args"] | {"seeds": measured["args"]["seeds"][:4]}, "repeats": measured["repeats"][:12]},
        {"args": measured["args"] | {"seeds": measured["args"]["seeds"][4:]}, "repeats": measured["repeats"][12:]},
    ]
    merged = flip_effect.merge_results(halves)
    assert merged["summary"] == flip_effect.summarise(flip_effect.with_label_sources(measured)["repeats"])
    # Written when one file held one label source: read as that source's arm.
    assert list(merged["summary"]) == [f"judge/{key}" for key in measured["repeats"][0]]
    with pytest.raises(ValueError, match="different settings"):
        flip_effect.merge_results([halves[0], {**halves[1], "args": halves[1]["args"] | {"lr": 1.0}}])
    with pytest.raises(ValueError, match="more than one file"):
        flip_effect.merge_results([halves[0], halves[0]])
    files = []
    for index, half in enumerate(halves):
        files.append(tmp_path / f"{index}.json")
        files[-1].write_text(json.dumps(half))
    assert flip_effect.main(["--table", *map(str, files)]) == 0


def _step_token_labels(labels, ids, tokenizer, text):
    """The set of token labels on each reasoning step of ``text`` (``ids`` decoded)."""
    from fspo.steps import reasoning_steps
    from fspo.token_labels import labels_from_offsets, token_char_offsets

    offsets = token_char_offsets(ids, tokenizer, skip_special_tokens=True, text=text)
    found = []
    for step in reasoning_steps(text):
        members = labels_from_offsets(offsets, text, [(step.start, step.end)], [1])
        found.append({label for label, member in zip(labels, members) if member})
    return found


def test_the_training_verifiers_labels_check_each_clause_in_its_sentence_and_abstention_zeroes_a_fragment(tiny):
    """The `lexical` arms label as the quickstart trains: sentence unit at threshold 1.0, every reasoning step judged
    (mode fspo). A copied fact is +1; a true hop with the wrong city, all of whose words the evidence holds but no
    one sentence, is -1 (whole-evidence lookup would pass it); the bare answer "Piobrdell." is +1 without
    abstention and 0 with it. The judge's arm labels the swapped hop -1 and the fragment, no claim, 0."""
    _, tokenizer = tiny
    row = flip_effect.quickstart_rows(1, 0, "train")[0]
    assert row["extra_info"]["gold_facts"] == [
        "Stesta Bagu works for Vigio Shipping.",
        "Vigio Shipping is headquartered in Piobrdell.",
    ]
    response = (
        "Stesta Bagu works for Vigio Shipping. Vigio Shipping is headquartered in Staenvale. Piobrdell.\n"
        "</think>\n<answer>Piobrdell</answer>"
    )
    ids = tokenizer(response, add_special_tokens=False)["input_ids"]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    labels, _ = flip_effect.label_response(ids, tokenizer, row, flip_effect.LABEL_SOURCES)
    by_source = {source: _step_token_labels(labels[source], ids, tokenizer, text) for source in labels}
    assert by_source == {
        "judge": [{1}, {-1}, {0}],
        "lexical": [{1}, {-1}, {1}],
        "lexical-abstain": [{1}, {-1}, {0}],
    }
    with pytest.raises(ValueError, match="labels must be some of"):
        flip_effect.label_response(ids, tokenizer, row, ["lexical-whole"])


def test_every_label_source_is_one_more_fspo_update_paired_with_the_same_grpo_update(tiny):
    """Arms added with ``--labels`` share the rollouts and the GRPO update: GRPO's change is the same number in
    every arm, and the judge's arm measures what a judge-only run measures. The table gets a labels column."""
    model, tokenizer = tiny
    settings = {"seeds": [0], "batches": 1, "prompts": 1, "n": 2, "lr": 1e-2, "optimizer": "sgd"}
    arms = flip_effect.measure(model, tokenizer, labels=flip_effect.LABEL_SOURCES, **settings)[0]
    judge_only = flip_effect.measure(model, tokenizer, labels=["judge"], **settings)[0]
    per_source = 2 * len(flip_effect.GROUPS)  # the update's own rollouts and fresh ones
    assert [key.split("/")[0] for key in arms] == [s for s in flip_effect.LABEL_SOURCES for _ in range(per_source)]
    for key, figures in judge_only.items():
        assert arms[key] == pytest.approx(figures, rel=1e-6, nan_ok=True)
        for source in flip_effect.LABEL_SOURCES:
            assert arms[key.replace("judge/", f"{source}/")]["grpo"] == pytest.approx(figures["grpo"], nan_ok=True)
    merged = flip_effect.merge_results(
        [{"args": {"labels": list(flip_effect.LABEL_SOURCES), "seeds": [0]}, "repeats": [arms]}]
    )
    header, _, *rows = flip_effect.markdown_table(merged).splitlines()
    assert header == (
        "| rollouts measured | spans measured | spans | repeats | GRPO | world judge | `lexical` | "
        "`lexical`, abstaining on non-claims |"
    )
    # A row per rollouts and spans measured (a group with no span in the batch has none), a cell per source.
    assert len(rows) == len({key.split("/", 1)[1] for key in merged["summary"]}) <= per_source
    assert all(row.count("|") == header.count("|") for row in rows)
    assert rows[-1].startswith("| fresh | ")


def test_the_decided_figures_are_the_preregistrations():
    """DECIDED is the table "Figures decided now" of benchmarks/preregistration_flip_labels.md, row for row."""
    text = (RESULTS.parents[1] / "preregistration_flip_labels.md").read_text()
    table = text.split("## Figures decided now")[1].split("\n\n")[1].splitlines()[2:]
    sources = {f"`{source}`": source for source in flip_effect.LABEL_SOURCES}
    groups = {name: group for group, name in flip_effect.GROUP_NAMES.items()}
    rows = []
    for line in table:
        question, labels, rollouts, spans, sign = (cell.strip() for cell in line.strip("|").split("|"))
        batch = {name.split()[0]: batch for batch, name in flip_effect.ROLLOUTS_MEASURED.items()}[rollouts]
        rows.append((int(question), sources[labels], batch, groups[spans], {"+": 1, "−": -1}[sign]))
    assert tuple(rows) == flip_effect.DECIDED


@hypothesis_settings(max_examples=60, deadline=None)
@given(
    bounds=st.lists(st.floats(-3, 3, allow_nan=False), min_size=3, max_size=3).map(sorted),
    decided=st.sampled_from(range(len(flip_effect.DECIDED))),
    one_repeat=st.booleans(),
)
def test_a_decided_figure_is_shown_only_when_its_interval_excludes_0_on_the_expected_side(bounds, decided, one_repeat):
    """Every decided figure gets a line: shown only when its interval excludes 0 on the side the plan expected; a
    figure of one repeat (no interval: t_interval's NaN bounds) is not shown; one no repeat measured says so."""
    low, mean, high = bounds
    if one_repeat:
        low = high = math.nan
    question, source, batch, group, sign = flip_effect.DECIDED[decided]
    figures = {"fspo_minus_grpo": mean, "lower": low, "upper": high, "grpo": 0.0, "fspo": 0.0, "spans": 9,
               "repeats": 1 if one_repeat else 5}  # fmt: skip
    result = {"args": {"labels": ["judge", source]}, "summary": {f"{source}/{batch}/{group}": figures}}
    lines = flip_effect.decided_verdicts(result)
    assert len(lines) == len(flip_effect.DECIDED)
    (line,) = [line for line in lines if not line.endswith(": not measured (no repeat had such a span).")]
    assert line.startswith(f"- Question {question}, ") and flip_effect.GROUP_NAMES[group] in line
    if one_repeat:
        assert line.endswith(": not shown (1 repeat with such a span: no interval).")
    elif low <= 0 <= high:
        assert line.endswith(": not shown (the interval spans 0).")
    else:
        assert line.endswith(": shown." if (mean > 0) == (sign > 0) else ": the other sign shown.")
    assert flip_effect.decided_verdicts({"args": {"labels": ["judge"]}, "summary": result["summary"]}) == []
