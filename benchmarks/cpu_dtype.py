"""bf16 vs fp32 on this CPU, and 1 thread vs all: the measurements behind the CPU preset's choice.

For each (dtype, threads) prints the seconds of
- the actor's biggest matmul in the quickstart, hidden states (512 x 576) times SmolLM2-135M's
  output embedding (576 x 49152), and
- one forward + backward of SmolLM2-135M-Instruct (converted by ``fspo quickstart``; a random model
  of the same architecture when it is not there) on 4 x 128 tokens, bf16 as verl's FSDP runs it
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


def timed(fn, repeats: int) -> float:
    fn()  # warm-up: kernels, allocator
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats


def smollm2():
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    from fspo.smollm2 import MODEL_NAME, default_cache_dir

    path = default_cache_dir() / MODEL_NAME
    if (path / "config.json").exists():
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa"), "SmolLM2"
    config = LlamaConfig(  # SmolLM2-135M's shape
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config), "random SmolLM2-135M-shaped model"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    features = CPUFeatures.detect()
    choice = choose_compute_dtype(features)
    model, model_name = smollm2()
    tokens = torch.randint(0, model.config.vocab_size, (4, 128))
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

    print(f"cpu_capability: {features.capability} ({features.machine}; avx512_bf16={features.avx512_bf16}, "
          f"amx={features.amx}, arm_bf16={features.arm_bf16})")
    print(f"model: {model_name}")
    seconds = {}
    for threads in sorted({1, cpu_threads()}):
        torch.set_num_threads(threads)
        for dtype in (torch.float32, torch.bfloat16):
            name = str(dtype).removeprefix("torch.")
            seconds[name, threads, "matmul"] = timed(matmul(dtype), args.repeats)
            seconds[name, threads, "fwd_bwd"] = timed(forward_backward(dtype), args.repeats)
            print(f"dtype={name} threads={threads} matmul_512x576x49152_s={seconds[name, threads, 'matmul']:.3f} "
                  f"forward_backward_4x128_s={seconds[name, threads, 'fwd_bwd']:.2f}")
    threads = cpu_threads()
    faster = min(("float32", "bfloat16"), key=lambda name: seconds[name, threads, "fwd_bwd"])
    ratio = seconds["bfloat16", threads, "fwd_bwd"] / seconds["float32", threads, "fwd_bwd"]
    print(f"bf16/fp32 forward+backward time at {threads} threads: {ratio:.2f}")
    print(f"fspo picks: {choice.dtype} ({choice.reason}); faster here: {faster}; "
          f"{'agrees' if faster == choice.dtype else 'DISAGREES'}")


if __name__ == "__main__":
    main()
