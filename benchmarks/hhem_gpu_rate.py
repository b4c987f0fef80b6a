"""HHEM's scoring rate on one GPU at 350-token rows, alone and beside a decode load standing in for vLLM.

It gives the GPU figures of ``benchmarks/paper_scale.py``'s cost model (``GPU_TOKENS_PER_S``). It needs
neither verl nor vLLM, only torch and transformers, so it runs on a bare CUDA machine.

- The verifier: HHEM-2.1-Open's architecture with random weights (``hhem_full_size_model``: flan-t5-base's
  encoder and a 2-way token head), scoring micro-batches as the hhem verifier plans them for rows of
  ``--row-tokens`` (:func:`verifier_rows`: its 16,384-token budget and its 1.5 GB attention cap), each
  micro-batch's scores copied to the host as ``fspo.verifiers.batching.run_batched`` does. Each dtype the
  verifier takes (``fspo.verifier.dtype``): float32, tf32 (the GPU default), bfloat16.
- The decode stand-in: one tensor-parallel rank of Qwen2.5-7B at the 7B recipes' rollout (TP 2, 256
  sequences in flight, 1,224 tokens of context: a 200-token prompt and half of a 2,048-token response),
  random bf16 weights, one decode step replayed as a CUDA graph in its own process. Each step reads the
  rank's weights and KV cache once, as vLLM's decode does. It is not vLLM: no paged attention, no
  scheduler, no prefill, no sampling; its GPU never waits on the host, so it likely contends more than vLLM.
- The two share the GPU as verl's colocated verifier and vLLM do: two processes, no MPS, the GPU
  time-sliced between them.

It runs the verifier alone, then the decoder alone, then both, and prints tokens/s of each and of each
beside the other. Results go to ``--out`` (JSON and the printed table).

Usage (one CUDA GPU, 1.5-2.5 minutes; ``--alone-rows`` with no value skips the 8- and 128-row sizes)::

    python benchmarks/hhem_gpu_rate.py --attention eager --out hhem_gpu_rate

``--attention eager`` runs T5 as transformers 5.9, the project's pin, does; later versions pick sdpa. On one
H200 (2026-11-26, torch 2.11, transformers 5.17) this gave ``paper_scale.GPU_TOKENS_PER_S``: TF32 458k tokens/s
alone, 206k beside the stand-in, which kept 49% of its 15.3k decode tokens/s per GPU. sdpa was slower
(TF32 420k, bf16 427k against eager's 650k).

At toy sizes on a CPU, to check the script (a minute or two; the rates mean nothing)::

    python benchmarks/hhem_gpu_rate.py --tiny --out /tmp/hhem_gpu_rate
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # fspo_testing, when run as a script
    sys.path.insert(0, str(REPO))
if str(REPO / "benchmarks") not in sys.path:  # recipe_memory, beside this file
    sys.path.insert(0, str(REPO / "benchmarks"))

from recipe_memory import MODELS, Model  # noqa: E402

# The hhem verifier's micro-batching, mirrored here because fspo.verifiers imports verl (absent on a bare GPU
# machine); tests/test_hhem_gpu_rate.py checks these against fspo.verifiers.model_base and batching.
MAX_TOKENS_PER_BATCH = 16384  # ModelVerifier's max_tokens_per_batch default
VERIFIER_ACTIVATION_BYTES = 1.5e9  # fspo.verifiers.model_base.VERIFIER_ACTIVATION_BYTES
HHEM_HEADS = 12
ATTENTION_TENSORS = 3  # T5's eager attention: position bias + mask, scores, softmax
DTYPE_BYTES = {"float32": 4, "tf32": 4, "bfloat16": 2}
DTYPES = tuple(DTYPE_BYTES)
# A tiny T5 and decoder for --tiny (a CPU check of the script, not a measurement).
TINY_DECODER = Model(0.0, 2, 64, 128, 1000, 4, 2, 16)


def verifier_rows(row_tokens: int, dtype: str) -> int:
    """Rows of ``row_tokens`` tokens in one micro-batch of the hhem verifier at its defaults: the token budget
    and the attention cap (``plan_micro_batches``), at least one row."""
    cells = int(VERIFIER_ACTIVATION_BYTES // (ATTENTION_TENSORS * HHEM_HEADS * DTYPE_BYTES[dtype]))
    return max(1, min(MAX_TOKENS_PER_BATCH // row_tokens, cells // (row_tokens * row_tokens)))


def window_rate(chunks: list[tuple[float, float, float]], start: float, end: float) -> float | None:
    """Units per second over the chunks ``(t0, t1, units)`` lying wholly inside ``[start, end]``; None if none."""
    inside = [(t0, t1, units) for t0, t1, units in chunks if t0 >= start and t1 <= end]
    if not inside:
        return None
    seconds = sum(t1 - t0 for t0, t1, _ in inside)
    return sum(units for _, _, units in inside) / seconds if seconds > 0 else None


def _device():
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------- the verifier


def _verifier_model(tiny: bool):
    from fspo_testing.tiny_verifiers import hhem_full_size_model

    if not tiny:
        return hhem_full_size_model()
    import torch
    from transformers import T5Config, T5ForTokenClassification

    torch.manual_seed(0)
    config = T5Config(
        vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4,
        feed_forward_proj="gated-gelu", num_labels=2, is_encoder_decoder=False,
    )  # fmt: skip
    return T5ForTokenClassification(config).eval()


def _with_attention(model, attention: str | None):
    """``model`` computing its attention as ``attention`` (None: transformers' own choice). transformers 5.9, the
    project's pin, runs T5 in eager attention; later versions in sdpa."""
    if attention is None or model.config._attn_implementation == attention:
        return model
    try:
        model.set_attn_implementation(attention)
    except (ValueError, ImportError, NotImplementedError):
        pass
    if model.config._attn_implementation != attention:  # a model that chooses it when built
        config = model.config
        config._attn_implementation = attention
        rebuilt = type(model)(config).eval()
        rebuilt.load_state_dict(model.state_dict())
        model = rebuilt
    if model.config._attn_implementation != attention:
        raise SystemExit(f"hhem_gpu_rate: this transformers cannot run T5 with {attention} attention")
    return model


def _set_dtype(model, dtype: str):
    """The model in ``dtype`` as ``fspo.verifiers.model_base.resolve_dtype`` sets it up (tf32: float32 weights,
    TF32 matmuls)."""
    import torch

    if torch.cuda.is_available():
        torch.backends.cuda.matmul.fp32_precision = "tf32" if dtype == "tf32" else "ieee"
    return model.to(torch.bfloat16 if dtype == "bfloat16" else torch.float32)


def run_verifier(args) -> dict:
    """Times the verifier's forward per (dtype, rows) for ``args.seconds`` each; each forward is one chunk."""
    import torch

    device = _device()
    model = _with_attention(_verifier_model(args.tiny), args.attention).to(device)
    vocab = model.config.vocab_size
    cells = []
    for dtype in args.dtypes:
        model = _set_dtype(model, dtype)
        for rows in args.rows or [verifier_rows(args.row_tokens, dtype)]:
            ids = torch.randint(3, vocab, (rows, args.row_tokens), device=device)
            mask = torch.ones_like(ids)
            chunks = []
            with torch.inference_mode():
                for _ in range(3):  # warm-up: kernels chosen, allocator grown
                    model(input_ids=ids, attention_mask=mask).logits[:, 0, :].float().softmax(-1)[:, 1].cpu()
                _sync(device)
                end = time.time() + args.seconds
                while time.time() < end:
                    t0 = time.time()
                    logits = model(input_ids=ids, attention_mask=mask).logits[:, 0, :]
                    logits.float().softmax(-1)[:, 1].cpu()  # run_batched copies each micro-batch's scores out
                    chunks.append((t0, time.time(), rows * args.row_tokens))
            cells.append({"dtype": dtype, "rows": rows, "row_tokens": args.row_tokens, "chunks": chunks})
    peak = torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else None
    return {"cells": cells, "peak_gb": peak, "attention": str(model.config._attn_implementation)}


# ---------------------------------------------------------------- the decode stand-in


class DecodeRank:
    """One tensor-parallel rank of a Qwen2/Llama-style decoder decoding ``batch`` sequences against a KV cache of
    ``context`` tokens each: per step, each layer's fused QKV, attention over the whole cache, output projection
    and gated MLP, then the rank's vocabulary shard and a greedy token. Random weights; RoPE left out (elementwise,
    a negligible share of the bytes)."""

    def __init__(self, model: Model, tp: int, batch: int, context: int, device, dtype=None):
        import torch

        dtype = dtype or torch.bfloat16
        generator = torch.Generator(device=device).manual_seed(0)
        self.heads, self.kv_heads = model.heads // tp, max(1, model.kv_heads // tp)
        self.head_dim, self.batch, self.context = model.head_dim, batch, context
        hidden, ff = model.hidden, model.intermediate // tp

        def weight(*shape, scale=0.02):
            return torch.randn(*shape, generator=generator, device=device, dtype=dtype) * scale

        qkv_width = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.layers = [
            {
                "norm1": torch.ones(hidden, device=device, dtype=dtype),
                "qkv": weight(qkv_width, hidden),
                "qkv_bias": weight(qkv_width),
                "o": weight(hidden, self.heads * self.head_dim),
                "norm2": torch.ones(hidden, device=device, dtype=dtype),
                "gate_up": weight(2 * ff, hidden),
                "down": weight(hidden, ff),
                "k": weight(batch, self.kv_heads, context, self.head_dim, scale=1.0),
                "v": weight(batch, self.kv_heads, context, self.head_dim, scale=1.0),
            }
            for _ in range(model.layers)
        ]
        vocab = model.vocab // tp
        self.embed = weight(vocab, hidden)
        self.final_norm = torch.ones(hidden, device=device, dtype=dtype)
        self.lm_head = weight(vocab, hidden)
        self.tokens = torch.randint(0, vocab, (batch,), generator=generator, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.kv_bytes = sum(layer[key].nbytes for layer in self.layers for key in ("k", "v"))
        self.weight_bytes = (
            self.embed.nbytes // vocab * batch
            + self.lm_head.nbytes
            + sum(tensor.nbytes for layer in self.layers for key, tensor in layer.items() if key not in ("k", "v"))
        )

    @staticmethod
    def _rms(x, scale):
        import torch

        return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * scale

    def attend(self, q, k, v):
        """Grouped-query decode attention: each KV head's query heads attend as that head's query rows."""
        import torch.nn.functional as F

        group = self.heads // self.kv_heads
        q = q.reshape(self.batch, self.kv_heads, group, self.head_dim)
        return F.scaled_dot_product_attention(q, k, v).reshape(self.batch, self.heads * self.head_dim)

    def step(self) -> None:
        import torch.nn.functional as F

        x = self.embed[self.tokens]
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for layer in self.layers:
            qkv = F.linear(self._rms(x, layer["norm1"]), layer["qkv"], layer["qkv_bias"])
            q, k, v = qkv.split([q_width, kv_width, kv_width], dim=-1)
            shape = (self.batch, self.kv_heads, 1, self.head_dim)
            layer["k"].index_copy_(2, self.position, k.reshape(shape))
            layer["v"].index_copy_(2, self.position, v.reshape(shape))
            x = x + F.linear(self.attend(q, layer["k"], layer["v"]), layer["o"])
            gate, up = F.linear(self._rms(x, layer["norm2"]), layer["gate_up"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer["down"])
        logits = F.linear(self._rms(x, self.final_norm), self.lm_head)
        self.tokens.copy_(logits.argmax(-1))
        self.position.add_(1).remainder_(self.context)


def _replayable(rank: DecodeRank, device):
    """``rank.step`` as one CUDA graph replay where CUDA is there (as vLLM decodes), else eager; and which."""
    import torch

    if device.type != "cuda":
        return rank.step, "eager (CPU)"
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            rank.step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        rank.step()
    return graph.replay, "CUDA graph"


def run_decoder(args) -> dict:
    """Decodes until ``args.stop`` appears (or ``args.seconds`` pass), one chunk per ``args.sync_every`` steps;
    writes ``args.ready`` once the first timed chunk can start."""
    import torch

    device = _device()
    model = TINY_DECODER if args.tiny else MODELS[args.model]
    with torch.inference_mode():
        rank = DecodeRank(model, args.tp, args.batch, args.context, device)
        step, how = _replayable(rank, device)
        step()
        _sync(device)
        Path(args.ready).touch()
        chunks = []
        end = time.time() + args.seconds
        while not Path(args.stop).exists() and time.time() < end:
            t0 = time.time()
            for _ in range(args.sync_every):
                step()
            _sync(device)
            chunks.append((t0, time.time(), args.sync_every))
    return {
        "chunks": chunks,
        "how": how,
        "bytes_per_step": rank.weight_bytes + rank.kv_bytes,
        "weight_gb": rank.weight_bytes / 1e9,
        "kv_gb": rank.kv_bytes / 1e9,
        "peak_gb": torch.cuda.max_memory_allocated() / 1e9 if device.type == "cuda" else None,
    }


# ---------------------------------------------------------------- the run


def _role_command(args, role: str, out: Path, *extra: str) -> list[str]:
    command = [sys.executable, __file__, "--role", role, "--result", str(out), "--row-tokens", str(args.row_tokens)]
    command += ["--attention", args.attention] if args.attention else []
    command += ["--model", args.model, "--tp", str(args.tp), "--batch", str(args.batch), "--context", str(args.context)]
    return command + (["--tiny"] if args.tiny else []) + list(extra)


def _run_role(command: list[str], result: Path) -> dict:
    process = subprocess.run(command, check=False)
    if process.returncode:
        raise SystemExit(f"{command[3]} process failed (exit {process.returncode}); its output is above")
    return json.loads(result.read_text())


def orchestrate(args) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    work.mkdir(exist_ok=True)
    dtypes = [*DTYPES]
    seconds = "0.3" if args.tiny else str(args.seconds)
    # 1. The verifier alone: its own micro-batch, and a small and a large one for the shape of the curve.
    own = {verifier_rows(args.row_tokens, dtype) for dtype in dtypes}
    extra = set(args.alone_rows) if args.alone_rows is not None else {2} if args.tiny else {8, 128}
    sizes = ["--rows", *map(str, sorted(own | extra))]
    alone = _run_role(
        _role_command(args, "verifier", work / "alone.json", "--dtypes", *dtypes, "--seconds", seconds, *sizes),
        work / "alone.json",
    )
    # 2. The decoder alone, then 3. the verifier beside it (the verifier's own micro-batch only).
    ready, stop = work / "decoder.ready", work / "decoder.stop"
    for flag in (ready, stop):
        flag.unlink(missing_ok=True)
    decoder = subprocess.Popen(
        _role_command(args, "decoder", work / "decoder.json", "--ready", str(ready), "--stop", str(stop))
        + ["--seconds", str(args.decoder_timeout)]
    )
    deadline = time.time() + args.decoder_timeout
    while not ready.exists():
        if decoder.poll() is not None or time.time() > deadline:
            decoder.kill()
            raise SystemExit("the decoder stand-in did not start; its output is above")
        time.sleep(0.2)
    decoder_alone = (time.time() + 1.0, time.time() + 1.0 + (1.0 if args.tiny else args.decoder_alone_seconds))
    time.sleep(decoder_alone[1] - time.time())
    verifier_started = time.time()
    beside = _run_role(
        _role_command(args, "verifier", work / "beside.json", "--dtypes", *dtypes, "--seconds", seconds),
        work / "beside.json",
    )
    verifier_ended = time.time()
    time.sleep(0.5 if args.tiny else 3.0)
    stop.touch()
    if decoder.wait(timeout=120):
        raise SystemExit(f"the decoder stand-in failed (exit {decoder.returncode}); its output is above")
    for flag in (ready, stop):
        flag.unlink()
    decoded = json.loads((work / "decoder.json").read_text())
    return summarize(args, alone, beside, decoded, decoder_alone, (verifier_started, verifier_ended))


def summarize(args, alone: dict, beside: dict, decoded: dict, decoder_alone, verifier_span) -> dict:
    """Rates from the timed chunks: each verifier cell's tokens/s, and the decoder's over the same seconds."""
    import torch
    import transformers

    tokens_per_step = args.batch / args.tp  # decode tokens per GPU per step, as paper_scale counts them
    steps = [(t0, t1, units * tokens_per_step) for t0, t1, units in decoded["chunks"]]
    after = (verifier_span[1] + 0.5, float("inf"))
    results = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tiny": args.tiny,
        "row_tokens": args.row_tokens,
        "verifier_attention": alone["attention"],
        "verifier_peak_gb": alone["peak_gb"],
        "decoder": {
            "stand_in": f"{'a toy decoder' if args.tiny else args.model}, one rank of TP {args.tp}, {args.batch} sequences, {args.context} tokens of "
            f"context, bf16, random weights, {decoded['how']}",
            "weight_gb": decoded["weight_gb"],
            "kv_gb": decoded["kv_gb"],
            "peak_gb": decoded["peak_gb"],
            "tokens_per_s_per_gpu_alone": window_rate(steps, *decoder_alone),
            "tokens_per_s_per_gpu_after": window_rate(steps, *after),
        },
        "alone": [],
        "beside": [],
    }
    step_rate = window_rate(decoded["chunks"], *decoder_alone)
    if step_rate:
        results["decoder"]["hbm_gb_per_s_alone"] = step_rate * decoded["bytes_per_step"] / 1e9
    for cell in alone["cells"]:
        rate = window_rate(cell["chunks"], 0.0, float("inf"))
        results["alone"].append({"dtype": cell["dtype"], "rows": cell["rows"], "tokens_per_s": rate})
    for cell in beside["cells"]:
        span = (cell["chunks"][0][0], cell["chunks"][-1][1])
        results["beside"].append(
            {
                "dtype": cell["dtype"],
                "rows": cell["rows"],
                "tokens_per_s": window_rate(cell["chunks"], 0.0, float("inf")),
                "decoder_tokens_per_s_per_gpu": window_rate(steps, *span),
            }
        )
    return results


def table(results: dict) -> str:
    """The results as a markdown table, one line per verifier dtype at its own micro-batch."""
    alone = {(c["dtype"], c["rows"]): c["tokens_per_s"] for c in results["alone"]}
    decoder = results["decoder"]["tokens_per_s_per_gpu_alone"] or 0.0
    lines = [
        f"device: {results['device']} (torch {results['torch']}, transformers {results['transformers']}); rows of {results['row_tokens']} tokens; "
        f"verifier attention: {results['verifier_attention']}",
        f"decode stand-in: {results['decoder']['stand_in']}",
        f"decode stand-in alone: {decoder:,.0f} tokens/s per GPU"
        + (f", {results['decoder']['hbm_gb_per_s_alone']:,.0f} GB/s read" if "hbm_gb_per_s_alone" in results["decoder"] else ""),
        "",
        "| dtype | rows per micro-batch | verifier tokens/s alone | beside decode | share kept | decode tokens/s per GPU beside | share kept |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for cell in results["beside"]:
        own = alone.get((cell["dtype"], cell["rows"]))
        kept = f"{cell['tokens_per_s'] / own:.0%}" if own else "-"
        beside = cell["decoder_tokens_per_s_per_gpu"]
        decode_kept = f"{beside / decoder:.0%}" if beside and decoder else "-"
        lines.append(
            f"| {cell['dtype']} | {cell['rows']} | {own or 0:,.0f} | {cell['tokens_per_s']:,.0f} | {kept} | "
            f"{beside or 0:,.0f} | {decode_kept} |"
        )
    lines += ["", "verifier alone, by micro-batch rows:"]
    lines += [f"  {c['dtype']}, {c['rows']} rows: {c['tokens_per_s']:,.0f} tokens/s" for c in results["alone"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="hhem_gpu_rate", help="folder for results.json and table.md")
    parser.add_argument("--tiny", action="store_true", help="toy sizes, CPU allowed: checks the script only")
    parser.add_argument("--row-tokens", type=int, default=350, help="tokens per verifier row")
    parser.add_argument("--seconds", type=float, default=6.0, help="seconds per verifier measurement")
    parser.add_argument("--model", default="Qwen2.5-7B", choices=sorted(MODELS), help="the decode stand-in's shape")
    parser.add_argument("--tp", type=int, default=2, help="tensor-parallel ranks of the stand-in (one is run)")
    parser.add_argument("--batch", type=int, default=256, help="sequences the stand-in decodes at once")
    parser.add_argument("--context", type=int, default=1224, help="KV-cache tokens per sequence")
    parser.add_argument(
        "--attention", choices=("eager", "sdpa"), help="the verifier's T5 attention (default: transformers' choice)"
    )
    parser.add_argument(
        "--alone-rows", nargs="*", type=int, help="micro-batch rows timed alone besides the verifier's own (8, 128)"
    )
    parser.add_argument("--decoder-alone-seconds", type=float, default=8.0)
    parser.add_argument("--decoder-timeout", type=float, default=300.0)
    # Internal: one process's role.
    parser.add_argument("--role", choices=("verifier", "decoder"), help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--dtypes", nargs="*", default=list(DTYPES), help=argparse.SUPPRESS)
    parser.add_argument("--rows", nargs="*", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ready", help=argparse.SUPPRESS)
    parser.add_argument("--stop", help=argparse.SUPPRESS)
    parser.add_argument("--sync-every", type=int, default=10, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tiny:  # toy sizes: the script's path, in seconds
        args.row_tokens, args.batch, args.context, args.sync_every = 64, 4, 32, 1
    if args.role:
        result = run_verifier(args) if args.role == "verifier" else run_decoder(args)
        Path(args.result).write_text(json.dumps(result))
        return 0
    import torch

    if not args.tiny and not torch.cuda.is_available():
        raise SystemExit("hhem_gpu_rate: no CUDA GPU here; --tiny runs it at toy sizes on the CPU")
    results = orchestrate(args)
    text = table(results)
    (Path(args.out) / "results.json").write_text(json.dumps(results, indent=1))
    (Path(args.out) / "table.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
