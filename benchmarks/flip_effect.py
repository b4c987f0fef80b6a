"""What FSPO's flip does to a policy, measured paired: one update with GRPO's advantages and one with FSPO's.

From the same weights and the same batch of rollouts, the policy takes one policy-gradient step of the form
of verl's PPO/GRPO actor loss (``compute_policy_loss_vanilla``, ``token-mean``) twice: once with GRPO's
outcome advantages and once with the same advantages after FSPO's flip (:func:`fspo.advantage.apply_step_labels`).
Then the log-probability of every reasoning step that the world judge (:mod:`fspo.data.world_judge`)
calls contradicted or supported is read again, under both updated policies, on the batch updated on
("same") and on a fresh batch of samples of the untouched policy ("fresh"). The figure is the paired
difference FSPO - GRPO of the mean change in a contradicted step's log-probability: the flip's intended
effect is that it is negative (and positive for supported steps). The same is read for the claims copied from
the evidence and those in the policy's own words, whatever their verdict (what the ``lexical`` labels pay), and
for the answer of each right response (what answer F1 counts). Repeats over batches and seeds give a
95% interval (Student's t over repeats). Everything else (weights, rollouts, rewards, optimiser) is shared,
so run-to-run noise does not enter the difference.

Pure PyTorch and ``transformers``: no verl trainer, no Ray. The rollouts come from the synthetic world
(:mod:`fspo.data.synthetic`), either sampled from the model (``--rollouts sampled``, what a real run trains
on) or written from the world's facts with a share of steps swapped for false ones (``--rollouts scripted``:
a test bed that needs no capable model, so the CI test runs it on a tiny random one). The flip's labels are
the judge's own verdicts (``judge``: the mechanism with a perfect verifier) or the quickstart's training
verifier's (``lexical``: sentence unit, threshold 1.0, every reasoning step judged as mode fspo judges them;
``lexical-abstain``: the same with ``abstain_non_claims``). ``--labels`` takes several: each is one more FSPO
update from the same weights and rollouts, paired with the one GRPO update, so their effects compare side by
side; the steps measured are the judge's in every arm.

Run (SmolLM2-135M-Instruct as ``fspo quickstart`` converts it; one repeat with one label source took 279 s on 2 busy
CPU cores, ~50 s with ``--device cuda`` on an H200, 16 processes side by side; each further source adds one update
and two forward passes of the batch)::

    python benchmarks/flip_effect.py --model smollm2 --rollouts sampled --seeds 0 1 2 --batches 3 \\
        --labels judge lexical lexical-abstain

Seeds run side by side (one ``--seeds S --out S.json`` each) merge into one interval with
``--table 0.json 1.json ...``, which prints the table of docs/results.md (and under it the figures
``benchmarks/preregistration_flip_labels.md`` decided, where the files hold them); ``benchmarks/results/`` holds the
runs it shows.

``--model tiny`` builds a tiny random Qwen2 (:mod:`fspo_testing.tiny_model`) and needs ``--rollouts scripted``.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import random
import statistics
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from fspo.advantage import apply_step_labels
from fspo.config.fspo_config import FSPOConfig
from fspo.data.world_judge import CONTRADICTED, SUPPORTED, build_world, judge_step
from fspo.evaluation.intervals import CONFIDENCE, t_interval
from fspo.methods.reward_modes import judged_steps
from fspo.quickstart.cli import quickstart_rows
from fspo.quickstart.step_report import is_copy
from fspo.steps import reasoning_steps
from fspo.token_labels import (
    labels_from_offsets,
    step_labels_for_response,
    token_char_offsets,
    verdicts_from_scores,
)
from fspo.training.outcome import answer_span, compute_score
from fspo.training.prompt_formats import render_prompt

PROMPT_FORMAT = "chatml-think"  # the quickstart's
QUICKSTART_FSPO = FSPOConfig()  # the quickstart sets no fspo.* option the labels depend on (fspo.quickstart.cli)
VERDICTS = (CONTRADICTED, SUPPORTED)
COPIED, OWN_WORDS, RIGHT_ANSWER = "copied", "own words", "right answer"
# The spans measured: a step by the judge's verdict, a claim by whether it is copied from the evidence, and the
# <answer> text of a right response (F1 1: the normalised answer is the gold one), spaces inside the tags included,
# and a token that straddles a tag.
GROUPS = (*VERDICTS, COPIED, OWN_WORDS, RIGHT_ANSWER)
LABEL_SOURCES = ("judge", "lexical", "lexical-abstain")
ROLLOUT_SOURCES = ("sampled", "scripted")
Flip = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class MeasuredSpan:
    """Response-token positions ``[start, end)`` whose log-probability is measured, and the :data:`GROUPS` it is
    counted in (a claim's verdict and whether it is copied; or the right answer)."""

    start: int
    end: int
    groups: tuple[str, ...]


@dataclass(frozen=True)
class Rollout:
    """One response to one prompt, as the update and the measurement need it."""

    prompt_ids: tuple[int, ...]
    response_ids: tuple[int, ...]
    group: int  # the prompt it answers: GRPO normalises rewards within a group
    reward: float
    labels: dict[str, tuple[int, ...]]  # per label source, the flip's label of each response token, in {-1, 0, 1}
    spans: tuple[MeasuredSpan, ...]


# ---------------------------------------------------------------------------------------------
# Advantages and the loss: the form of verl's, on one batch.
# ---------------------------------------------------------------------------------------------


def grpo_advantages(rewards: Sequence[float], groups: Sequence[int], epsilon: float = 1e-6) -> torch.Tensor:
    """GRPO's outcome advantage of each rollout: ``(r - mean) / (std + epsilon)`` within its group (unbiased std),
    as verl's ``compute_grpo_outcome_advantage`` with ``norm_adv_by_std_in_grpo``; a group of one gets ``r``."""
    scores = torch.tensor([float(r) for r in rewards], dtype=torch.float32)
    members: dict[int, list[int]] = {}
    for index, group in enumerate(groups):
        members.setdefault(group, []).append(index)
    advantages = torch.empty_like(scores)
    for indices in members.values():
        group_scores = scores[indices]
        if len(indices) == 1:
            mean, std = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean, std = group_scores.mean(), group_scores.std()
        advantages[indices] = (group_scores - mean) / (std + epsilon)
    return advantages


def policy_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_ratio: float = 0.2,
    clip_ratio_c: float = 3.0,
) -> torch.Tensor:
    """PPO's clipped objective with dual clip, averaged over response tokens (verl's vanilla loss, ``token-mean``)."""
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, -20.0, 20.0))
    clipped = torch.maximum(-advantages * ratio, -advantages * torch.clamp(ratio, 1 - clip_ratio, 1 + clip_ratio))
    dual = torch.minimum(-advantages * clip_ratio_c, clipped)
    losses = torch.where(advantages < 0, dual, clipped)
    mask = mask.to(losses.dtype)
    return (losses * mask).sum() / mask.sum()


