"""Time verl's real trainer on CPU: the tiny FSPO run of the end-to-end tests.

Prints the processor's capability and the compute dtype and threads the CPU preset picks for it
(``fspo.cpu.compute``; every figure below is for them), then one figure per line: startup seconds
(launch to the first step's metrics, minus that step), seconds per step (mean of the steps after
the first), the first step, the phases of a step, and the peak memory of the whole process tree.

    python benchmarks/cpu_step_time.py [--steps 4] [--workdir DIR] [trainer overrides...]

Trailing overrides go to the trainer, e.g. ``actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bfloat16``
to time the other dtype (the printed dtype is then the one the run used).

It ends with each phase against this machine's floor: the matmul FLOPs the phase needs at the run's real lengths
(:func:`phase_flops`) at the GEMM rate measured in the same process at the model's shapes, and for decoding the
weights read once per step at the measured copy rate, whichever is longer. ``--run DIR`` prints that table for a
run already made (a folder holding ``metrics.jsonl`` and the Hydra ``.hydra/config.yaml``, e.g.
``outputs/quickstart/fspo``) instead of launching one:

    python benchmarks/cpu_step_time.py --run outputs/quickstart/fspo
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

from fspo.cpu.compute import compute_dtype_choice, cpu_threads
from fspo.quickstart.launch import launch
from fspo.training.config_checks import ACTOR_PARAM_DTYPE
from fspo_testing.tiny_run import build_tiny_reasoner, tiny_run_overrides


class PeakMemory:
    """Samples the resident memory of this process and all its children (Ray included)."""

    def __init__(self, interval_s: float = 0.5):
        self.interval_s, self.peak, self._stop = interval_s, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for process in [me, *me.children(recursive=True)]:
                try:
                    total += process.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            time.sleep(self.interval_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


# ---------------------------------------------------------------------------------------------
# The floor: matmul FLOPs of each phase (pure functions) and this machine's rates.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a decoder-only transformer with a gated MLP (Llama, Qwen2) that its matmul FLOPs depend on."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def from_config(cls, config) -> ModelShape:
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        return cls(
            layers=config.num_hidden_layers,
            hidden=config.hidden_size,
            heads=config.num_attention_heads,
            kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
            head_dim=head_dim,
            intermediate=config.intermediate_size,
            vocab=config.vocab_size,
        )

    @property
    def layer_weights(self) -> int:
        """One layer's projection weights: q and o (hidden x heads' width), k and v (hidden x kv heads' width),
        gate, up and down (hidden x intermediate)."""
        return self.hidden * (2 * self.heads + 2 * self.kv_heads) * self.head_dim + 3 * self.hidden * self.intermediate

    @property
    def matmul_weights(self) -> int:
        """Every weight a forward multiplies by: all layers' projections and the output layer."""
        return self.layers * self.layer_weights + self.vocab * self.hidden


def causal_pairs(length: int) -> int:
    """(query, key) pairs of causal attention over ``length`` tokens: each token attends to itself and all before."""
    return length * (length + 1) // 2


def layer_flops(shape: ModelShape, tokens: float, pairs: float) -> float:
    """The layers' matmul FLOPs for ``tokens`` positions holding ``pairs`` attention pairs: 2 per multiply-add of
    the projections, and 2 x 2 per pair and query dimension for the scores and the weighted sum of values."""
    return 2 * shape.layers * shape.layer_weights * tokens + 4 * shape.layers * shape.heads * shape.head_dim * pairs


def output_flops(shape: ModelShape, positions: float) -> float:
    """The output layer's FLOPs for ``positions`` logit rows."""
    return 2 * shape.hidden * shape.vocab * positions


@dataclass(frozen=True)
class StepLengths:
    """One training step's sizes: ``prompts`` distinct prompts, ``rollouts_per_prompt`` rollouts of each, and the
    mean prompt and response lengths (tokens)."""

    prompts: int
    rollouts_per_prompt: int
    prompt_tokens: int
    response_tokens: int
    ppo_epochs: int = 1

    @property
    def rollouts(self) -> int:
        return self.prompts * self.rollouts_per_prompt


PHASES = ("gen", "old_log_prob", "update_actor", "update_weights")


def phase_flops(shape: ModelShape, step: StepLengths) -> dict[str, tuple[float, float]]:
    """Per phase of a step, the (layers, output layer) matmul FLOPs of the work it needs.

    - ``gen``: each distinct prompt's forward once, logits at its last position only; then one position per
      response token after the first (the first comes from the prompt's logits) for every rollout.
    - ``old_log_prob``: one forward over every rollout's prompt and response, logits at the response positions
      (where the loss reads them).
    - ``update_actor``: that forward and its backward (twice the forward's FLOPs) per PPO epoch.
    Lengths are the step's means, so attention pairs are those of a mean-length row.
    """
    prompt, response, rollouts = step.prompt_tokens, step.response_tokens, step.rollouts
    decoded = max(response - 1, 0)
    prefill = layer_flops(shape, step.prompts * prompt, step.prompts * causal_pairs(prompt))
    decode = layer_flops(shape, rollouts * decoded, rollouts * (causal_pairs(prompt + decoded) - causal_pairs(prompt)))
    generation = (prefill + decode, output_flops(shape, step.prompts + rollouts * decoded))
    forward = (
        layer_flops(shape, rollouts * (prompt + response), rollouts * causal_pairs(prompt + response)),
        output_flops(shape, rollouts * response),
    )
    update = tuple(3 * step.ppo_epochs * flops for flops in forward)
    return {"gen": generation, "old_log_prob": forward, "update_actor": update}


def decode_steps_bytes(shape: ModelShape, step: StepLengths, bytes_per_weight: int) -> float:
    """Weight bytes a decoder reads while generating: every matmul weight once per decoding step, all rollouts
    decoding together (the steps are the longest response's; the mean stands in for it)."""
    return max(step.response_tokens - 1, 0) * shape.matmul_weights * bytes_per_weight


def gemm_rates(shape: ModelShape, tokens: int, dtype, repeats: int = 3) -> tuple[float, float]:
    """FLOP/s of ``tokens`` rows through the model's projection shapes and through its output layer, measured
    now (best of ``repeats``): the floor's rate, on this machine, threads and dtype."""
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    projections = [(shape.hidden, q), (shape.hidden, kv), (shape.hidden, kv), (q, shape.hidden)]
    projections += [(shape.hidden, shape.intermediate)] * 2 + [(shape.intermediate, shape.hidden)]

    def rate(pairs: list[tuple[int, int]]) -> float:
        operands = [(torch.randn(tokens, k, dtype=dtype), torch.randn(n, k, dtype=dtype)) for k, n in pairs]
        flops = sum(2 * tokens * k * n for k, n in pairs)
        best = float("inf")
        for _ in range(repeats + 1):  # the first is a warm-up
            started = time.perf_counter()
            for x, weight in operands:
                torch.nn.functional.linear(x, weight)
            best = min(best, time.perf_counter() - started)
        return flops / best

    return rate(projections), rate([(shape.hidden, shape.vocab)])


def copy_rate(megabytes: int = 512, repeats: int = 3) -> float:
    """Bytes/s of a large memory copy (read + write counted once: the bytes moved), measured now."""
    source = torch.ones(megabytes * 2**20 // 4)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(repeats + 1):
        started = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - started)
    return source.numel() * 4 / best


def floor_seconds(
    flops: dict[str, tuple[float, float]],
    rates: tuple[float, float],
    decode_bytes: float,
    bytes_per_s: float,
    weight_bytes: float,
) -> dict[str, float]:
    """Each phase's floor: its FLOPs at the measured rates; generation no less than reading its weights; the
    weight sync one copy of the weights."""
    floors = {phase: layers / rates[0] + output / rates[1] for phase, (layers, output) in flops.items()}
    floors["gen"] = max(floors["gen"], decode_bytes / bytes_per_s)
    floors["update_weights"] = weight_bytes / bytes_per_s
    return floors


# A phase measured below this share of its floor did not run (the old-policy pass under rollout_correction.bypass_mode).
NOT_RUN_BELOW = 0.1


def floor_table(timings: dict[str, float], floors: dict[str, float]) -> list[str]:
    """The phase table: measured seconds, floor seconds and percent of floor (floor / measured); the ``step`` row
    is the whole step measured against the sum of the floors of the phases that ran."""
    lines = [f"{'phase (per step)':<18} {'measured s':>10} {'floor s':>8} {'% of floor':>10}"]
    ran = [p for p in PHASES if p not in timings or timings[p] >= NOT_RUN_BELOW * floors[p]]
    rows = [(phase, timings[phase], floors[phase]) for phase in PHASES if phase in timings]
    if "step" in timings:
        rows.append(("step", timings["step"], sum(floors[phase] for phase in ran)))
    for phase, measured, floor in rows:
        share = f"{100 * floor / measured:>9.0f}%" if phase == "step" or phase in ran else f"{'not run':>10}"
        lines.append(f"{phase:<18} {measured:>10.2f} {floor:>8.2f} {share}")
    return lines


def run_lengths(records: list[dict], config: dict) -> StepLengths:
    """The step sizes of a run: means over its training steps' metrics, the prompt and rollout counts from its
    config (``data.train_batch_size``, ``actor_rollout_ref.rollout.n``)."""
    steps = [r["data"] for r in records if "timing_s/step" in r["data"]]
    rollout = config["actor_rollout_ref"]
    return StepLengths(
        prompts=int(config["data"]["train_batch_size"]),
        rollouts_per_prompt=int(rollout["rollout"]["n"]),
        prompt_tokens=round(statistics.mean(s["prompt_length/mean"] for s in steps)),
        response_tokens=round(statistics.mean(s["response_length/mean"] for s in steps)),
        ppo_epochs=int(rollout["actor"].get("ppo_epochs", 1)),
    )


def print_floor(records: list[dict], config: dict, dtype_name: str) -> None:
    """Measure this machine's rates at the run's model shapes and print the phase table for ``records``."""
    from transformers import AutoConfig

    shape = ModelShape.from_config(AutoConfig.from_pretrained(config["actor_rollout_ref"]["model"]["path"]))
    step = run_lengths(records, config)
    dtype = getattr(torch, dtype_name)
    rates = gemm_rates(shape, step.rollouts * (step.prompt_tokens + step.response_tokens), dtype)
    bytes_per_s = copy_rate()
    flops = phase_flops(shape, step)
    weight_bytes = shape.matmul_weights * dtype.itemsize  # the sync sends these (and an untied embedding, not counted)
    floors = floor_seconds(flops, rates, decode_steps_bytes(shape, step, dtype.itemsize), bytes_per_s, weight_bytes)
    steps = [r["data"] for r in records if "timing_s/step" in r["data"]]
    timings = {phase: statistics.mean(s.get(f"timing_s/{phase}", 0.0) for s in steps) for phase in (*PHASES, "step")}
    print(f"step: {step}")
    print(
        f"floor rates ({dtype_name}, {torch.get_num_threads()} threads): projections {rates[0] / 1e9:.0f} GFLOP/s, "
        f"output layer {rates[1] / 1e9:.0f} GFLOP/s, copy {bytes_per_s / 1e9:.1f} GB/s"
    )
    for phase, (layers, output) in flops.items():
        print(f"flops_{phase}: {(layers + output) / 1e9:.1f} GFLOP (output layer {output / 1e9:.1f})")
    print("\n".join(floor_table(timings, floors)))


def run_config(folder: Path) -> dict:
    """The resolved Hydra config of the run under ``folder`` (its latest ``.hydra/config.yaml``)."""
    import yaml

    configs = sorted(folder.rglob(".hydra/config.yaml"), key=lambda path: path.stat().st_mtime)
    if not configs:
        raise SystemExit(f"--run {folder}: no .hydra/config.yaml under it; pass the run's folder")
    return yaml.safe_load(configs[-1].read_text())


def run_records(folder: Path) -> list[dict]:
    """The metrics records of the run under ``folder`` (its ``metrics.jsonl``)."""
    metrics = sorted(folder.rglob("metrics.jsonl"))
    if not metrics:
        raise SystemExit(f"--run {folder}: no metrics.jsonl under it; pass the run's folder")
    return [json.loads(line) for line in metrics[0].read_text().splitlines() if line.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--run", type=Path, help="print the phase table of this run folder instead of launching one")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for the trainer")
    args = parser.parse_args()
    choice = compute_dtype_choice()
    dtype = next(
        (o.split("=", 1)[1] for o in args.overrides if o.split("=", 1)[0].lstrip("+") == ACTOR_PARAM_DTYPE),
        choice.dtype,
    )
    print(f"cpu_capability: {torch.backends.cpu.get_cpu_capability()}")
    print(f"compute_dtype: {dtype} (this CPU's choice: {choice.dtype}, {choice.reason})")
    print(f"threads_per_process: {cpu_threads()}")
    if args.run:
        torch.set_num_threads(cpu_threads())
        print_floor(run_records(args.run), run_config(args.run), dtype)
        return
    root = args.workdir or Path(tempfile.mkdtemp(prefix="fspo_bench_"))
    started = time.time()
    setup = build_tiny_reasoner(root / "setup")
    print(f"setup_seconds (tiny model + format warm-up + data): {time.time() - started:.1f}")

    first_record_at: list[float] = []
    launched = time.time()
    with PeakMemory() as memory:
        records = launch(
            tiny_run_overrides(setup, root / "run", args.steps)
            + ["trainer.save_freq=-1", "fspo.dump_dir=null", *args.overrides],
            root / "run.log",
            root / "run.jsonl",
            on_step=lambda record: first_record_at.append(time.time()),
        )
    total = time.time() - launched
    steps = [r["data"]["timing_s/step"] for r in records]
    where = f"[{torch.backends.cpu.get_cpu_capability()}, {dtype}, {cpu_threads()} threads]"

    def report(name: str, value: float, digits: int = 1) -> None:
        print(f"{name}: {value:.{digits}f} {where}")

    print(f"steps: {len(steps)}")
    report("startup_seconds", first_record_at[0] - launched - steps[0])
    report("first_step_seconds", steps[0])
    if len(steps) > 1:
        report(f"seconds_per_step (steps 2..{len(steps)})", statistics.mean(steps[1:]))
    for phase in ("gen", "old_log_prob", "adv", "update_actor", "update_weights"):
        values = [r["data"].get(f"timing_s/{phase}", 0.0) for r in records[1:] or records]
        report(f"phase_{phase}_seconds", statistics.mean(values), 2)
    report("verifier_seconds_per_rollout", statistics.mean(r["data"]["fspo/verifier_seconds"] for r in records), 4)
    report("total_seconds (launch to exit)", total)
    report("peak_memory_gib (process tree)", memory.peak / 2**30, 2)
    torch.set_num_threads(cpu_threads())
    print_floor(records, run_config(root / "run"), dtype)


if __name__ == "__main__":
    main()
