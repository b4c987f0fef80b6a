"""GPU memory each GPU recipe needs per GPU, estimated from the model's size and the recipe's config.

No GPU is used: the figures are arithmetic on the published model configs and the recipes' settings
(``RECIPES`` mirrors recipes/*.sh; tests/test_recipes_qwen3.py checks it against their dry runs). verl's
hybrid engine alternates two phases on every GPU, and the peak is the larger:

rollout   vLLM holds ``gpu_memory_utilization`` of the GPU (its bf16 weights, 1/TP each, and the KV cache
          in the rest, less ~2 GB of its own activations), while the FSDP actor keeps its resident
          state: fp32 parameters (verl's default ``model_dtype``) and fp32 Adam moments, sharded over
          the FSDP ranks (LoRA: the frozen fp32 base plus the adapters' parameters and moments). The
          reference policy is offloaded to CPU (full fine-tuning) or is the actor without its adapters
          (LoRA): nothing resident.
log-prob  vLLM sleeps; the old-policy pass (and the reference's) runs one forward per micro-batch of
          ``log_prob_micro_batch_size_per_gpu`` x (prompt + response) tokens, no gradients: the bf16 gather,
          one layer's working set, and the logits, the largest tensor of the step at a 150k vocabulary:
          bf16 logits, the entropy verl computes beside the old log-probs (``entropy_from_logits``:
          a softmax and its product with the logits, bf16 each), and on the ``sdpa`` path (no flash-attn:
          ``fspo.launch.attention``) an fp32 copy for the log-probabilities, where the ``flash`` path's fused
          Triton cross-entropy reads the bf16 logits in place. Tokens: worst case, no padding removed.
training  vLLM sleeps (KV cache freed, weights offloaded); the actor adds fp32 gradients, the bf16
          copy of the largest unit FSDP gathers (the embedding or the LM head), and one micro-batch's
          activations with gradient checkpointing: each layer's bf16 input (layers x tokens x hidden),
          one layer's recomputed working set and its backward (about 2 x tokens x (6 x hidden + 3 x
          intermediate) bf16 values), and the logits (tokens x vocabulary: bf16, an fp32 copy for the
          log-probabilities and its fp32 gradient). Tokens = micro-batch x (prompt + response): the
          worst case, with no padding removed.
asleep    verl 0.9.1 frees vLLM's GPU memory between rollouts (``rollout.free_cache_engine: true``):
          ``vLLMHttpServer.sleep`` in hybrid mode calls ``engine.sleep(level=2)`` (KV cache and weights
          discarded; the next sync sends the weights) or ``level=1`` with LoRA adapters (KV cache
          discarded, base weights offloaded to host RAM: 2 bytes x parameters of host memory)
          (``verl/workers/rollout/vllm_rollout/vllm_async_server.py``, ``_resolve_sleep_level``). What
          stays on the GPU is what vLLM allocated outside its sleep allocator (CUDA-graph pools, NCCL
          buffers): ~1 GB assumed, beside its CUDA context.
both      each process on the GPU has a CUDA context (~0.5 GB: actor, vLLM, verifier), and the
          colocated verifier holds its weights plus up to ~1.5 GB of activations per batch.

checkpoint  a full fine-tuning checkpoint is the actor's fp32 weights and Adam's two fp32 moments (12 bytes a
          parameter); a LoRA one holds the frozen base in fp32 in verl's model shards, the adapters and their
          moments. A save needs room for one more beside the ``CKPT_KEEP`` (2) kept.

Usage:
    python benchmarks/recipe_memory.py            # the table for every GPU recipe, 80 GB GPUs
    python benchmarks/recipe_memory.py --gpu-gb 141
    python benchmarks/recipe_memory.py --docs docs/gpu-sizing.md   # rewrite the page's generated table
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

GB = 1e9
CUDA_CONTEXT_GB = 0.5
VLLM_OVERHEAD_GB = 2.0  # vLLM's activations and CUDA graphs inside its share
VERIFIER_ACTIVATIONS_GB = 1.5
VLLM_ASLEEP_GB = 1.0  # vLLM's allocations outside its sleep allocator (CUDA graphs, NCCL), assumed
# Bytes per logit element in the log-prob pass: bf16 logits + the entropy's softmax and product (bf16
# each), + an fp32 copy on the sdpa path (see the module doc).
LOG_PROB_LOGIT_BYTES = {"flash": 2 + 2 + 2, "sdpa": 2 + 2 + 2 + 4}


@dataclass(frozen=True)
class Model:
    """The published config.json figures of a backbone."""

    parameters: float
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    tied_embeddings: bool = False

    def lora_parameters(self, rank: int) -> float:
        """Adapter parameters of rank ``rank`` on every linear layer (q, k, v, o, gate, up, down)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        shapes = [
            (self.hidden, q),
            (self.hidden, kv),
            (self.hidden, kv),
            (q, self.hidden),
            (self.hidden, self.intermediate),
            (self.hidden, self.intermediate),
            (self.intermediate, self.hidden),
        ]
        return self.layers * rank * sum(a + b for a, b in shapes)

    def kv_bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * 2  # keys and values, bf16