# ---------------------------------------------------------------------------------------------
# Batches and log-probabilities.
# ---------------------------------------------------------------------------------------------


MICRO_BATCH = 8  # rollouts a forward pass holds at once


def micro_batches(rows: int, size: int) -> list[slice]:
    """``rows`` split into consecutive slices of at most ``size``."""
    return [slice(start, min(start + size, rows)) for start in range(0, rows, size)]


def padded_batch(rollouts: Sequence[Rollout], pad_id: int) -> dict[str, torch.Tensor]:
    """Prompt and response of each rollout, right-padded; ``positions[i, t]`` is where response token t sits."""
    lengths = [len(r.prompt_ids) + len(r.response_ids) for r in rollouts]
    width, response_width = max(lengths), max(len(r.response_ids) for r in rollouts)
    input_ids = torch.full((len(rollouts), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rollouts), width), dtype=torch.long)
    positions = torch.zeros((len(rollouts), response_width), dtype=torch.long)
    mask = torch.zeros((len(rollouts), response_width), dtype=torch.bool)
    responses = torch.full((len(rollouts), response_width), pad_id, dtype=torch.long)
    labels = {source: torch.zeros((len(rollouts), response_width), dtype=torch.long) for source in rollouts[0].labels}
    for row, rollout in enumerate(rollouts):
        tokens = list(rollout.prompt_ids) + list(rollout.response_ids)
        input_ids[row, : len(tokens)] = torch.tensor(tokens)
        attention[row, : len(tokens)] = 1
        count = len(rollout.response_ids)
        positions[row, :count] = torch.arange(len(rollout.prompt_ids), len(tokens))
        mask[row, :count] = True
        responses[row, :count] = torch.tensor(rollout.response_ids)
        for source, source_labels in rollout.labels.items():
            labels[source][row, :count] = torch.tensor(source_labels)
    return {
        "input_ids": input_ids,
        "attention_mask": attention,
        "positions": positions,
        "mask": mask,
        "responses": responses,
        **{f"labels/{source}": source_labels for source, source_labels in labels.items()},
    }


