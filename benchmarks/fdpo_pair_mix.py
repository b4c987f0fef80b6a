"""How many sampled pairs the committed F-DPO runs flipped, and what the authors' pair mix keeps instead (issue 70).

``benchmarks/fspo_vs_grpo.py``'s F-DPO runs (seeds 0-2 in ``results/quickstart_2026-11-26.json``) did not keep their samples
or pairs. This script samples them again as ``fdpo_model`` does (the base model on the seed's first steps x 2
training questions, 4 answers each at temperature 0.7, 96 tokens, seed = the run's seed), labels them with the
verifier the RL arms train with, and counts the pairs of both mixes of :func:`fspo.methods.fdpo.pairs.preference_pairs`
(``flip-real-pairs`` is what those runs trained; ``authors`` is the default now)::

    .venv/bin/python benchmarks/fdpo_pair_mix.py --seeds 0 1 2 --output-dir outputs/fdpo_pair_mix

It writes ``results/fdpo_pair_mix.json`` (or ``--results``). Sampling takes about a minute a seed on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from pathlib import Path

from fspo_vs_grpo import FDPO_MAX_TOKENS, FDPO_PROMPTS_PER_STEP, FDPO_SAMPLES, FDPO_TEMPERATURE

from fspo.cpu.compute import DTYPE_ENV, FLOAT32
from fspo.data.io import read_rows
from fspo.methods.fdpo.pairs import (
    AUTHORS_MIX,
    FLIP_REAL_PAIRS_MIX,
    Sample,
    candidate_pairs,
    misordered,
    preference_pairs,
    variant_sources,
)
from fspo.quickstart.cli import PROMPT_FORMAT, VAL_ROWS, prepare_data, say
from fspo.quickstart.cli import VERIFIER as QUICKSTART_VERIFIER

MAX_PAIRS_PER_PROMPT = 4  # build-pairs' default, which the committed runs used


def sampled_responses(seed: int, steps: int, out: Path, clock: float) -> Path:
    """The seed's F-DPO samples, as ``fspo_vs_grpo.fdpo_model`` draws them (kept if already drawn)."""
    samples = out / f"seed{seed}" / "samples.jsonl"
    if samples.is_file():
        return samples
    from fspo.evaluation.generation import GenerationSettings, build_generator
    from fspo.evaluation.pipeline import evaluate_benchmark
    from fspo.quickstart.smollm2 import convert_smollm2

    train_file, _ = prepare_data(out / "data" / f"seed{seed}", seed, VAL_ROWS)
    rows = read_rows(train_file)[: steps * FDPO_PROMPTS_PER_STEP]
    settings = GenerationSettings(FDPO_TEMPERATURE, 1.0, FDPO_MAX_TOKENS, FDPO_SAMPLES, batch_size=8, seed=seed)
    generator = build_generator(convert_smollm2(), settings, backend="hf")
    say(clock, f"[seed {seed}] sampling {FDPO_SAMPLES} answers to each of {len(rows)} training questions")
    partial = samples.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    evaluate_benchmark(generator, generator.tokenizer, rows, partial, PROMPT_FORMAT, description="fdpo")
    partial.rename(samples)
    return samples


def labelled_samples(samples_file: Path) -> list[list[Sample]]:
    """Each prompt's samples with F-DPO's label from the quickstart's verifier, as ``fspo fdpo build-pairs`` makes
    them (the benchmark's fdpo_pair_verifier passes these settings)."""
    from fspo.cli.fdpo import judged_steps, record_samples, step_texts
    from fspo.config.verifier import verifier_config
    from fspo.evaluation.records import read_records
    from fspo.utils.record_schemas import Prediction
    from fspo.verifiers import build_verifier

    settings = dict(QUICKSTART_VERIFIER)
    threshold = settings.pop("threshold")
    verifier = build_verifier(verifier_config(settings))
    records = list(read_records(samples_file, Prediction))
    items = [(r.get("evidence") or "", [step_texts(text) for text in r["responses"]]) for r in records]
    verdicts = judged_steps(verifier, threshold, items)
    return [record_samples(r, v, str(samples_file)) for r, v in zip(records, verdicts)]


def pair_counts(groups: list[list[Sample]]) -> dict:
    """What each mix keeps of the sampled pairs: by bucket (h_chosen, h_rejected) before the cap, and after it."""
    buckets: Counter = Counter()
    counts = Counter(prompts=len(groups), responses=sum(map(len, groups)))
    for group in groups:
        candidates = candidate_pairs(group)
        counts["hallucinated"] += sum(s.hallucinated == 1 for s in group)
        counts["unlabelled"] += sum(s.hallucinated is None for s in group)
        counts["candidates"] += len(candidates)
        buckets.update(
            "unlabelled" if None in (a.hallucinated, b.hallucinated) else f"({a.hallucinated},{b.hallucinated})"
            for _, _, a, b in candidates
        )
        # right over wrong: an outcome difference, not a misordered pair (the authors' mix drops those)
        outcome = [(a, b) for _, _, a, b in candidates if a.score > b.score and not misordered(a, b)]
        counts["outcome_pairs"] += len(outcome)
        for mix in (FLIP_REAL_PAIRS_MIX, AUTHORS_MIX):
            kept = preference_pairs(group, MAX_PAIRS_PER_PROMPT, mix)
            kept_ids = {(id(p.chosen), id(p.rejected)) for p in kept}
            counts[f"{mix}:pairs"] += len(kept)
            counts[f"{mix}:flipped"] += sum(p.flipped for p in kept)
            counts[f"{mix}:margin"] += sum(p.margin_weight for p in kept)
            counts[f"{mix}:outcome_pairs_cut"] += sum((id(a), id(b)) not in kept_ids for a, b in outcome)
            counts[f"{mix}:variant_sources"] += len(variant_sources(group, 1, mix))
    return {**dict(counts), "buckets": dict(sorted(buckets.items()))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="the runs' seeds (default 0 1 2)")
    parser.add_argument("--steps", type=int, default=12, help="the runs' training steps (default 12)")
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/fdpo_pair_mix"), help="samples go here")
    parser.add_argument("--results", type=Path, default=Path(__file__).parent / "results" / "fdpo_pair_mix.json")
    args = parser.parse_args(argv)
    os.environ[DTYPE_ENV] = FLOAT32  # as fspo_vs_grpo's runs
    clock = time.time()
    per_seed = {}
    for seed in args.seeds:
        per_seed[seed] = pair_counts(labelled_samples(sampled_responses(seed, args.steps, args.output_dir, clock)))
        say(clock, f"[seed {seed}] {json.dumps(per_seed[seed])}")
    args.results.write_text(
        json.dumps({"steps": args.steps, "max_pairs_per_prompt": MAX_PAIRS_PER_PROMPT, "seeds": per_seed}, indent=2)
        + "\n"
    )
    say(clock, f"wrote {args.results}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
