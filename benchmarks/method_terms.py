"""KnowRL's factuality term and FAPO's non-claim steps on the quickstart, the figures docs/methods.md states (issue 70).

From 64 rollouts of the untrained quickstart model (16 training prompts x 4 samples at the training temperature),
judged as a training run judges them (:func:`fspo.methods.reward_modes.judged_steps`, the quickstart's ``lexical``
verifier, :func:`fspo.methods.reward_modes.added_reward`):

- KnowRL: its term's mean and max, the groups of equally graded rollouts whose GRPO advantages the term alone sets,
  and how much counting clauses (:func:`fspo.verifiers.clauses.split_clauses`) instead of steps would raise ``n``;
- FAPO: the steps :func:`fspo.steps.is_claim` calls non-claims, and the flawed positives with ``skip_non_claims``
  on and off.

Two figures come from committed files: the share of one-clause steps in ``tests/data/judged_quickstart_steps.jsonl``
and KnowRL's term on the trained knowrl arm's greedy answers in ``results/quickstart_2026-11-26.json``. Those answers kept
only the world judge's counts, so there the term takes the judge's verdicts, every step (repeats too) and F1 = 1 as
right: an estimate of what the lexical verifier would give.

Usage::

    .venv/bin/python benchmarks/method_terms.py             # figures from the committed rollouts (seconds)
    .venv/bin/python benchmarks/method_terms.py --generate  # draw the rollouts again: ~23 min on 2 CPU cores

Both write ``results/method_terms.json`` (or ``--results``) and print the phrases docs/methods.md should hold.
The rollouts are sampled on the CPU; a machine with other vector units (the JSON records the CPU and its AVX
flags) may draw other texts.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time
from pathlib import Path

from fspo.config.fspo_config import FSPOConfig, fspo_config
from fspo.config.verifier import verifier_config
from fspo.methods.fapo import is_correct, is_flawed_positive
from fspo.methods.knowrl import is_refusal
from fspo.methods.reward_modes import added_reward, base_reward, judged_steps
from fspo.quickstart.cli import VERIFIER, quickstart_rows
from fspo.steps import is_claim, reasoning_steps
from fspo.token_labels import verdicts_from_scores
from fspo.training.outcome import compute_score, extract_answer
from fspo.verifiers import build_verifier
from fspo.verifiers.clauses import split_clauses

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results" / "method_terms.json"
JUDGED_STEPS_FILE = BENCHMARKS.parent / "tests" / "data" / "judged_quickstart_steps.jsonl"
FSPO_VS_GRPO = BENCHMARKS / "results" / "quickstart_2026-11-26.json"
FDPO_PAIR_MIX = BENCHMARKS / "results" / "fdpo_pair_mix.json"

# The rollouts: as a quickstart training step draws them (rollout.n=4, T 0.7, 96 tokens), on its first rows.
PROMPTS, ROW_SEED, SAMPLES = 16, 0, 4
GENERATION_BATCH = 32
TORCH_THREADS = 1  # the committed rollouts were drawn so; the thread count can change sampled texts


def _sibling(name: str):
    """A benchmark script beside this one, as a module (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def machine() -> dict:
    """The CPU's model name and its AVX flags (what sampling on the CPU may depend on)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    return {
        "cpu": fields.get("model name", "unknown"),
        "avx_flags": sorted(flag for flag in fields.get("flags", "").split() if "avx" in flag),
    }


def mode_settings(mode: str, **keys) -> FSPOConfig:
    """The ``fspo:`` settings of a run in ``mode`` (the defaults a recipe of that mode leaves), with ``keys`` set."""
    return fspo_config({"fspo": {"mode": mode, **keys}})


def draw_rollouts() -> tuple[list[list[str]], float]:
    """``SAMPLES`` responses to each of the ``PROMPTS`` rows (responses[prompt][sample]), sample k drawn for every
    prompt after ``torch.manual_seed(k)``; and the seconds it took."""
    import torch

    from fspo.quickstart.smollm2 import convert_smollm2

    torch.set_num_threads(TORCH_THREADS)
    judged = _sibling("judged_steps")
    model, rows = convert_smollm2(), quickstart_rows(PROMPTS, ROW_SEED, "train")
    started = time.time()
    by_sample = [
        judged.generate(model, rows, judged.TRAINING_TEMPERATURE, seed=k, batch_size=GENERATION_BATCH)
        for k in range(SAMPLES)
    ]
    return [list(responses) for responses in zip(*by_sample)], time.time() - started


def judged_rollout(settings, verifier, row: dict, response: str) -> dict:
    """One rollout as the reward manager judges it in ``settings.mode``: its judged steps' verdicts, correctness,
    refusal, base reward and added reward (fspo/training/reward.py, run_single and _label)."""
    outcome = compute_score(row["data_source"], response, row["reward_model"]["ground_truth"], row["extra_info"])
    correct = is_correct(outcome, outcome["score"])
    refused = settings.mode == "knowrl" and is_refusal(extract_answer(response))
    steps = judged_steps(settings, response)
    scores = verifier.score([(row["extra_info"]["evidence"], step.text) for step in steps]) if steps else []
    verdicts = verdicts_from_scores(scores, verifier.threshold, verifier.strict_threshold)
    supported, unsupported = sum(v > 0 for v in verdicts), sum(v < 0 for v in verdicts)
    return {
        "correct": correct,
        "base": base_reward(settings, outcome["score"], correct, refused),
        "term": added_reward(settings, supported, unsupported, correct, refused),
        "judged": supported + unsupported,
        # clause-counted n: each clause of a judged step counts as a fact with its step's verdict
        "judged_clauses": sum(len(split_clauses(s.text)) for s, v in zip(steps, verdicts, strict=True) if v),
        "unsupported": unsupported,
    }


def knowrl_figures(groups: list[list[dict]]) -> dict:
    """KnowRL's term over judged rollouts in groups (one prompt's rollouts each)."""
    rollouts = [rollout for group in groups for rollout in group]
    terms = [rollout["term"] for rollout in rollouts]
    judged, clauses = sum(r["judged"] for r in rollouts), sum(r["judged_clauses"] for r in rollouts)
    equally_graded = [group for group in groups if len({r["base"] for r in group}) == 1]
    # GRPO (reward - mean) / std: in a group of equal base rewards a term that varies is the whole advantage
    set_by_term = [group for group in equally_graded if len({r["term"] for r in group}) > 1]
    return {
        "rollouts": len(rollouts),
        "groups": len(groups),
        "right": sum(r["correct"] for r in rollouts),
        "judged_steps": judged,
        "judged_clauses": clauses,
        "clause_ratio": clauses / judged,
        "term_mean": statistics.fmean(terms),
        "term_max": max(terms),
        "equally_graded_groups": len(equally_graded),
        "groups_set_by_term": len(set_by_term),
    }


def fapo_figures(rows: list[dict], responses: list[list[str]], verifier) -> dict:
    """Non-claim steps among the rollouts' reasoning steps, and the flawed positives with skip_non_claims on/off."""
    steps = [step for answers in responses for answer in answers for step in reasoning_steps(answer)]
    figures = {"answers": sum(map(len, responses)), "steps": len(steps)}
    figures["non_claim_steps"] = sum(not is_claim(step.text) for step in steps)
    for skip in (True, False):
        settings = mode_settings("fapo", skip_non_claims=skip)
        judged = [judged_rollout(settings, verifier, row, a) for row, answers in zip(rows, responses) for a in answers]
        flawed = sum(is_flawed_positive(r["correct"], r["unsupported"]) for r in judged)
        figures[f"flawed_positives_skip_non_claims_{str(skip).lower()}"] = flawed
    return figures