def response_log_probs(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """``(rows, response_len)`` log-probability of each response token under ``model`` (0 past the response)."""
    batch = {key: value.to(model.device) for key, value in batch.items()}
    # Logits at the response positions only: over a 150k-token vocabulary the prompt's would cost the most.
    hidden = model.get_decoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    # The token at position p is predicted by the hidden state at p - 1.
    before = (batch["positions"] - 1).clamp(min=0)
    gathered = torch.gather(hidden, 1, before[..., None].expand(-1, -1, hidden.shape[-1]))
    predicting = model.get_output_embeddings()(gathered).float()
    picked = torch.log_softmax(predicting, dim=-1).gather(-1, batch["responses"][..., None])[..., 0]
    return picked * batch["mask"]


def token_advantages(
    rollouts: Sequence[Rollout], batch: dict[str, torch.Tensor], flip: Flip | None, labels: str = "judge"
) -> torch.Tensor:
    """Each rollout's GRPO advantage on its response tokens; ``flip`` (FSPO's) applied to them with the labels of
    source ``labels`` when given."""
    per_rollout = grpo_advantages([r.reward for r in rollouts], [r.group for r in rollouts])
    advantages = per_rollout[:, None] * batch["mask"]
    return advantages if flip is None else flip(advantages, batch[f"labels/{labels}"], batch["mask"])


def updated_model(
    model: torch.nn.Module,
    batch: dict[str, torch.Tensor],
    advantages: torch.Tensor,
    lr: float,
    optimizer: str = "adamw",
    micro_batch_size: int = MICRO_BATCH,
) -> torch.nn.Module:
    """A copy of ``model`` after one step on ``policy_loss`` (on-policy: the old log-probs are the model's own)."""
    updated = copy.deepcopy(model)
    updated.train()
    parameters = [p for p in updated.parameters() if p.requires_grad]
    if optimizer == "adamw":  # verl's actor optimiser (its default weight decay 0.01)
        step = torch.optim.AdamW(parameters, lr=lr, weight_decay=0.01)
    elif optimizer == "sgd":
        step = torch.optim.SGD(parameters, lr=lr)
    else:
        raise ValueError(f"optimizer must be adamw or sgd, got {optimizer!r}")
    # One step on the whole batch's token-mean loss, its gradient accumulated over micro-batches (each one's
    # token-mean weighted by its share of the batch's tokens), so activations of one micro-batch at a time
    # are held: the whole batch of a 135M model in one graph took 18 GB.
    tokens = batch["mask"].sum()
    for rows in micro_batches(len(batch["mask"]), micro_batch_size):
        part = {key: value[rows] for key, value in batch.items()}
        log_prob = response_log_probs(updated, part)
        mask = part["mask"].to(log_prob.device)
        loss = policy_loss(log_prob, log_prob.detach(), advantages[rows].to(log_prob.device), mask)
        (loss * mask.sum() / tokens.to(log_prob.device)).backward()
    step.step()
    updated.eval()
    return updated


def step_log_probs(log_probs: torch.Tensor, rollouts: Sequence[Rollout]) -> dict[str, list[float]]:
    """The log-probability of each measured span (sum over its tokens), in each of its groups."""
    by_group: dict[str, list[float]] = {group: [] for group in GROUPS}
    for row, rollout in enumerate(rollouts):
        for span in rollout.spans:
            for group in span.groups:
                by_group[group].append(float(log_probs[row, span.start : span.end].sum()))
    return by_group


def mean_change(before: dict[str, list[float]], after: dict[str, list[float]]) -> dict[str, float]:
    """Per group, the mean change of a span's log-probability (NaN where the group has no span)."""
    return {
        group: statistics.fmean(a - b for a, b in zip(after[group], before[group])) if before[group] else math.nan
        for group in GROUPS
    }


@torch.no_grad()
def _step_log_probs_of(model: torch.nn.Module, rollouts: Sequence[Rollout], pad_id: int) -> dict[str, list[float]]:
    by_group: dict[str, list[float]] = {group: [] for group in GROUPS}
    for rows in micro_batches(len(rollouts), MICRO_BATCH):
        part = [rollouts[i] for i in range(rows.start, rows.stop)]
        for group, values in step_log_probs(response_log_probs(model, padded_batch(part, pad_id)), part).items():
            by_group[group] += values
    return by_group


def paired_effect(
    model: torch.nn.Module,
    update_rollouts: Sequence[Rollout],
    eval_sets: dict[str, Sequence[Rollout]],
    pad_id: int,
    lr: float,
    optimizer: str = "adamw",
    flip: Flip = apply_step_labels,
    sources: Sequence[str] = ("judge",),
) -> dict[str, dict[str, float]]:
    """One GRPO update of ``model`` from ``update_rollouts`` and one FSPO update per label source in ``sources``;
    per source, evaluation set and group of spans (key ``source/set/group``, :data:`GROUPS`), each arm's mean
    change in a span's log-probability and their difference ``fspo_minus_grpo``."""
    model.eval()
    batch = padded_batch(update_rollouts, pad_id)
    grpo = updated_model(model, batch, token_advantages(update_rollouts, batch, None), lr, optimizer)
    fspo = {
        source: updated_model(model, batch, token_advantages(update_rollouts, batch, flip, source), lr, optimizer)
        for source in sources
    }
    result: dict[str, dict[str, float]] = {}
    for name, rollouts in eval_sets.items():
        before = _step_log_probs_of(model, rollouts, pad_id)
        grpo_change = mean_change(before, _step_log_probs_of(grpo, rollouts, pad_id))
        for source, updated in fspo.items():
            fspo_change = mean_change(before, _step_log_probs_of(updated, rollouts, pad_id))
            for group in GROUPS:
                result[f"{source}/{name}/{group}"] = {
                    "grpo": grpo_change[group],
                    "fspo": fspo_change[group],
                    "fspo_minus_grpo": fspo_change[group] - grpo_change[group],
                    "spans": len(before[group]),
                }
    # Source by source, so that a table reads one arm's rows together.
    return {key: result[key] for source in sources for key in result if key.startswith(f"{source}/")}


# ---------------------------------------------------------------------------------------------
# Rollouts from the synthetic world.
# ---------------------------------------------------------------------------------------------


@functools.cache
def training_verifier(abstain_non_claims: bool):
    """The quickstart's training verifier (``lexical``, sentence unit, threshold 1.0), with or without abstention,
    and its threshold; built once (verifiers import verl)."""
    from fspo.config.verifier import verifier_config
    from fspo.quickstart.step_report import TRAINING_VERIFIERS
    from fspo.verifiers import build_verifier

    settings = TRAINING_VERIFIERS["lexical"] | {"abstain_non_claims": abstain_non_claims}
    return build_verifier(verifier_config(settings)), settings["threshold"]


def verifier_step_labels(response_ids: Sequence[int], tokenizer, text: str, evidence: str, abstain: bool) -> list[int]:
    """Token labels as the reward manager (:meth:`fspo.training.reward.FSPORewardManager._label`) gives them with
    the quickstart's ``fspo`` block (its defaults: mode fspo judges every reasoning step, non-claims too, and labels
    nothing outside the reasoning), the training verifier scoring each step."""
    verifier, threshold = training_verifier(abstain)
    steps = judged_steps(QUICKSTART_FSPO, text)
    scores = verifier.score([(evidence, step.text) for step in steps]) if steps else []
    verdicts = verdicts_from_scores(scores, threshold, verifier.strict_threshold)
    return step_labels_for_response(list(response_ids), tokenizer, text, steps, verdicts)


def label_response(
    response_ids: Sequence[int], tokenizer, row: dict, sources: Sequence[str] = ("judge",)
) -> tuple[dict[str, tuple[int, ...]], tuple[MeasuredSpan, ...]]:
    """Token labels for the flip from each label source, and the spans to measure (:data:`GROUPS`) as token
    positions, of one response to a synthetic row."""
    unknown = [source for source in sources if source not in LABEL_SOURCES]
    if unknown or not sources:
        raise ValueError(f"labels must be some of {LABEL_SOURCES}, got {list(sources)!r}")
    text = tokenizer.decode(list(response_ids), skip_special_tokens=True)
    info = row["extra_info"]
    evidence, gold = info["evidence"], info.get("gold_facts", [])
    world = build_world(evidence, gold)
    steps = reasoning_steps(text, claims_only=True)
    offsets = token_char_offsets(list(response_ids), tokenizer, skip_special_tokens=True, text=text)
    spans = [(step.start, step.end) for step in steps]
    verdicts = [judge_step(step.text, world).verdict for step in steps]
    labels = {}
    for source in sources:
        if source == "judge":
            judge_labels = [{SUPPORTED: 1, CONTRADICTED: -1}.get(verdict, 0) for verdict in verdicts]
            labels[source] = tuple(labels_from_offsets(offsets, text, spans, judge_labels))
        else:
            abstain = source == "lexical-abstain"
            labels[source] = tuple(verifier_step_labels(response_ids, tokenizer, text, evidence, abstain))
    measured = []
    for span, step, verdict in zip(spans, steps, verdicts):
        copied = COPIED if is_copy(step.text, evidence) else OWN_WORDS
        measured.append((span, (verdict, copied) if verdict in VERDICTS else (copied,)))
    answer = answer_span(text)
    if answer is not None and _reward(text, row) == 1.0:
        measured.append((answer, (RIGHT_ANSWER,)))
    token_spans = []
    for span, groups in measured:
        # A span's tokens: those the alignment gives to it (a label of +-1 marks them, whatever the judge said).
        members = labels_from_offsets(offsets, text, [span], [1])
        positions = [t for t, hit in enumerate(members) if hit]
        if positions:
            token_spans.append(MeasuredSpan(positions[0], positions[-1] + 1, groups))
    return labels, tuple(token_spans)


def _reward(text: str, row: dict) -> float:
    return compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], row["extra_info"])["score"]


