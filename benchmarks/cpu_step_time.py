"""Time verl's real trainer on CPU: the tiny FSPO run of the end-to-end tests.

Prints the processor's capability and the compute dtype and threads the CPU preset picks for it
(``fspo.cpu.compute``; every figure below is for them), then one figure per line: startup seconds
(launch to the first step's metrics, minus that step), seconds per step (mean of the steps after
the first), the first step, the phases of a step, and the peak memory of the whole process tree.

    python benchmarks/cpu_step_time.py [--steps 4] [--workdir DIR] [trainer overrides...]

Trailing overrides go to the trainer, e.g. ``actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bfloat16``
to time the other dtype (the printed dtype is then the one the run used).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--workdir", type=Path)
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


if __name__ == "__main__":
    main()