def clause_figures(judged_steps_file: Path) -> dict:
    """How many of the labelled quickstart steps are one clause, and clauses per step."""
    claims = [json.loads(line)["claim"] for line in judged_steps_file.read_text().splitlines() if line.strip()]
    clauses = [len(split_clauses(claim)) for claim in claims]
    return {
        "steps": len(claims),
        "one_clause": sum(c == 1 for c in clauses),
        "clause_ratio": sum(clauses) / len(claims),
    }


def trained_arm_figures(fspo_vs_grpo: dict, arm: str = "knowrl") -> dict:
    """KnowRL's term on ``arm``'s greedy answers after training, from the world judge's per-question counts
    ([contradicted, judged claims, F1, ...]): mean, max, and its share of the reward's variance."""
    settings = mode_settings("knowrl")
    terms, rewards = [], []
    for run in fspo_vs_grpo["runs"]:
        if run["arm"] != arm or not run.get("after"):
            continue
        for contradicted, claims, f1, *_ in run["after"]["per_question"].values():
            correct = f1 == 1.0
            terms.append(added_reward(settings, claims - contradicted, contradicted, correct))
            rewards.append(base_reward(settings, f1, correct) + terms[-1])
    return {
        "answers": len(terms),
        "term_mean": statistics.fmean(terms),
        "term_max": max(terms),
        "reward_variance_share": statistics.pvariance(terms) / statistics.pvariance(rewards),
    }


def pair_mix_totals(pair_mix: dict) -> dict:
    """fdpo_pair_mix.json's counts summed over its seeds."""
    keys = ("flip-real-pairs:pairs", "flip-real-pairs:flipped", "outcome_pairs")
    keys += ("flip-real-pairs:outcome_pairs_cut", "authors:outcome_pairs_cut")
    return {key: sum(seed[key] for seed in pair_mix["seeds"].values()) for key in keys}