MODELS = {
    "Qwen2.5-7B": Model(7.62e9, 28, 3584, 18944, 152064, 28, 4, 128),
    "Llama-3.1-8B": Model(8.03e9, 32, 4096, 14336, 128256, 32, 8, 128),
    "Qwen3-8B": Model(8.19e9, 36, 4096, 12288, 151936, 32, 8, 128),
    "Qwen3-4B": Model(4.02e9, 36, 2560, 9728, 151936, 32, 8, 128, tied_embeddings=True),
}
# Verifier weights (fp32 parameters x 4 bytes) of the backends a recipe can name.
VERIFIER_PARAMETERS = {
    "hhem": 0.11e9,
    "minicheck-flan-t5-large": 0.78e9,
    "minicheck-deberta-v3-large": 0.44e9,
    "factcg": 0.44e9,
    "minicheck-roberta-large": 0.36e9,
}


@dataclass(frozen=True)
class Recipe:
    """The memory-relevant settings of a recipe (recipes/*.sh)."""

    model: str
    gpus: int
    prompt: int
    response: int
    micro_batch: int
    rollout_tp: int
    gpu_memory_utilization: float
    lora_rank: int = 0
    verifier: str = "hhem"
    log_prob_micro_batch: int = 4  # rollout.log_prob_micro_batch_size_per_gpu (ref's is the same)


RECIPES = {
    "run_qwen2.5_7b_base.sh / _instruct.sh": Recipe("Qwen2.5-7B", 8, 2048, 2048, 4, 2, 0.6),
    "run_llama3.1_8b_instruct.sh": Recipe("Llama-3.1-8B", 8, 2048, 2048, 4, 2, 0.6),
    "run_qwen3_8b.sh": Recipe("Qwen3-8B", 8, 2048, 4096, 2, 2, 0.6, log_prob_micro_batch=4),
    "run_qwen3_4b_lora_1gpu.sh": Recipe("Qwen3-4B", 1, 2048, 4096, 2, 1, 0.5, lora_rank=64, log_prob_micro_batch=4),
}