def prompt_ids(tokenizer, row: dict) -> list[int]:
    return tokenizer(render_prompt(row["prompt"], PROMPT_FORMAT, tokenizer), add_special_tokens=False)["input_ids"]


def scripted_response(row: dict, rng: random.Random, false_rate: float) -> str:
    """A response written from the row's world: its gold facts in order as steps, each swapped for a false
    one with probability ``false_rate`` (another entity of the evidence as its object), then the right
    answer, or with probability 1/2 a wrong one taken from the evidence. So right answers with a false step
    (flawed positives) and wrong answers with true steps both occur, as they do in outcome RL."""
    info = row["extra_info"]
    names = sorted({fact.rstrip(".").split(" ")[-1] for fact in info["evidence"].split(". ") if fact})
    steps = []
    for fact in info["gold_facts"]:
        last = fact.rstrip(".").split(" ")[-1]
        others = [name for name in names if name != last]
        if others and rng.random() < false_rate:
            fact = fact.rstrip(".")[: -len(last)] + rng.choice(others) + "."
        steps.append(fact)
    answer = row["reward_model"]["ground_truth"]
    wrong = [name for name in names if name != answer]
    if wrong and rng.random() < 0.5:
        answer = rng.choice(wrong)
    return f"{' '.join(steps)}\n</think>\n<answer>{answer}</answer>"