def figures(responses: list[list[str]], fspo_vs_grpo: dict, judged_steps_file: Path = JUDGED_STEPS_FILE) -> dict:
    """Every figure, from the rollouts (responses[prompt][sample]) and the committed files."""
    rows = quickstart_rows(len(responses), ROW_SEED, "train")
    verifier = build_verifier(verifier_config(VERIFIER))
    knowrl = mode_settings("knowrl")
    groups = [[judged_rollout(knowrl, verifier, row, a) for a in answers] for row, answers in zip(rows, responses)]
    return {
        "knowrl": {
            "judged_quickstart_steps": clause_figures(judged_steps_file),
            "untrained_rollouts": knowrl_figures(groups),
            "trained_arm_greedy": trained_arm_figures(fspo_vs_grpo),
        },
        "fapo": fapo_figures(rows, responses, verifier),
    }


def _short_e(value: float) -> str:
    """``value`` in the page's notation: two significant digits, the exponent without a leading zero (2.9e-4)."""
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def doc_phrases(figures: dict, pair_mix: dict) -> list[str]:
    """The phrases of docs/methods.md's departures table that state these figures, formatted from them."""
    clauses = figures["knowrl"]["judged_quickstart_steps"]
    untrained = figures["knowrl"]["untrained_rollouts"]
    trained = figures["knowrl"]["trained_arm_greedy"]
    fapo, fdpo = figures["fapo"], pair_mix_totals(pair_mix)
    low, high = sorted((clauses["clause_ratio"], untrained["clause_ratio"]))
    flipped, pairs = fdpo["flip-real-pairs:flipped"], fdpo["flip-real-pairs:pairs"]
    return [
        f"{clauses['one_clause']} of {clauses['steps']} judged quickstart steps are one clause",
        f"counting clauses raises n {low:.2f}–{high:.2f}×",
        f"mean {_short_e(untrained['term_mean'])} (max {_short_e(untrained['term_max'])}) on"
        f" {untrained['rollouts']} untrained rollouts",
        f"{trained['term_mean']:.3f} (max {trained['term_max']:.2f}, {trained['reward_variance_share']:.1%} of the"
        " reward variance) on the trained arm's greedy answers",
        f"({untrained['groups_set_by_term']} of {untrained['groups']} sampled groups)",
        f"{fapo['non_claim_steps']} non-claim steps in {fapo['answers']} quickstart answers",
        f"{flipped} of {pairs} pairs ({flipped / pairs:.1%}) were flipped real pairs",
        f"the cap cut {fdpo['flip-real-pairs:outcome_pairs_cut']} of {fdpo['outcome_pairs']} right-over-wrong pairs"
        f" (default: {fdpo['authors:outcome_pairs_cut']})",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generate", action="store_true", help="draw the rollouts again (~23 min on 2 CPU cores)")
    parser.add_argument("--results", type=Path, default=RESULTS, help=f"read and write here (default {RESULTS})")
    args = parser.parse_args(argv)
    code = _sibling("fspo_vs_grpo").code_version()
    if args.generate:
        responses, seconds = draw_rollouts()
        rollouts = {
            "drawn": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
            "code": code,
            **machine(),
            "sampling_seconds": round(seconds),
        }
    elif args.results.is_file():
        rollouts = json.loads(args.results.read_text())["rollouts"]
        responses = rollouts.pop("responses")
    else:
        parser.error(f"--results {args.results}: no such file; pass --generate to draw the rollouts")
    rollouts.update(
        model="SmolLM2-135M-Instruct (fspo.quickstart.smollm2.convert_smollm2), float32, untrained",
        rows=f"fspo.quickstart.cli.quickstart_rows({PROMPTS}, {ROW_SEED}, 'train')",
        sampling=f"benchmarks/judged_steps.py generate: temperature 0.7, top_k 0, 96 new tokens, batch "
        f"{GENERATION_BATCH}, {TORCH_THREADS} torch thread; sample k of every prompt after torch.manual_seed(k), "
        f"k = 0..{SAMPLES - 1}",
    )
    results = {
        "computed": {"date": time.strftime("%Y-%m-%d", time.gmtime()), "code": code},
        "figures": figures(responses, json.loads(FSPO_VS_GRPO.read_text())),
        "rollouts": {**rollouts, "responses": responses},
    }
    args.results.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(results["figures"], indent=1))
    print("docs/methods.md should say:")
    for phrase in doc_phrases(results["figures"], json.loads(FDPO_PAIR_MIX.read_text())):
        print(f"  {phrase}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