def estimate(recipe: Recipe, gpu_gb: float) -> dict[str, float]:
    """Per-GPU gigabytes of each part, and of each phase (``rollout``, ``training``, ``peak``)."""
    model = MODELS[recipe.model]
    shards = recipe.gpus
    parts: dict[str, float] = {}
    if recipe.lora_rank:
        adapters = model.lora_parameters(recipe.lora_rank)
        parts["actor fp32 weights (frozen base + adapters)"] = 4 * (model.parameters + adapters) / shards / GB
        parts["Adam moments (adapters)"] = 8 * adapters / shards / GB
        gradients = 4 * adapters / shards / GB
    else:
        parts["actor fp32 weights"] = 4 * model.parameters / shards / GB
        parts["Adam moments"] = 8 * model.parameters / shards / GB
        gradients = 4 * model.parameters / shards / GB
    verifier = 4 * VERIFIER_PARAMETERS[recipe.verifier] / GB + VERIFIER_ACTIVATIONS_GB
    tokens = recipe.micro_batch * (recipe.prompt + recipe.response)
    checkpoints = model.layers * tokens * model.hidden * 2 / GB
    layer_working_set = 2 * tokens * (6 * model.hidden + 3 * model.intermediate) * 2 / GB
    logits = tokens * model.vocab * (2 + 4 + 4) / GB
    gathered = model.vocab * model.hidden * 2 / GB
    resident = sum(parts.values())
    vllm = recipe.gpu_memory_utilization * gpu_gb
    rollout = resident + vllm + verifier + 3 * CUDA_CONTEXT_GB
    training = (
        resident
        + gradients
        + gathered
        + checkpoints
        + layer_working_set
        + logits
        + verifier
        + VLLM_ASLEEP_GB
        + 3 * CUDA_CONTEXT_GB
    )
    log_prob_tokens = recipe.log_prob_micro_batch * (recipe.prompt + recipe.response)
    log_prob_layer = 2 * log_prob_tokens * (6 * model.hidden + 3 * model.intermediate) * 2 / GB
    log_prob_logits = {
        path: log_prob_tokens * model.vocab * per_element / GB for path, per_element in LOG_PROB_LOGIT_BYTES.items()
    }
    log_prob = {
        path: resident + gathered + log_prob_layer + logit_bytes + verifier + VLLM_ASLEEP_GB + 3 * CUDA_CONTEXT_GB
        for path, logit_bytes in log_prob_logits.items()
    }
    vllm_weights = 2 * model.parameters / recipe.rollout_tp / GB
    kv_cache = vllm - vllm_weights - VLLM_OVERHEAD_GB
    return {
        **parts,
        "gradients (training)": gradients,
        "activations (training: checkpoints + one layer + logits)": checkpoints + layer_working_set + logits,
        "vLLM share (rollout)": vllm,
        "vLLM asleep (log-prob, training)": VLLM_ASLEEP_GB,
        "log-prob logits + entropy, flash": log_prob_logits["flash"],
        "log-prob logits + entropy + fp32 copy, sdpa": log_prob_logits["sdpa"],
        "verifier": verifier,
        "rollout": rollout,
        "training": training,
        "log_prob_flash": log_prob["flash"],
        "log_prob_sdpa": log_prob["sdpa"],
        "peak": max(rollout, training, log_prob["flash"]),
        "peak_sdpa": max(rollout, training, log_prob["sdpa"]),
        "vLLM host RAM asleep (level 1: LoRA)": 2 * model.parameters / GB if recipe.lora_rank else 0.0,
        "vLLM KV cache": kv_cache,
        "KV-cache tokens per GPU": kv_cache * GB / model.kv_bytes_per_token() * recipe.rollout_tp,
        "tokens per micro-batch": tokens,
        "tokens per log-prob micro-batch": log_prob_tokens,
    }


def checkpoint_gb(recipe: Recipe) -> float:
    """Gigabytes of one saved checkpoint (see the module doc): fp32 weights and Adam's two fp32 moments."""
    model = MODELS[recipe.model]
    trained = model.lora_parameters(recipe.lora_rank) if recipe.lora_rank else model.parameters
    frozen = model.parameters if recipe.lora_rank else 0.0
    return (4 * frozen + 12 * trained) / GB


# The recipes keep CKPT_KEEP (2) checkpoints (recipes/common.sh); a save writes a third before the oldest goes.
CKPT_KEEP = 2
BEGIN = "<!-- memory: generated by `python benchmarks/recipe_memory.py --docs docs/gpu-sizing.md` -->"
END = "<!-- end of generated memory -->"


