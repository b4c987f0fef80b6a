"""Verifier quality: AUROC, balanced accuracy and the calibrated threshold of each offline backend.

Every offline backend (``lexical`` with the whole evidence and, as ``lexical-sentence``, with each clause of
a claim in its own best evidence sentence, ``embedding`` and, given ``--finetuned DIR``, the cross-encoder of
``fspo verifier train`` through the ``nli`` backend) scores the held-out split of the built-in labelled
sources (see `fspo.verifier_tools.labelled`):
  halueval            HaluEval-QA: "The answer to '<question>' is <right / hallucinated answer>." vs the knowledge;
  synthetic           synthetic worlds: each gold fact as the evidence states it vs the same fact with its
                      object swapped;
  synthetic-restated  the same claims in other words.
It prints one figure a line (source, backend, figure, value), then the Markdown table of docs/verifiers.md.

The calibrated threshold is the one that maximises balanced accuracy on the held-out rows scored here,
so "balanced accuracy at the calibrated threshold" is an in-sample optimum; AUROC does not depend on it.
pairs/s is one ``score()`` call over all pairs on this machine's CPU (shared machines: a rough figure).

Usage:
    fspo verifier train --data halueval --data synthetic --data synthetic-restated --output-dir /tmp/minilm-ce
    python benchmarks/verifier_quality.py --finetuned /tmp/minilm-ce
"""

from __future__ import annotations

import argparse
import sys
import time

from fspo.config.verifier import verifier_config
from fspo.verifier_tools.labelled import SOURCES, load_labelled
from fspo.verifier_tools.quality import summarise
from fspo.verifiers import build_verifier


def measure(config: dict, pairs, threshold: float) -> dict:
    """Quality figures and pairs/s of the verifier ``config`` on labelled ``pairs``."""
    verifier = build_verifier(verifier_config({**config, "threshold": threshold}))
    started = time.perf_counter()
    scores = verifier.score([(p.evidence, p.claim) for p in pairs])
    seconds = time.perf_counter() - started
    verifier.close()
    figures = summarise(scores, [p.label for p in pairs], threshold)
    figures["pairs_per_s"] = len(pairs) / seconds
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--finetuned", default=None, help="directory written by `fspo verifier train`")
    parser.add_argument("--limit", type=int, default=2000, help="held-out pairs per source (default 2000)")
    parser.add_argument("--threshold", type=float, default=0.5, help="the configured threshold (default 0.5)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default torch's)")
    parser.add_argument(
        "--backends", default="lexical,lexical-sentence,embedding,fine-tuned", help="comma-separated subset to run"
    )
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    backends = {
        "lexical": {"name": "lexical"},
        "lexical-sentence": {"name": "lexical", "evidence_unit": "sentence"},
        "embedding": {"name": "embedding", "device": "cpu"},
    }
    if args.finetuned:
        backends["fine-tuned"] = {"name": "nli", "model_path": args.finetuned, "device": "cpu"}
    elif "fine-tuned" in args.backends.split(","):
        print("(no --finetuned DIR: the fine-tuned cross-encoder is left out)", file=sys.stderr)
    backends = {name: config for name, config in backends.items() if name in args.backends.split(",")}
    rows = []
    for source in SOURCES:
        pairs = load_labelled(source, "heldout")[: args.limit]
        for backend, config in backends.items():
            figures = measure(config, pairs, args.threshold)
            rows.append((source, backend, len(pairs), figures))
            print(f"{source} {backend} pairs {len(pairs)}")
            print(f"{source} {backend} auroc {figures['auroc']:.3f}")
            print(f"{source} {backend} balanced_accuracy@{args.threshold:g} {figures['balanced_accuracy']:.3f}")
            print(f"{source} {backend} calibrated_threshold {figures['best_threshold']:.3f}")
            print(f"{source} {backend} balanced_accuracy@calibrated {figures['best_balanced_accuracy']:.3f}")
            print(f"{source} {backend} pairs_per_s {figures['pairs_per_s']:.0f}", flush=True)
    print()
    print(
        f"| source | backend | held-out pairs | AUROC | balanced acc. at {args.threshold:g} | calibrated threshold "
        "| balanced acc. there | pairs/s (CPU) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for source, backend, count, f in rows:
        print(
            f"| {source} | `{backend}` | {count} | {f['auroc']:.3f} | {f['balanced_accuracy']:.3f} "
            f"| {f['best_threshold']:.3f} | {f['best_balanced_accuracy']:.3f} | {f['pairs_per_s']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
