"""Verifier throughput: the released per-sentence loop vs the batched verifier vs the model's raw forward.

The same randomly initialised model (a real architecture: HHEM's T5-base token classifier, or a BERT
cross-encoder) scores the same pairs three ways in one run:
  released  one call per (evidence, sentence) pair, rollout after rollout (tokenize + forward, batch 1),
            as the FSPO reference code calls HHEM;
  batched   `verifier.score(all pairs of the step)`: deduplicated, length-sorted, token-budget micro-batches;
  ceiling   the model's forward alone on the very micro-batches the batched path builds (pre-tokenized,
            pre-padded, already on the device).
Then the same batched path with `evidence_top_k` (each step checked against its k most relevant evidence
sentences) and the token reduction it gives.

Text is synthetic HotpotQA-like: evidence paragraphs of ~1,250 characters on average (spread evenly between
--evidence-chars/2 and 3/2 of it), each rollout a few reasoning steps restating or garbling evidence facts.
The released loop can be timed on a subset (--released-pairs) on slow machines; it is a rate.

Usage:
    python benchmarks/verifier_throughput.py                      # CPU: small BERT, 32 rollouts, 2 repeats
    python benchmarks/verifier_throughput.py --arch t5-base --device cuda   # HHEM's architecture on a GPU
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

import torch

from fspo.config.verifier import verifier_config
from fspo.verifiers import build_verifier

ARCHS = {
    # HHEM-2.1-Open's architecture: flan-t5-base encoder + 2-way token head (d_ff 2048, gated GELU).
    "t5-base": {
        "kind": "hhem",
        "d_model": 768,
        "d_kv": 64,
        "d_ff": 2048,
        "num_layers": 12,
        "num_heads": 12,
        "feed_forward_proj": "gated-gelu",
        "vocab_size": 32128,
    },
    "t5-small": {
        "kind": "hhem",
        "d_model": 512,
        "d_kv": 64,
        "d_ff": 1024,
        "num_layers": 8,
        "num_heads": 6,
        "feed_forward_proj": "gated-gelu",
        "vocab_size": 32128,
    },
    "bert-base": {
        "kind": "nli",
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
    },
    "bert-small": {
        "kind": "nli",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "intermediate_size": 1024,
    },
}

PEOPLE = [
    "Ada Lovelace",
    "Alan Turing",
    "Grace Hopper",
    "John von Neumann",
    "Emmy Noether",
    "Kurt Godel",
    "Marie Curie",
    "Niels Bohr",
    "Lise Meitner",
    "Paul Dirac",
    "Srinivasa Ramanujan",
    "Rosalind Franklin",
]
PLACES = [
    "London",
    "Vienna",
    "Paris",
    "Princeton",
    "Copenhagen",
    "Cambridge",
    "Berlin",
    "Zurich",
    "Madras",
    "Warsaw",
]
THINGS = [
    "the Analytical Engine",
    "the Bombe",
    "COBOL",
    "the EDVAC report",
    "Noether's theorem",
    "the incompleteness theorems",
    "radium",
    "the Bohr model",
    "nuclear fission",
    "the Dirac equation",
]
FACTS = [
    "{p} was born in {c} in {y}.",
    "{p} moved to {c} in {y} to work on {t}.",
    "{t} was first described by {p} in {y}.",
    "In {y}, {p} gave a lecture in {c} about {t}.",
    "{p} received an honorary degree from the university of {c} in {y}.",
    "The archive in {c} holds {n} letters written by {p}.",
    "{p} and a colleague published {n} papers on {t}.",
    "{c} named a street after {p} in {y}.",
    "A museum in {c} opened an exhibition on {t} in {y}.",
]
STEPS = [
    "The evidence says that {fact}",
    "So {fact}",
    "From the second paragraph, {fact}",
    "We know that {fact}",
    "This means {fact}",
    "Therefore {fact}",
]


def _fact(rng: random.Random) -> str:
    return rng.choice(FACTS).format(
        p=rng.choice(PEOPLE),
        c=rng.choice(PLACES),
        t=rng.choice(THINGS),
        y=rng.randint(1800, 1990),
        n=rng.randint(2, 900),
    )


def make_pairs(rollouts: int, steps: int, group: int, evidence_chars: int, seed: int) -> list[list[tuple[str, str]]]:
    """Per rollout, its (evidence, step) pairs. ``group`` rollouts share a question (and its evidence), as in GRPO."""
    rng = random.Random(seed)
    out = []
    questions = -(-rollouts // group)
    for q in range(questions):
        # Evenly spread lengths (half to 1.5x the mean) so that few questions still average evidence_chars.
        target = int(evidence_chars * (0.5 + (q + 0.5) / questions))
        sentences = []
        while sum(len(s) + 1 for s in sentences) < target:
            sentences.append(_fact(rng))
        evidence = " ".join(sentences)
        for _ in range(min(group, rollouts - len(out))):
            claims = []
            for _ in range(steps):
                fact = rng.choice(sentences) if rng.random() < 0.6 else _fact(rng)  # restated or made up
                claims.append(rng.choice(STEPS).format(fact=fact[0].lower() + fact[1:]))
            out.append([(evidence, c) for c in claims])
    return out


def build_model_dir(arch: str, directory: str) -> dict:
    """Saves a randomly initialised model of ``arch`` plus the MiniLM WordPiece tokenizer; returns the verifier config."""
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForSequenceClassification,
        T5Config,
        T5ForTokenClassification,
    )

    from fspo.launch.preflight import minilm_path

    spec = dict(ARCHS[arch])
    kind = spec.pop("kind")
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())  # a real tokenizer; T5's SentencePiece is not offline
    torch.manual_seed(0)
    if kind == "hhem":
        model = T5ForTokenClassification(T5Config(num_labels=2, pad_token_id=0, eos_token_id=1, **spec))
    else:
        model = BertForSequenceClassification(
            BertConfig(
                vocab_size=len(tokenizer),
                max_position_embeddings=512,
                num_labels=3,
                id2label={0: "entailment", 1: "neutral", 2: "contradiction"},
                label2id={"entailment": 0, "neutral": 1, "contradiction": 2},
                **spec,
            )
        )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return {"name": kind, "model_path": directory}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_released(verifier, rollouts, limit: int | None) -> tuple[float, int]:
    """One call per pair, rollout after rollout (no dedup, no cache, batch 1)."""
    pairs = [pair for rollout in rollouts for pair in rollout][:limit]
    _sync(verifier.device)
    start = time.perf_counter()
    for pair in pairs:
        verifier._score_unique([pair])
    _sync(verifier.device)
    return time.perf_counter() - start, len(pairs)


def time_batched(verifier, pairs) -> float:
    _sync(verifier.device)
    start = time.perf_counter()
    verifier.score(pairs)
    _sync(verifier.device)
    return time.perf_counter() - start


def time_ceiling(verifier, pairs) -> float:
    batches = verifier.micro_batches(pairs)
    _sync(verifier.device)
    start = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            verifier.model(**batch)
    _sync(verifier.device)
    return time.perf_counter() - start


def time_pipeline_only(verifier, pairs) -> float:
    """Everything the batched path does besides the forward: top-k, dedupe, tokenize, plan, pad."""
    start = time.perf_counter()
    verifier.micro_batches(pairs)
    return time.perf_counter() - start


def tokens_per_pair(verifier, pairs) -> float:
    rows, _ = verifier.encode(verifier.prepare(pairs))
    return statistics.mean(len(r["input_ids"]) for r in rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--arch", choices=sorted(ARCHS), default="t5-base" if cuda else "bert-small")
    parser.add_argument("--device", default="cuda" if cuda else "cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--rollouts", type=int, default=64 if cuda else 32)
    parser.add_argument("--steps", type=int, default=12, help="reasoning steps per rollout")
    parser.add_argument("--group", type=int, default=8, help="rollouts per question (share evidence)")
    parser.add_argument(
        "--evidence-chars",
        type=int,
        default=1250,
        help="mean evidence length (HotpotQA ~1,250)",
    )
    parser.add_argument("--max-tokens-per-batch", type=int, default=16384 if cuda else 4096)
    parser.add_argument(
        "--released-pairs",
        type=int,
        default=None if cuda else 64,
        help="time the released loop on this many pairs only (a rate); default all on GPU",
    )
    parser.add_argument("--top-k", type=int, default=3, help="evidence_top_k for the fewer-tokens run")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument(
        "--repeats",
        type=int,
        default=3 if cuda else 2,
        help="timings per method; the fastest counts",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    rollouts = make_pairs(args.rollouts, args.steps, args.group, args.evidence_chars, args.seed)
    pairs = [pair for rollout in rollouts for pair in rollout]
    with tempfile.TemporaryDirectory() as directory:
        config = build_model_dir(args.arch, directory)
        common = {
            **config,
            "device": args.device,
            "dtype": args.dtype,
            "max_tokens_per_batch": args.max_tokens_per_batch,
        }
        verifier = build_verifier(verifier_config(common))
        topk = build_verifier(verifier_config({**common, "evidence_top_k": args.top_k}))
    device = verifier.device
    print(
        f"arch: {args.arch} ({config['name']} verifier, random weights), device: {device}, dtype: {args.dtype}, "
        f"threads: {args.threads}"
    )
    print(
        f"pairs: {len(pairs)} ({args.rollouts} rollouts x {args.steps} steps), "
        f"evidence chars: mean {statistics.mean(len(e) for e, _ in pairs):.0f}"
    )
    verifier.score(pairs[:4])  # warm-up (allocator, kernels)
    time_ceiling(verifier, pairs[:8])

    # Interleaved repeats, fastest of each: other load on a shared machine only ever slows a run down.
    released_s, batched_s, ceiling_s, topk_s, pipeline_s = (float("inf"),) * 5
    for _ in range(args.repeats):
        seconds, released_n = time_released(verifier, rollouts, args.released_pairs)
        released_s = min(released_s, seconds)
        batched_s = min(batched_s, time_batched(verifier, pairs))
        ceiling_s = min(ceiling_s, time_ceiling(verifier, pairs))
        topk_s = min(topk_s, time_batched(topk, pairs))
        pipeline_s = min(pipeline_s, time_pipeline_only(verifier, pairs))
    released, batched, ceiling = (
        released_n / released_s,
        len(pairs) / batched_s,
        len(pairs) / ceiling_s,
    )
    print(f"released loop pairs/s: {released:.2f} (timed on {released_n} pairs)")
    print(f"batched pairs/s: {batched:.2f}")
    print(f"ceiling (raw forward) pairs/s: {ceiling:.2f}")
    print(f"batched top-{args.top_k} pairs/s: {len(pairs) / topk_s:.2f}")
    print(f"speedup: {batched / released:.2f}x")
    print(f"efficiency: {100 * batched / ceiling:.1f}%")
    # On a busy machine the two timings above jitter by +-20%; the pipeline's own cost is steadier:
    print(
        f"pipeline overhead: {1000 * pipeline_s:.0f} ms = {100 * pipeline_s / ceiling_s:.1f}% of the raw "
        f"forward (efficiency bound {100 * ceiling_s / (ceiling_s + pipeline_s):.1f}%)"
    )
    full_tokens, topk_tokens = (
        tokens_per_pair(verifier, pairs),
        tokens_per_pair(topk, pairs),
    )
    print(
        f"tokens per pair: {full_tokens:.0f} -> {topk_tokens:.0f} (top-{args.top_k}, "
        f"-{100 * (1 - topk_tokens / full_tokens):.0f}%)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