def markdown(gpu_gb: float = 80.0) -> str:
    """The sizing page's table: each phase's GB per GPU on ``gpu_gb`` GPUs, the KV cache and the checkpoints."""
    lines = [
        "| recipe | GPUs | rollout | log-prob: flash / sdpa | training | peak: flash / sdpa | vLLM KV cache "
        f"| one checkpoint | disk while saving ({CKPT_KEEP} kept + 1) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, recipe in RECIPES.items():
        figures = estimate(recipe, gpu_gb)
        checkpoint = checkpoint_gb(recipe)
        lora = f", LoRA r{recipe.lora_rank}" if recipe.lora_rank else ""
        lines.append(
            f"| {name} ({recipe.model}{lora}) | {recipe.gpus} x {gpu_gb:.0f} GB | {figures['rollout']:.1f} | "
            f"{figures['log_prob_flash']:.1f} / {figures['log_prob_sdpa']:.1f} | {figures['training']:.1f} | "
            f"{figures['peak']:.1f} / {figures['peak_sdpa']:.1f} | {figures['vLLM KV cache']:.0f} GB | "
            f"{checkpoint:.0f} GB | {(CKPT_KEEP + 1) * checkpoint:.0f} GB |"
        )
    return "\n".join(lines)


def page_with_table(page: str, gpu_gb: float = 80.0) -> str:
    """``page`` with the text between :data:`BEGIN` and :data:`END` replaced by :func:`markdown`."""
    before, begin, rest = page.partition(BEGIN)
    _, end, after = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"the page has no generated block: add the lines {BEGIN!r} and {END!r}")
    return f"{before}{BEGIN}\n{markdown(gpu_gb)}\n{END}{after}"


SUMMARY_KEYS = (
    "rollout",
    "training",
    "log_prob_flash",
    "log_prob_sdpa",
    "peak",
    "peak_sdpa",
    "KV-cache tokens per GPU",
    "tokens per micro-batch",
    "tokens per log-prob micro-batch",
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu-gb", type=float, default=80.0, help="memory of one GPU (H100/A100 80 GB)")
    parser.add_argument("--docs", type=Path, help="rewrite this page's generated table (docs/gpu-sizing.md)")
    args = parser.parse_args(argv)
    if args.docs:
        if not args.docs.is_file():
            print(f"recipe_memory: no page {args.docs}: name the Markdown file to rewrite", file=sys.stderr)
            return 2
        args.docs.write_text(page_with_table(args.docs.read_text()))
        print(f"wrote the memory table into {args.docs}")
        return 0
    print(f"GPU: {args.gpu_gb:.0f} GB. Per-GPU estimate (GB); flash = flash-attn installed, sdpa = without it:\n")
    print(
        "| recipe | model | GPUs | rollout phase | log-prob phase: flash / sdpa | training phase | peak: flash / sdpa "
        "| fits | vLLM KV cache per GPU (tokens per vLLM replica) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, recipe in RECIPES.items():
        figures = estimate(recipe, args.gpu_gb)
        lora = f", LoRA r{recipe.lora_rank}" if recipe.lora_rank else ""
        fits = {True: "yes", False: "NO"}
        fits = f"{fits[figures['peak'] <= args.gpu_gb]} / {fits[figures['peak_sdpa'] <= args.gpu_gb]}"
        print(
            f"| {name} | {recipe.model}{lora} | {recipe.gpus} | {figures['rollout']:.1f} | "
            f"{figures['log_prob_flash']:.1f} / {figures['log_prob_sdpa']:.1f} | "
            f"{figures['training']:.1f} | {figures['peak']:.1f} / {figures['peak_sdpa']:.1f} | {fits} | "
            f"{figures['vLLM KV cache']:.0f} GB ({figures['KV-cache tokens per GPU'] / 1e3:.0f}k) |"
        )
    print()
    for name, recipe in RECIPES.items():
        figures = estimate(recipe, args.gpu_gb)
        print(
            f"{name} ({figures['tokens per micro-batch']} tokens per micro-batch, "
            f"{figures['tokens per log-prob micro-batch']} per log-prob micro-batch):"
        )
        for key, value in figures.items():
            if key not in SUMMARY_KEYS:
                print(f"    {key:58s} {value:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