def scripted_rollouts(
    tokenizer,
    rows: Sequence[dict],
    n: int,
    rng: random.Random,
    false_rate: float = 0.4,
    labels: Sequence[str] = ("judge",),
) -> list[Rollout]:
    """``n`` scripted responses (:func:`scripted_response`) per row, tokenised and labelled."""
    rollouts = []
    for group, row in enumerate(rows):
        prompt = tuple(prompt_ids(tokenizer, row))
        for _ in range(n):
            text = scripted_response(row, rng, false_rate)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            token_labels, steps = label_response(ids, tokenizer, row, labels)
            rollouts.append(Rollout(prompt, tuple(ids), group, _reward(text, row), token_labels, steps))
    return rollouts


@torch.no_grad()
def sampled_rollouts(
    model: torch.nn.Module,
    tokenizer,
    rows: Sequence[dict],
    n: int,
    seed: int,
    temperature: float = 0.7,
    max_new_tokens: int = 96,
    labels: Sequence[str] = ("judge",),
) -> list[Rollout]:
    """``n`` responses per row sampled from ``model``: at 0.7 (the quickstart's temperature before its dead-step
    change, docs/results.md) and the quickstart's response length."""
    torch.manual_seed(seed)
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    rollouts = []
    for group, row in enumerate(rows):
        prompt = prompt_ids(tokenizer, row)
        output = model.generate(
            torch.tensor([prompt] * n, device=model.device),
            attention_mask=torch.ones((n, len(prompt)), dtype=torch.long, device=model.device),
            do_sample=True,
            temperature=temperature,
            top_p=1.0,
            top_k=0,
            max_new_tokens=max_new_tokens,
            eos_token_id=stop,
            pad_token_id=tokenizer.pad_token_id,
        )
        for sequence in output[:, len(prompt) :].tolist():
            ids = sequence[: sequence.index(stop) + 1] if stop in sequence else sequence
            text = tokenizer.decode(ids, skip_special_tokens=True)
            token_labels, steps = label_response(ids, tokenizer, row, labels)
            rollouts.append(Rollout(tuple(prompt), tuple(ids), group, _reward(text, row), token_labels, steps))
    return rollouts


