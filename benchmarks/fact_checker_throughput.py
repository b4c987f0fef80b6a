"""Pairs per second of each model step verifier at its published full size, with random weights.

HHEM-2.1-Open (T5-base encoder), MiniCheck-RoBERTa-Large, MiniCheck-DeBERTa-v3-Large,
MiniCheck-Flan-T5-Large and FactCG-DeBERTa-v3-Large: each is built at its published architecture's size
(fspo_testing.tiny_verifiers.FULL_SIZE; HHEM as in benchmarks/verifier_throughput.py), with a real
tokenizer of its kind trained here on the benchmark's own text, and scores the same synthetic
HotpotQA-like (evidence, step) pairs through the verifier factory's batched path (the backend's own
input string and window). Random weights cost what trained ones do: the figures are speed, not accuracy.
Tokens per pair are printed beside pairs/s: a tokenizer trained on this text splits it about as the
published ones split English (their token counts may differ by some tens of percent).

Usage:
    python benchmarks/fact_checker_throughput.py                       # CPU, 4 pairs per verifier
    python benchmarks/fact_checker_throughput.py --device cuda --pairs 512
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time

import torch
from verifier_throughput import build_model_dir, make_pairs

from fspo.config.verifier import verifier_config
from fspo.verifiers import build_verifier
from fspo_testing.tiny_verifiers import BUILDERS, FULL_SIZE, corpus

# (label, backend name, architecture); HHEM's is built by verifier_throughput.build_model_dir.
VERIFIERS = [
    ("HHEM-2.1-Open (T5-base)", "hhem", "t5-base"),
    ("MiniCheck-RoBERTa-L", "minicheck", "roberta-large"),
    ("MiniCheck-DeBERTa-v3-L", "minicheck", "deberta-v3-large"),
    ("MiniCheck-Flan-T5-L", "minicheck", "flan-t5-large"),
    ("FactCG-DeBERTa-v3-L", "factcg", "deberta-v3-large"),
]


def build(name: str, arch: str, directory: str, texts: list[str]) -> str:
    if name == "hhem":
        return build_model_dir(arch, directory)["model_path"]
    return str(BUILDERS[arch](directory, dims=FULL_SIZE[arch], texts=texts, tokenizer_vocab=8000))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--device", default="cuda" if cuda else "cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--pairs", type=int, default=512 if cuda else 4, help="(evidence, step) pairs per verifier")
    parser.add_argument("--evidence-chars", type=int, default=1250, help="mean evidence length (HotpotQA ~1,250)")
    parser.add_argument("--max-tokens-per-batch", type=int, default=16384 if cuda else 4096)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--only", nargs="*", default=None, help="labels (or backend names) to run")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    steps = 8
    rollouts = make_pairs(-(-args.pairs // steps), steps, 8, args.evidence_chars, seed=0)
    pairs = [pair for rollout in rollouts for pair in rollout][: args.pairs]
    # The tokenizers learn this kind of text from a larger sample of it (512 rollouts' pairs).
    sample = [pair for rollout in make_pairs(512, steps, 8, args.evidence_chars, seed=1) for pair in rollout]
    texts = list(dict.fromkeys(text for evidence, claim in sample for text in (evidence, claim))) + corpus()
    print(
        f"device: {args.device}, dtype: {args.dtype}, threads: {args.threads}, pairs: {len(pairs)}, "
        f"evidence chars: mean {statistics.mean(len(e) for e, _ in pairs):.0f}"
    )
    print("| verifier | parameters | tokens/pair | pairs/s | tokens/s |\n|---|---|---|---|---|")
    for label, name, arch in VERIFIERS:
        if args.only and label not in args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory() as directory:
            path = build(name, arch, directory, texts)
            verifier = build_verifier(
                verifier_config(
                    {
                        "name": name,
                        "model_path": path,
                        "device": args.device,
                        "dtype": args.dtype,
                        "max_tokens_per_batch": args.max_tokens_per_batch,
                        "placement": "local",
                    }
                )
            )
        parameters = sum(p.numel() for p in verifier.model.parameters())
        rows, _ = verifier.encode(pairs)
        tokens = statistics.mean(len(row["input_ids"]) for row in rows)
        verifier.score(pairs[:1])  # warm-up
        start = time.perf_counter()
        verifier.score(pairs)
        if verifier.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        print(
            f"| {label} | {parameters / 1e6:.0f} M | {tokens:.0f} | {len(pairs) / seconds:.2f} | "
            f"{len(pairs) * tokens / seconds:.0f} |",
            flush=True,
        )
        del verifier
        gc.collect()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
