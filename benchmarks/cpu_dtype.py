"""bf16 vs fp32 on this CPU, and 1 thread vs all: the measurements behind the CPU preset's choice.

For fp32 on 1 thread and on all, and bf16 on all, prints the seconds of
- the actor's biggest matmul in the quickstart, hidden states (512 x 576) times SmolLM2-135M's
  output embedding (576 x 49152), and
- one forward + backward of SmolLM2-135M-Instruct (converted by ``fspo quickstart``; a random model
  of the same architecture when it is not there) on 2 x 128 tokens, bf16 as verl's FSDP runs it
  (fp32 weights under ``torch.autocast``),
then the processor's capability, the dtype ``fspo.cpu.compute`` picks, and whether the pick was the
faster one here.

    python benchmarks/cpu_dtype.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import time
from contextlib import nullcontext

import torch

from fspo.cpu.compute import CPUFeatures, choose_compute_dtype, cpu_threads

BATCH, LENGTH = 2, 128


def timed(fn, repeats: int) -> float:
    fn()  # warm-up: kernels, allocator
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats


def smollm2():
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    from fspo.quickstart.smollm2 import MODEL_NAME, default_cache_dir

    path = default_cache_dir() / MODEL_NAME
    if (path / "config.json").exists():
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa"), "SmolLM2"
    config = LlamaConfig(  # SmolLM2-135M's shape
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config), "random SmolLM2-135M-shaped model"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    features = CPUFeatures.detect()
    choice = choose_compute_dtype(features)
    model, model_name = smollm2()
    tokens = torch.randint(0, model.config.vocab_size, (BATCH, LENGTH))
    hidden, embedding = torch.randn(512, 576), torch.randn(49152, 576)

    def matmul(dtype):
        a, b = hidden.to(dtype), embedding.to(dtype)
        return lambda: a @ b.T

    def forward_backward(dtype):
        def run():
            context = nullcontext() if dtype == torch.float32 else torch.autocast("cpu", dtype=dtype)
            with context:
                logits = model(input_ids=tokens).logits
            logits.float().logsumexp(-1).mean().backward()
            model.zero_grad(set_to_none=True)

        return run

    print(
        f"cpu_capability: {features.capability} ({features.machine}; avx512_bf16={features.avx512_bf16}, "
        f"amx={features.amx}, arm_bf16={features.arm_bf16})"
    )
    print(f"model: {model_name}")
    seconds = {}
    threads = cpu_threads()
    # fp32 on one thread (what Ray gives a worker) and on all; bf16 on all (at one thread it is the
    # slowest by far, and the thread gain is fp32's question).
    for dtype, run_threads in ((torch.float32, 1), (torch.float32, threads), (torch.bfloat16, threads)):
        if (dtype, run_threads) in seconds:  # a one-core machine
            continue
        torch.set_num_threads(run_threads)
        name = str(dtype).removeprefix("torch.")
        seconds[dtype, run_threads] = (timed(matmul(dtype), args.repeats), timed(forward_backward(dtype), args.repeats))
        print(
            f"dtype={name} threads={run_threads} matmul_512x576x49152_s={seconds[dtype, run_threads][0]:.3f} "
            f"forward_backward_{BATCH}x{LENGTH}_s={seconds[dtype, run_threads][1]:.2f}",
            flush=True,
        )
    fp32, bf16 = seconds[torch.float32, threads][1], seconds[torch.bfloat16, threads][1]
    faster = "float32" if fp32 <= bf16 else "bfloat16"
    print(f"bf16/fp32 forward+backward time at {threads} threads: {bf16 / fp32:.2f}")
    print(f"fp32 forward+backward, 1 thread / {threads} threads: {seconds[torch.float32, 1][1] / fp32:.2f}")
    print(
        f"fspo picks: {choice.dtype} ({choice.reason}); faster here: {faster}; "
        f"{'agrees' if faster == choice.dtype else 'DISAGREES'}"
    )


if __name__ == "__main__":
    main()