# ---------------------------------------------------------------------------------------------
# Repeats and the interval.
# ---------------------------------------------------------------------------------------------


def _span_count(figures: dict) -> int:
    """The spans one repeat measured in a group (``steps`` in files written before spans other than steps)."""
    return figures["spans"] if "spans" in figures else figures["steps"]


def summarise(repeats: Sequence[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per label source, measured set and group: the mean FSPO - GRPO difference with its interval over the
    repeats that have a span of the group, and each arm's mean."""
    summary = {}
    for key in repeats[0]:
        differences = [r[key]["fspo_minus_grpo"] for r in repeats if math.isfinite(r[key]["fspo_minus_grpo"])]
        if not differences:
            continue
        mean, low, high, n = t_interval(differences)
        summary[key] = {
            "fspo_minus_grpo": mean,
            "lower": low,
            "upper": high,
            "repeats": n,
            "grpo": statistics.fmean(r[key]["grpo"] for r in repeats if math.isfinite(r[key]["grpo"])),
            "fspo": statistics.fmean(r[key]["fspo"] for r in repeats if math.isfinite(r[key]["fspo"])),
            "spans": sum(_span_count(r[key]) for r in repeats),
        }
    return summary


def draw_rollouts(
    model,
    tokenizer,
    rows: Sequence[dict],
    n: int,
    name: str,
    source: str,
    labels: Sequence[str],
    max_new_tokens: int,
) -> list[Rollout]:
    """``n`` rollouts per row, scripted or sampled, reproducibly from ``name``."""
    if source == "scripted":
        return scripted_rollouts(tokenizer, rows, n, random.Random(name), labels=labels)
    seed = zlib.crc32(name.encode())
    return sampled_rollouts(model, tokenizer, rows, n, seed, max_new_tokens=max_new_tokens, labels=labels)


def measure(
    model: torch.nn.Module,
    tokenizer,
    seeds: Sequence[int],
    batches: int,
    prompts: int,
    n: int,
    lr: float,
    rollouts: str = "scripted",
    labels: Sequence[str] = ("judge",),
    optimizer: str = "adamw",
    flip: Flip = apply_step_labels,
    max_new_tokens: int = 96,
    on_repeat: Callable[[int, int, dict], None] | None = None,
) -> list[dict[str, dict[str, float]]]:
    """One paired measurement per (seed, batch): ``prompts`` synthetic questions with ``n`` rollouts each to update
    on (one GRPO update, one FSPO update per label source in ``labels``), and a fresh batch of the same questions'
    rollouts to measure on as well."""
    if rollouts not in ROLLOUT_SOURCES:
        raise ValueError(f"rollouts must be one of {ROLLOUT_SOURCES}, got {rollouts!r}")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    repeats = []
    for seed in seeds:
        for batch in range(batches):
            # The quickstart's prompts (its instruction and worked example): what its policy is sampled on.
            rows = quickstart_rows(prompts, seed, f"flip_effect_{batch}")

            update, fresh = (
                draw_rollouts(model, tokenizer, rows, n, f"{seed}:{batch}:{part}", rollouts, labels, max_new_tokens)
                for part in ("update", "fresh")
            )
            result = paired_effect(model, update, {"same": update, "fresh": fresh}, pad_id, lr, optimizer, flip, labels)
            repeats.append(result)
            if on_repeat:
                on_repeat(seed, batch, result)
    return repeats


# ---------------------------------------------------------------------------------------------
# Command line.
# ---------------------------------------------------------------------------------------------


def load_model(name: str, workdir: Path, device: str = "cpu"):
    """``tiny`` (a tiny random Qwen2), ``smollm2`` (the quickstart's, converted once), or a model directory, in
    float32 on ``device``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if name == "tiny":
        from fspo_testing.tiny_model import build_tiny_model

        path = build_tiny_model(workdir / "tiny")
    elif name == "smollm2":
        from fspo.quickstart.smollm2 import convert_smollm2

        path = convert_smollm2()
    else:
        path = Path(name)
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"--model {name}: not tiny, smollm2 or a model directory with a config.json")
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).to(device)
    return model, tokenizer


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="tiny, smollm2 or a model directory (default smollm2)")
    parser.add_argument("--rollouts", choices=ROLLOUT_SOURCES, default="sampled")
    parser.add_argument(
        "--labels",
        choices=LABEL_SOURCES,
        nargs="+",
        default=["judge"],
        help="where the flip's labels come from: one FSPO update per source, all paired with one GRPO update",
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--batches", type=int, default=3, help="update batches per seed")
    parser.add_argument("--prompts", type=int, default=4, help="questions per batch")
    parser.add_argument("--n", type=int, default=8, help="rollouts per question (the GRPO group)")
    parser.add_argument("--lr", type=float, default=2e-5, help="the quickstart's actor learning rate")
    parser.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--device", default="cpu", help="where the model runs: cpu or cuda (float32 on either)")
    parser.add_argument("--out", type=Path, help="write the repeats and the summary here as JSON")
    parser.add_argument(
        "--table",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="measure nothing: merge the repeats of these --out files (runs of other seeds) and print the table",
    )
    return parser


def with_label_sources(result: dict) -> dict:
    """A ``--out`` result with ``args.labels`` a list and every key ``source/set/group``: files written before
    ``--labels`` took several sources (one source, keys ``set/group``) read as one-source files."""
    source = result["args"]["labels"]
    if not isinstance(source, str):
        return result
    repeats = [{f"{source}/{key}": value for key, value in repeat.items()} for repeat in result["repeats"]]
    return result | {"args": result["args"] | {"labels": [source]}, "repeats": repeats}


def merge_results(results: Sequence[dict]) -> dict:
    """One result from several ``--out`` files of the same settings and other seeds (run side by side)."""
    results = [with_label_sources(result) for result in results]
    settings = [{k: v for k, v in r["args"].items() if k not in ("seeds", "out")} for r in results]
    if any(s != settings[0] for s in settings):
        raise ValueError(
            "--table: the files were measured with different settings; merge runs that differ only in seeds"
        )
    seeds = sorted(seed for r in results for seed in r["args"]["seeds"])
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--table: a seed appears in more than one file ({seeds})")
    repeats = [repeat for r in results for repeat in r["repeats"]]
    return {"args": settings[0] | {"seeds": seeds}, "repeats": repeats, "summary": summarise(repeats)}


LABEL_NAMES = {
    "judge": "world judge",
    "lexical": "`lexical`",
    "lexical-abstain": "`lexical`, abstaining on non-claims",
}


ROLLOUTS_MEASURED = {"same": "the update's own", "fresh": "fresh"}  # under the header "rollouts measured"
GROUP_NAMES = {
    CONTRADICTED: "steps the judge contradicts",
    SUPPORTED: "steps the judge supports",
    COPIED: "claims copied from the evidence",
    OWN_WORDS: "claims in other words",
    RIGHT_ANSWER: "the answer of a right response",
}


# The figures benchmarks/preregistration_flip_labels.md decided before its first run ("Figures decided now"):
# (question, label source, rollouts, spans, the expected sign of FSPO - GRPO). A test holds the two equal.
DECIDED = (
    (1, "lexical", "fresh", CONTRADICTED, -1),
    (2, "lexical", "fresh", COPIED, +1),
    (2, "lexical", "fresh", OWN_WORDS, -1),
    (3, "lexical", "fresh", RIGHT_ANSWER, -1),
)


def decided_verdicts(result: dict) -> list[str]:
    """A line for each figure of :data:`DECIDED` (the table above it holds its interval): whether it shows the
    expected sign, shows the other, or spans 0 (not shown, as the plan reports it). A figure without an interval
    (one repeat had such a span) is not shown; one no repeat measured says so. Nothing when the result holds none
    of the decided sources."""
    if not any(source in result["args"]["labels"] for _, source, *_ in DECIDED):
        return []
    lines = []
    for question, source, batch, group, sign in DECIDED:
        f = result["summary"].get(f"{source}/{batch}/{group}")
        rollouts = f"{ROLLOUTS_MEASURED[batch]} rollouts"
        name = f"- Question {question}, {LABEL_NAMES[source]} labels, {rollouts}, {GROUP_NAMES[group]}"
        if f is None:
            lines.append(f"{name}: not measured (no repeat had such a span).")
            continue
        if not (math.isfinite(f["lower"]) and math.isfinite(f["upper"])):
            verdict = f"not shown ({f['repeats']} repeat with such a span: no interval)"
        elif f["lower"] <= 0 <= f["upper"]:
            verdict = "not shown (the interval spans 0)"
        elif (f["fspo_minus_grpo"] > 0) == (sign > 0):
            verdict = "shown"
        else:
            verdict = "the other sign shown"
        lines.append(f"{name}, expected {'+' if sign > 0 else '−'}: {verdict}.")  # its figures: the table's row
    return lines


def markdown_table(result: dict) -> str:
    """The summary as the Markdown table docs/results.md shows, rows in the order measured. With several label
    sources, one column of FSPO - GRPO per source, headed by its name, beside GRPO's change, which every source
    shares (one GRPO update pairs with all of them); one source is named in the text above the table."""
    sources = result["args"]["labels"]
    if len(sources) == 1:
        lines = [
            "| rollouts measured | spans measured | FSPO − GRPO, 95% interval | GRPO | FSPO | spans | repeats |",
            "|---|---|---|---|---|---|---|",
        ]
        for key, f in result["summary"].items():
            _, batch, group = key.split("/")
            lines.append(
                f"| {ROLLOUTS_MEASURED.get(batch, batch)} | {GROUP_NAMES[group]} | {_difference(f)}"
                f" | {f['grpo']:+.3f} | {f['fspo']:+.3f} | {f['spans']} | {f['repeats']} |"
            )
        return "\n".join(lines)
    lines = [
        "| rollouts measured | spans measured | spans | repeats | GRPO | "
        + " | ".join(LABEL_NAMES[source] for source in sources)
        + " |",
        "|---|---|---|---|---|" + "---|" * len(sources),
    ]
    rows = dict.fromkeys(key.split("/", 1)[1] for key in result["summary"])
    for row in rows:
        figures = [result["summary"].get(f"{source}/{row}") for source in sources]
        shared = {(f["grpo"], f["spans"], f["repeats"]) for f in figures if f is not None}
        if len(shared) != 1:
            raise ValueError(f"{row}: the label sources disagree on GRPO's change or the spans; not one paired run")
        grpo, spans, repeats = shared.pop()
        batch, group = row.split("/")
        cells = [_difference(f) if f is not None else "n/a" for f in figures]
        lines.append(
            f"| {ROLLOUTS_MEASURED.get(batch, batch)} | {GROUP_NAMES[group]} | {spans} | {repeats} | {grpo:+.3f} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def _difference(figures: dict) -> str:
    return f"{figures['fspo_minus_grpo']:+.3f} [{figures['lower']:+.3f}, {figures['upper']:+.3f}]"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.table:
        try:
            merged = merge_results([json.loads(path.read_text()) for path in args.table])
            verdicts = decided_verdicts(merged)  # the pre-registered figures, under the table
            print(markdown_table(merged) + ("\n\n" + "\n".join(verdicts) if verdicts else ""))
        except (OSError, ValueError, KeyError) as error:
            print(f"flip_effect: {error}", file=sys.stderr)
            return 2
        return 0
    if min(args.batches, args.prompts, args.n) < 1 or args.lr <= 0:
        print("flip_effect: --batches, --prompts and --n must be >= 1 and --lr > 0", file=sys.stderr)
        return 2
    if args.model == "tiny" and args.rollouts == "sampled":
        print("flip_effect: a tiny random model writes no reasoning steps; use --rollouts scripted", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    started = time.time()
    with tempfile.TemporaryDirectory() as workdir:
        try:
            model, tokenizer = load_model(args.model, Path(workdir), args.device)
        except (FileNotFoundError, ImportError) as error:
            print(f"flip_effect: {error}", file=sys.stderr)
            return 2

        def progress(seed: int, batch: int, result: dict) -> None:
            figures = ", ".join(f"{key} {value['fspo_minus_grpo']:+.4f}" for key, value in result.items())
            print(f"seed {seed} batch {batch} ({time.time() - started:.0f} s): FSPO - GRPO {figures}", flush=True)

        repeats = measure(
            model,
            tokenizer,
            args.seeds,
            args.batches,
            args.prompts,
            args.n,
            args.lr,
            args.rollouts,
            args.labels,
            args.optimizer,
            max_new_tokens=args.max_new_tokens,
            on_repeat=progress,
        )
    summary = summarise(repeats)
    print(
        f"\nChange in a span's log-probability after one update, FSPO - GRPO ({CONFIDENCE:.0%} interval over repeats):"
    )
    for key, figures in summary.items():
        print(
            f"  {key:<20} {figures['fspo_minus_grpo']:+.4f} [{figures['lower']:+.4f}, {figures['upper']:+.4f}]"
            f"  (GRPO {figures['grpo']:+.4f}, FSPO {figures['fspo']:+.4f}; {figures['spans']} spans, "
            f"{figures['repeats']} repeats)"
        )
    print(f"{time.time() - started:.0f} s")
    if args.out:
        args.out.write_text(
            json.dumps({"args": vars(args) | {"out": str(args.out)}, "repeats": repeats, "summary": summary}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
