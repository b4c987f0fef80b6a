"""FSPO against GRPO and the paper's "GRPO with factuality in the reward", over several seeds; with
``--baseline knowrl|fapo|fdpo`` (or ``--arms``) also against the other factuality-aware methods on the same
verifier, data and budget: KnowRL's factuality reward and FAPO's flawed-positive penalty (reward modes of the
same trainer) and F-DPO (the base model's samples on the training questions, paired and trained offline with
``fspo fdpo``, then answering the held-out questions in the same validation pass).

Each arm trains at the quickstart's budget (``fspo quickstart``'s data, model, overrides and launch code)
once per seed, in float32 (``FSPO_CPU_DTYPE=float32``, whatever this CPU would choose); a seed fixes the
held-out questions, the data order and every rollout's sampling seed, and is shared across arms, so the
arms of a seed answer the same questions. Before training the arms of a seed validate the same model on the same
questions, so only the first arm's run does: each later arm's run takes its figures (``before_shared_from`` in
its result) unless an override that decides that validation differs (then it validates again and says why; see
:mod:`fspo.quickstart.shared_validation`). After training each run's greedy answers on the held-out
questions are scored four ways: answer F1, the independent world judge's hallucinated-step rate, the
supported-step rate of the ``lexical`` (the verifier every arm trains with) and ``embedding`` verifiers,
and the share of steps copied verbatim from the evidence (see :mod:`fspo.quickstart.step_report`); and per
answer, over all held-out questions (:func:`answer_metrics`): the flawed-positive share, the supported-chain
accuracy, the exact match, steps per answer and the share of steps that are no claim.

**The comparison** is the paired difference of each arm against GRPO (FSPO − GRPO, factuality reward −
GRPO) in the hallucinated-step rate and in answer F1, with a 95% confidence interval from a **paired t
test over seeds**: per seed, the arm's figure on that seed's held-out questions minus GRPO's on the same
questions; then the mean of those differences ± t(0.975, n−1) · sd / √n. Why over seeds and why t: the
unit that replicates is the training run. The questions of one run are answered by one policy, so they
are not independent draws; a bootstrap over questions would count every question as a replicate and
hide the run-to-run spread, which at this scale is the largest part of the noise (six float32 runs of
one configuration ended between 0.19 and 0.47 hallucinated-step rate). A bootstrap over seeds does count
runs, but with the few seeds two hours allow it has few distinct resamples and its percentile interval is
too narrow; the t interval is exact for normally distributed per-seed differences and widens as it
should when there are few. Each seed's figure already averages over its held-out questions, so more
questions shrink the per-seed noise, and more seeds the interval.

**Sizing the next measurement.** Beside each interval the table gives the sd of the per-seed differences,
the part of it the held-out questions alone explain (a paired bootstrap over the questions within each
seed: what more questions could remove; the rest is run-to-run noise that only more seeds average out), and
the seeds a ±0.05 interval would need at that sd.

Writes ``results.json`` (every run), ``results.md`` (mean ± std per arm, the paired differences with
their intervals, and every seed's raw figures) and ``fspo_vs_grpo.png`` to ``--output-dir``. A finished
run is kept: run the command again after an interruption and only the missing runs train. Each run records the
commit it was trained on (the table lists them) and its configuration (the quickstart's overrides, the arm's, the
seed, the sizes, the model, the dtype); a run finished under another configuration is trained again. A finished run keeps its result, metrics, log and validation answers;
its trained weights are deleted unless ``--keep-models`` (an RL run's checkpoint with its Adam state is
1.6 GB at SmolLM2 in float32, F-DPO's model 0.5 GB: 18 runs would hold 29 GB that nothing here reads).

    python benchmarks/fspo_vs_grpo.py                     # 3 arms x 3 seeds x 12 steps (126 min on 2 cores in float32)
    python benchmarks/fspo_vs_grpo.py --seeds 1 --steps 1 --val-rows 4   # the smoke test of this script
    python benchmarks/fspo_vs_grpo.py --baseline knowrl --baseline fapo --baseline fdpo   # all six arms
    python benchmarks/fspo_vs_grpo.py --table benchmarks/results/fspo_vs_grpo.json   # the committed tables
    python benchmarks/fspo_vs_grpo.py --world shortcut --arms fspo grpo --seeds 16 --val-rows 64 \
        --output-dir outputs/shortcut    # the pre-registered comparison (benchmarks/preregistration_shortcut.md)

**One Ray cluster for the sweep.** The runs of one invocation join a Ray cluster it starts once, and their trainers
and Ray's workers fork from interpreters that imported torch, transformers, Ray and verl once (the test suite's
machinery: :mod:`fspo_testing.shared_ray`, :mod:`fspo_testing.warm_python`). A run then pays neither Ray's start nor
those imports in each of its ~11 processes; each run is still a Ray job of its own, loading its model afresh, and
its figures are those of the same run started alone (tests/test_e2e_reproducible.py compares the two).
``--separate-ray`` starts every run as ``fspo quickstart`` does.

``--collect`` trains nothing: it tabulates the runs of ``--arms`` and ``--seeds`` that have finished, and names
the ones left out, so that arms measured with different numbers of seeds (or in several invocations) make one
comparison; each arm's row says over how many runs it is taken.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from fspo.cpu.compute import DTYPE_ENV, FLOAT32
from fspo.data.io import read_rows
from fspo.data.synthetic import WORLDS
from fspo.data.world_judge import CONTRADICTED, SUPPORTED, build_world, judge_step
from fspo.evaluation.intervals import CONFIDENCE, t_interval, t_quantile
from fspo.quickstart.cli import VAL_ROWS, prepare_data, run_overrides, say, train, train_overrides
from fspo.quickstart.cli import VERIFIER as QUICKSTART_VERIFIER
from fspo.quickstart.shared_validation import TRAINING_ONLY, sharing_refusal, validates_before_training
from fspo.quickstart.step_report import (
    TRAINING_VERIFIERS,
    VERIFIER_THRESHOLDS,
    is_right,
    step_report,
    validation_samples,
)
from fspo.steps import reasoning_steps

# arm -> the overrides that make it; all train against the quickstart's lexical verifier. knowrl and fapo are
# reward modes of the same trainer (fspo.mode); fdpo is not an RL run (see fdpo_model), its overrides are those
# of the validation-only run its model is judged by.
ARMS = {
    "fspo": [],
    "grpo": ["fspo.flip=false"],
    "grpo_factuality_reward": ["fspo.flip=false", "fspo.step_reward_weight=0.5"],
    "knowrl": ["fspo.mode=knowrl"],
    "fapo": ["fspo.mode=fapo"],
    "fdpo": ["fspo.enable=false"],
}
# What may differ between two arms' runs of a seed that share a validation before training: the quickstart's
# TRAINING_ONLY and the reward mode, which changes the reward and (KnowRL counting each statement once) the run's own
# verifier metrics, neither of which `figures` reads: it judges the answers with its own verifiers.
SHARING_IGNORES = {**TRAINING_ONLY, "fspo.mode": "a reward; the benchmark's figures judge the answers themselves"}
# The arms a plain invocation runs (the others with --arms / --baseline: each arm x seed is another run).
DEFAULT_ARMS = ["fspo", "grpo", "grpo_factuality_reward"]
# The quickstart's rollout budget per training step (run_overrides: train_batch_size=2, rollout.n=4), its
# sampling temperature and response length, and its learning rate: what F-DPO's samples and update get.
FDPO_PROMPTS_PER_STEP, FDPO_SAMPLES, FDPO_TEMPERATURE, FDPO_MAX_TOKENS, FDPO_LR = 2, 4, 0.7, 96, 2e-5
# Pairs per F-DPO update: at most 4 pairs per prompt (build-pairs' default) from steps x 2 prompts gives at most
# `steps` updates, the RL arms' count (one update per step: ppo_mini_batch_size = train_batch_size).
FDPO_PAIRS_PER_UPDATE = 4 * FDPO_PROMPTS_PER_STEP
# (key in a run's figures, column title)
FIGURES = [
    ("answer_f1", "answer F1"),
    ("hallucinated_step_rate", "hallucinated-step rate (world judge)"),
    ("lexical_supported_step_rate", "supported-step rate (lexical)"),
    ("embedding_supported_step_rate", "supported-step rate (embedding)"),
    ("copy_rate", "copied steps"),
    ("steps_per_answer", "steps per answer"),
    ("verifier_blind_rate", "hallucinated steps the lexical verifier passes"),
]
# The paired comparisons: (arm, baseline) and the figures compared.
COMPARISONS = [
    ("fspo", "grpo"),
    ("grpo_factuality_reward", "grpo"),
    ("knowrl", "grpo"),
    ("fapo", "grpo"),
    ("fdpo", "grpo"),
    ("fspo", "knowrl"),
    ("fspo", "fapo"),
    ("fspo", "fdpo"),
]
COMPARED_FIGURES = [("hallucinated_step_rate", "hallucinated-step rate"), ("answer_f1", "answer F1")]
# The resolution the comparison table sizes a future run for: the seeds a 95% interval of +-0.05 needs.
TARGET_HALF_WIDTH = 0.05
# Resamples of the paired bootstrap over held-out questions that estimates the questions' share of the noise.
QUESTION_RESAMPLES = 1000
# The fields of a per-question record (question_figures); records written before the last three were kept lack them.
QUESTION_FIELDS = ("contradicted", "claims", "f1", "unseen", "steps", "exact_match", "gold_chain_stated")
# Per answer, over all of a run's held-out questions (answer_metrics): (key, column title). Defined for every run
# that answered a question, unlike the pooled hallucinated-step rate, which a run with no judged step lacks and
# which a run writing one claim in 32 answers sets alone.
ANSWER_FIGURES = [
    ("flawed_positive_share", "flawed positives per question"),
    ("supported_chain_accuracy", "supported-chain accuracy"),
    ("exact_match", "exact match"),
    ("steps_per_answer", "steps per answer"),
    ("non_claim_share", "steps that are no claim"),
    ("hallucinated_step_rate", "hallucinated-step rate, pooled (secondary)"),
]
# The per-answer figures compared between arms, paired over seeds.
COMPARED_ANSWER_FIGURES = ["flawed_positive_share", "supported_chain_accuracy", "exact_match"]
# The chart shows the rates (0..1); steps per answer stays in the table.
CHART_FIGURES = [(key, title) for key, title in FIGURES if key != "steps_per_answer"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per arm (0, 1, ...; default 3)")
    parser.add_argument("--steps", type=int, default=12, help="training steps per run (the quickstart's 12)")
    parser.add_argument("--val-rows", type=int, default=VAL_ROWS, help=f"held-out questions (default {VAL_ROWS})")
    parser.add_argument(
        "--world",
        default="default",
        choices=WORLDS,
        help="the synthetic world of the training and held-out questions (shortcut: a wrong chain often still "
        "reaches the right answer, fspo.data.synthetic_shortcut)",
    )
    parser.add_argument("--arms", nargs="+", choices=list(ARMS), default=None, help=f"default {' '.join(DEFAULT_ARMS)}")
    parser.add_argument(
        "--baseline",
        action="append",
        choices=["knowrl", "fapo", "fdpo"],
        default=[],
        help="add another factuality-aware method's arm to the arms (repeatable)",
    )
    parser.add_argument("--model", type=Path, help="a Hugging Face model directory (default: the quickstart's SmolLM2)")
    parser.add_argument("--output-dir", type=Path, default=Path("outputs/fspo_vs_grpo"))
    parser.add_argument(
        "--keep-models",
        action="store_true",
        help="keep each finished run's checkpoint (RL arms) or model (F-DPO); by default they are deleted once "
        "the run is judged",
    )
    parser.add_argument(
        "--table",
        type=Path,
        metavar="RESULTS_JSON",
        help="train nothing: print the tables of a results.json this script wrote (what docs/results.md shows)",
    )
    parser.add_argument("--chart", type=Path, help="with --table: also draw the chart of that results.json here")
    parser.add_argument(
        "--collect",
        action="store_true",
        help="train nothing: write results.json and the tables from the runs of these arms and seeds that have "
        "finished in --output-dir (the others are named and left out)",
    )
    parser.add_argument(
        "--separate-ray",
        action="store_true",
        help="each run starts its own Ray and interpreters, as fspo quickstart does (default: the sweep shares one)",
    )
    parser.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run")
    return parser


def figures(dump: Path, rows: list[dict], answer_f1: float | None) -> dict:
    """One validation pass's figures: answer F1 (from the trainer's metrics) and the step report, and each
    held-out question's own counts (:func:`question_figures`)."""
    samples = validation_samples(dump, rows)
    report = step_report(samples)
    return {
        "answer_f1": answer_f1,
        **{key: report[key] for key, _ in FIGURES if key in report},
        "steps": report["steps"],
        "answers": report["answers"],
        "per_question": question_figures(samples, rows),
    }


def question_figures(samples: list[dict], rows: list[dict]) -> dict[str, list[float]]:
    """Per held-out question (its row's index, as a string for JSON): [contradicted steps, judged claims, F1,
    contradicted steps the training verifier passes, steps, exact match, every gold hop stated as a supported
    step], from a validation pass's ``validation_samples`` (:data:`QUESTION_FIELDS`).

    What the run's hallucinated-step rate (contradicted / claims, summed over questions) and answer F1 (the
    mean) are made of, so that a comparison can tell the questions' part of its noise from the runs'; and
    how many of the judge's hallucinations the ``lexical`` verifier every arm trains with labels supported:
    those FSPO's flip cannot see (a step made of the evidence's words in a wrong relation)."""
    from fspo.verifiers.lexical import LexicalVerifier  # imports verl (seconds): only when a run is judged

    # As every arm trains with it (fspo.quickstart.step_report.TRAINING_VERIFIERS: each clause against its sentence).
    unit = TRAINING_VERIFIERS["lexical"].get("evidence_unit", "whole")
    verifier, threshold = LexicalVerifier(evidence_unit=unit), VERIFIER_THRESHOLDS["lexical"]
    row_of = {(row.get("extra_info") or {}).get("evidence"): index for index, row in enumerate(rows)}
    out = {}
    for sample in samples:
        world = build_world(sample["evidence"], sample["gold_facts"])
        steps = [step.text for step in reasoning_steps(sample["response"])]
        judgments = [judge_step(step, world) for step in steps]
        verdicts = [judgment.verdict for judgment in judgments]
        scores = verifier.score([(sample["evidence"], step) for step in steps]) if steps else []
        contradicted = sum(verdict == CONTRADICTED for verdict in verdicts)
        unseen = sum(v == CONTRADICTED and score >= threshold for v, score in zip(verdicts, scores, strict=True))
        claims = contradicted + sum(verdict == SUPPORTED for verdict in verdicts)
        stated = {claim for judgment in judgments if judgment.verdict == SUPPORTED for claim in judgment.claims}
        out[str(row_of[sample["evidence"]])] = [
            contradicted,
            claims,
            float(sample["f1"] or 0.0),
            unseen,
            len(steps),
            int(sample.get("ground_truth") is not None and is_right(sample["response"], sample["ground_truth"])),
            int(world.gold <= stated),
        ]
    return out


def live_steps(metrics_path: Path) -> list[int] | None:
    """[steps with a non-zero advantage, training steps] of one run, from its metrics log (verl's
    ``critic/advantages/max`` and ``/min`` over response tokens); None when the log has no training step.

    A step whose groups all got equal rewards has advantage 0 on every token in every arm (a flip of 0 is 0):
    it moves nothing but AdamW's weight decay."""
    if not metrics_path.is_file():
        return None
    live = steps = 0
    for line in metrics_path.read_text().splitlines():
        data = json.loads(line).get("data", {}) if line.strip() else {}
        if "critic/advantages/max" not in data:
            continue
        steps += 1
        live += data["critic/advantages/max"] != 0 or data["critic/advantages/min"] != 0
    return [live, steps] if steps else None


def fdpo_pair_verifier() -> list[str]:
    """``fspo fdpo build-pairs``'s verifier arguments for the verifier the RL arms train with (the quickstart's:
    name, threshold and every option, e.g. ``lexical`` scoring each step against its best evidence sentence),
    so that F-DPO's factuality labels are the ones FSPO's flip, KnowRL's and FAPO's rewards see."""
    settings = dict(QUICKSTART_VERIFIER)
    arguments = ["--verifier", settings.pop("name"), "--threshold", str(settings.pop("threshold"))]
    for key, value in settings.items():
        arguments += ["--verifier-option", f"{key}={value}"]
    return arguments


def fdpo_model(seed: int, args, model: Path, train_file: Path, out: Path, clock: float) -> Path:
    """F-DPO's model of one seed: the base model's samples on the seed's training questions (the RL arms'
    rollout budget: steps x 2 prompts x 4 samples), F-DPO pairs from them by the verifier the RL arms train
    with (:func:`fdpo_pair_verifier`), and ``fspo fdpo train`` at the quickstart's learning rate with at most as
    many updates as the RL arms."""
    from fspo.cli.fdpo import main as fdpo_main
    from fspo.evaluation.generation import GenerationSettings, build_generator
    from fspo.evaluation.pipeline import evaluate_benchmark
    from fspo.quickstart.cli import PROMPT_FORMAT

    rows = read_rows(train_file)[: args.steps * FDPO_PROMPTS_PER_STEP]
    settings = GenerationSettings(FDPO_TEMPERATURE, 1.0, FDPO_MAX_TOKENS, FDPO_SAMPLES, batch_size=8, seed=seed)
    generator = build_generator(model, settings, backend="hf")
    say(clock, f"[fdpo seed {seed}] sampling {FDPO_SAMPLES} answers to each of {len(rows)} training questions")
    evaluate_benchmark(generator, generator.tokenizer, rows, out / "samples.jsonl", PROMPT_FORMAT, description="fdpo")
    build = ["build-pairs", str(out / "samples.jsonl"), *fdpo_pair_verifier()]
    if fdpo_main([*build, "--pairs", str(out / "pairs.jsonl")]) != 0:
        raise SystemExit(f"[fdpo seed {seed}] no F-DPO pairs (see above)")
    say(clock, f"[fdpo seed {seed}] training the pairs with F-DPO")
    fit = ["train", "--model", str(model), "--pairs", str(out / "pairs.jsonl"), "--output-dir", str(out / "model")]
    if (
        fdpo_main(
            [*fit, "--learning-rate", str(FDPO_LR), "--batch-size", str(FDPO_PAIRS_PER_UPDATE), "--seed", str(seed)]
        )
        != 0
    ):
        raise SystemExit(f"[fdpo seed {seed}] F-DPO training failed (see above)")
    return out / "model"


def run_config(arm: str, seed: int, args) -> list[str]:
    """What decides a run's figures besides the code: the quickstart's overrides (its paths left out), the arm's,
    the user's, the seed, the held-out size and the model. A finished run is reused only under the same list."""
    setup = {"model": "<model>", "train": "<train>", "val": "<val>"}
    return [
        *run_overrides(setup, Path("<run>"), args.steps),
        *ARMS[arm],
        *args.overrides,
        f"seed={seed}",
        f"val_rows={args.val_rows}",
        f"model={args.model.name if args.model else 'SmolLM2-135M-Instruct'}",
        f"dtype={FLOAT32}",
        # Only another world is named, so the runs finished before --world existed keep their configuration.
        *([f"world={args.world}"] if args.world != "default" else []),
    ]


@functools.cache
def code_version() -> str:
    """The commit this benchmark runs on (``-dirty`` with uncommitted changes), recorded in every run it trains."""
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return described.stdout.strip() if described.returncode == 0 and described.stdout.strip() else "unknown"


def finished_result(result_path: Path, config: list[str]) -> tuple[dict | None, str]:
    """A finished run's result if it was trained under ``config``, else None; and why, for the log."""
    if not result_path.is_file():
        return None, "not trained yet"
    result = json.loads(result_path.read_text())
    if result.get("config") != config:
        changed = sorted(set(result.get("config") or []) ^ set(config))
        return None, "finished before under another configuration (" + (", ".join(changed[:4]) or "none recorded") + ")"
    return result, f"finished before (code {result.get('code_version', 'unknown')})"


def run_arguments(arm: str, seed: int, args) -> tuple[str, Path, list[str]]:
    """(name, folder, overrides beyond the quickstart's) of ``arm``'s run with ``seed``."""
    return f"{arm} seed {seed}", args.output_dir / arm / f"seed{seed}", [*ARMS[arm], *args.overrides]


def shared_before(arm: str, seed: int, args, setup: dict, earlier: list[dict], clock: float) -> tuple[str, dict] | None:
    """(arm, figures) of the first of this seed's ``earlier`` results whose validation before training is the one
    ``arm``'s run would make (trained at this code, their runs' overrides agree on all but :data:`SHARING_IGNORES`);
    None, saying why, when none is. ``setup``: the base model's run (model, data)."""
    name, out, extra = run_arguments(arm, seed, args)
    mine = train_overrides(name, setup, out, args.steps, seed, extra)
    refusals = []
    for result in earlier:
        if result["before"] is None:  # F-DPO's run validated its own model
            continue
        if result.get("code_version") != code_version():  # a finished run of an earlier invocation
            refusals.append(f"{result['arm']}'s run was trained at code {result.get('code_version', 'unknown')}")
            continue
        source_name, source_out, source_extra = run_arguments(result["arm"], seed, args)
        theirs = train_overrides(source_name, setup, source_out, args.steps, seed, source_extra)
        why = sharing_refusal(result["arm"], theirs, mine, SHARING_IGNORES)
        if why is None:
            return result.get("before_shared_from", result["arm"]), result["before"]
        refusals.append(why)
    if refusals:
        say(clock, f"[{arm} seed {seed}] validating before training again: {refusals[0]}")
    return None


def sweep_refusal(overrides: list[str]) -> str | None:
    """Why the runs cannot share the sweep's cluster (a CPU one of the preset's logical size; a joined run takes
    ``platform=cpu`` and leaves the cluster's size to it), or None."""
    from fspo.cpu import cpu_mode_requested

    if not cpu_mode_requested():
        return "an accelerator is present (the shared cluster is the CPU preset's)"
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key == "platform" or key.startswith("ray_kwargs."):
            return f"{key} is given (a joined run takes the shared cluster's platform and size)"
    return None


class SweepLauncher:
    """How this invocation's runs start: joining one Ray cluster, their interpreters forked from warm servers (the
    suite's runs: :func:`fspo_testing.shared_ray.launch_joined`), or with ``separate`` each on its own."""

    def __init__(self, separate: bool):
        self.separate = separate
        self.python, self.overrides = sys.executable, []
        if not separate:
            from fspo_testing.shared_ray import JOIN_OVERRIDES
            from fspo_testing.warm_python import warm_python, warm_ray_workers

            warm_ray_workers()  # before the cluster starts: its workers fork from a warm server
            self.python, self.overrides = warm_python(), list(JOIN_OVERRIDES)

    def before_run(self) -> None:
        """Point the next run at the sweep's cluster (started at the first run), its earlier runs' logs retired."""
        if not self.separate:
            from fspo_testing.shared_ray import joining_variables

            os.environ.update(joining_variables())


def run_once(
    arm: str,
    seed: int,
    args,
    model: Path,
    clock: float,
    earlier: list[dict] | None = None,
    launcher: SweepLauncher | None = None,
) -> dict:
    """Trains one arm with one seed (or reads its finished result) and returns its figures. ``earlier``: this
    seed's results so far, whose validation before training the run takes where it is the same
    (:func:`shared_before`). ``launcher``: how the run starts (default: on its own)."""
    launcher = launcher or SweepLauncher(separate=True)
    name, out, extra = run_arguments(arm, seed, args)
    result_path = out / "result.json"
    config = run_config(arm, seed, args)
    result, why = finished_result(result_path, config)
    if result is not None:
        say(clock, f"[{arm} seed {seed}] {why}: {result_path}")
        return _completed(result, out, args)
    if result_path.is_file():
        say(clock, f"[{arm} seed {seed}] {why}: training it again")
    # A half-finished run's checkpoint would be resumed by verl: start it afresh.
    shutil.rmtree(out, ignore_errors=True)
    train_file, val_file = prepare_data(args.output_dir / "data" / f"seed{seed}", seed, args.val_rows, args.world)
    setup = {"model": model, "train": train_file, "val": val_file}
    # F-DPO's validation before training is its result (its own model's answers): never another arm's.
    shared = None if arm == "fdpo" else shared_before(arm, seed, args, setup, earlier or [], clock)
    started = time.time()
    steps = args.steps
    if arm == "fdpo":
        # The F-DPO model answers the held-out questions in the same validation pass as every arm's: that of a
        # one-step run of it whose update is not used (its validation before training is the F-DPO model's).
        setup["model"], steps = fdpo_model(seed, args, model, train_file, out / "fdpo", clock), 1
    launcher.before_run()
    run = train(name, setup, out, steps, seed, [*extra, *launcher.overrides], clock, shared, python=launcher.python)
    rows = read_rows(val_file)
    say(clock, f"[{arm} seed {seed}] scoring the answers with the world judge and both verifiers")
    if shared is None:
        before = figures(run["validation_dumps"]["before"], rows, run["before"].get("answer_f1"))
    else:
        before = dict(shared[1])
    result = {
        "arm": arm,
        "seed": seed,
        "dtype": FLOAT32,
        "code_version": code_version(),
        "config": config,
        "seconds": round(time.time() - started if arm == "fdpo" else run["seconds"], 1),
        "live_steps": None if arm == "fdpo" else live_steps(out / "metrics.jsonl"),
        # fdpo: its model's figures are after F-DPO; the base model's come from the other arms.
        "before": None if arm == "fdpo" else before,
        **({} if shared is None else {"before_shared_from": shared[0]}),
        "after": before
        if arm == "fdpo"
        else figures(run["validation_dumps"]["after"], rows, run["after"].get("answer_f1")),
    }
    result_path.write_text(json.dumps(result, indent=2))
    if not args.keep_models:
        # Judged and written: nothing reads the weights again (a rerun retrains an unfinished run afresh).
        for weights in (out / "ckpt", out / "fdpo" / "model"):
            shutil.rmtree(weights, ignore_errors=True)
    return result


def _completed(result: dict, out: Path, args) -> dict:
    """A finished run's result with what later versions of this script added to a result: its live steps
    (written back to its result.json) and its per-question figures."""
    if "live_steps" not in result:
        result["live_steps"] = None if result["arm"] == "fdpo" else live_steps(out / "metrics.jsonl")
        (out / "result.json").write_text(json.dumps(result, indent=2))
    return _with_question_figures(result, out, args)


def collect_finished(args, clock: float) -> list[dict]:
    """``--collect``: the finished runs of ``args.arms`` × seeds 0..``args.seeds``−1, in that order; every run
    left out is named with the reason."""
    results = []
    for seed in range(args.seeds):
        for arm in args.arms:
            out = args.output_dir / arm / f"seed{seed}"
            result, why = finished_result(out / "result.json", run_config(arm, seed, args))
            if result is None:
                say(clock, f"[{arm} seed {seed}] left out: {why}")
                continue
            results.append(_completed(result, out, args))
    return results


def _with_question_figures(result: dict, out: Path, args) -> dict:
    """A finished result written before the per-question figures were kept gets them from its validation
    dumps: the first for before training, the last for after (F-DPO's judged answers are its run's first),
    written back to its result.json."""
    dumps = sorted((out / "validation").glob("*.jsonl"), key=lambda path: int(path.stem))
    val_file = args.output_dir / "data" / f"seed{result['seed']}" / "test.parquet"
    if not dumps or not val_file.is_file():
        return result
    rows = read_rows(val_file)
    passes = [("after", dumps[0] if result["arm"] == "fdpo" else dumps[-1])]
    if "before_shared_from" not in result:  # a run that took another's validation before training has no dump of it
        passes.append(("before", dumps[0]))
    stale = [(when, dump) for when, dump in passes if result[when] is not None and "per_question" not in result[when]]
    for when, dump in stale:
        result[when]["per_question"] = question_figures(validation_samples(dump, rows), rows)
    if stale:
        (out / "result.json").write_text(json.dumps(result, indent=2))
    return result


def figure_value(figures: dict, key: str) -> float | None:
    """One figure of a validation pass; steps per answer is derived (results written before it lack it)."""
    if key == "steps_per_answer":
        return figures["steps"] / figures["answers"] if figures.get("answers") else None
    if key == "verifier_blind_rate":
        # Results written before per-question figures were kept lack it.
        counts = list(figures.get("per_question", {}).values())
        contradicted = sum(q[0] for q in counts)
        return sum(q[3] for q in counts) / contradicted if contradicted else None
    return figures.get(key)


def is_exact_match(record: list[float]) -> bool:
    """Whether a per-question record's answer is right (the outcome scorer's exact match). A record written
    before exact match was kept has F1 1 instead: the same thing for the synthetic worlds' one-word answers (a
    city, a country, a year), whose token F1 is 1 only when the normalised answer equals the gold one."""
    return bool(record[5]) if len(record) > 5 else record[2] == 1.0


def answer_metrics(figures: dict) -> dict[str, float | None]:
    """A validation pass's per-answer figures (:data:`ANSWER_FIGURES`), from its per-question records, each over
    all its held-out questions:

    - flawed-positive share: right answers (exact match) holding a step the world judge contradicts;
    - supported-chain accuracy: right answers stating every gold hop as a supported step, none contradicted
      (None for records written before the gold chain was kept);
    - exact match; steps per answer;
    - the share of steps that are no claim (the judge finds no relation to check), None without a step;
    - the pooled hallucinated-step rate (contradicted / judged claims), None without a judged claim.

    Records written before steps were kept per question take the pass's step count (``figures["steps"]``).
    """
    records = list(figures.get("per_question", {}).values())
    if not records:
        return dict.fromkeys((key for key, _ in ANSWER_FIGURES), None)
    questions = len(records)
    complete = all(len(record) >= len(QUESTION_FIELDS) for record in records)
    right = [is_exact_match(record) for record in records]
    steps = sum(record[4] for record in records) if complete else figures.get("steps")
    claims = sum(record[1] for record in records)
    chains = sum(ok and record[6] and not record[0] for ok, record in zip(right, records)) if complete else None
    return {
        "flawed_positive_share": sum(ok and record[0] > 0 for ok, record in zip(right, records)) / questions,
        "supported_chain_accuracy": None if chains is None else chains / questions,
        "exact_match": sum(right) / questions,
        "steps_per_answer": None if steps is None else steps / questions,
        "non_claim_share": (steps - claims) / steps if steps else None,
        "hallucinated_step_rate": sum(record[0] for record in records) / claims if claims else None,
    }


def answer_comparisons(results: list[dict]) -> list[dict]:
    """Each paired comparison the runs allow in the per-answer figures (:data:`COMPARED_ANSWER_FIGURES`):
    per-seed differences after training and their t interval."""
    arms = {r["arm"] for r in results}
    after = {(r["arm"], r["seed"]): answer_metrics(r["after"]) for r in results}
    rows = []
    for arm, baseline in COMPARISONS:
        if arm not in arms or baseline not in arms:
            continue
        for key in COMPARED_ANSWER_FIGURES:
            per_seed = {}
            for seed in sorted({r["seed"] for r in results}):
                mine, theirs = after.get((arm, seed), {}).get(key), after.get((baseline, seed), {}).get(key)
                if mine is not None and theirs is not None:
                    per_seed[seed] = mine - theirs
            mean, low, high, n = t_interval(list(per_seed.values()))
            sd = statistics.stdev(per_seed.values()) if n > 1 else math.nan
            rows.append(
                {"arm": arm, "baseline": baseline, "figure": key, "mean": mean, "low": low, "high": high}
                | {"seeds": n, "sd": sd, "per_seed": per_seed}
            )
    return rows


def answer_table(results: list[dict]) -> str:
    """The per-answer figures: mean ± std per arm (and the base model, once a seed), then the paired
    differences with their intervals."""
    first = next((r["arm"] for r in results if r["before"] is not None), None)
    groups: dict[str, list[dict]] = {"base model": [answer_metrics(r["before"]) for r in results if r["arm"] == first]}
    for result in results:
        groups.setdefault(result["arm"], []).append(answer_metrics(result["after"]))
    lines = [
        "Per answer, over all held-out questions (a flawed positive: a right answer holding a contradicted step; a",
        "supported chain: a right answer stating every gold hop as a supported step, none contradicted); mean ± std",
        "over each arm's runs:",
        "",
        "| arm | runs | " + " | ".join(title for _, title in ANSWER_FIGURES) + " |",
        "|---|---|" + "---|" * len(ANSWER_FIGURES),
    ]
    for name, runs in groups.items():
        cells = []
        for key, _ in ANSWER_FIGURES:
            mean, std, count = mean_std([run[key] for run in runs])
            cells.append(
                "n/a" if count == 0 else f"{mean:.3f} ± {std:.3f}" + (f" (n={count})" if count < len(runs) else "")
            )
        lines.append(f"| {name} | {len(runs)} | " + " | ".join(cells) + " |")
    titles = dict(ANSWER_FIGURES)
    lines += ["", "| difference | figure | mean | 95% interval | seeds | sd |", "|---|---|---|---|---|---|"]
    for row in answer_comparisons(results):
        sd = "n/a" if math.isnan(row["sd"]) else f"{row['sd']:.3f}"
        lines.append(
            f"| {row['arm']} − {row['baseline']} | {titles[row['figure']]} | {_number(row['mean'])} | "
            f"[{_number(row['low'])}, {_number(row['high'])}] | {row['seeds']} | {sd} |"
        )
    return "\n".join(lines)


def mean_std(values: list[float | None]) -> tuple[float, float, int]:
    """(mean, sample standard deviation, count) of the values that are not None; std 0 for one value."""
    present = [v for v in values if v is not None and not math.isnan(v)]
    if not present:
        return math.nan, math.nan, 0
    return statistics.fmean(present), statistics.stdev(present) if len(present) > 1 else 0.0, len(present)


def paired_differences(results: list[dict], arm: str, baseline: str, key: str) -> list[tuple[int, float]]:
    """(seed, ``arm``'s figure − ``baseline``'s) after training, for every seed where both runs have the figure
    (a run whose answers hold no closed reasoning has no hallucinated-step rate)."""
    after = {(r["arm"], r["seed"]): figure_value(r["after"], key) for r in results}
    pairs = []
    for seed in sorted({r["seed"] for r in results}):
        mine, theirs = after.get((arm, seed)), after.get((baseline, seed))
        if mine is None or theirs is None or math.isnan(mine) or math.isnan(theirs):
            continue
        pairs.append((seed, mine - theirs))
    return pairs


def seeds_needed(sd: float, half_width: float, confidence: float = CONFIDENCE) -> int:
    """The fewest seeds (at least 2) whose t interval, t(c, n−1) · sd / √n, is at most ``half_width`` wide on
    each side, for per-seed differences of standard deviation ``sd``: how to size the next measurement."""
    if half_width <= 0 or sd < 0 or math.isnan(sd):
        raise ValueError(f"seeds_needed needs sd >= 0 and half_width > 0, got {sd}, {half_width}")
    # The normal quantile is below t's, so its n is a lower bound to count up from.
    z = statistics.NormalDist().inv_cdf(0.5 + confidence / 2)
    n = max(2, math.ceil((z * sd / half_width) ** 2))
    while t_quantile(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n) > half_width:
        n += 1
    return n


def _question_figure(per_question: dict, questions: list[str], key: str) -> float:
    """A run's figure over the given questions (repeats count again): as ``figures`` computes it over all."""
    if key == "answer_f1":
        return statistics.fmean(per_question[q][2] for q in questions)
    claims = sum(per_question[q][1] for q in questions)
    return sum(per_question[q][0] for q in questions) / claims if claims else math.nan


def question_noise_sd(results: list[dict], arm: str, baseline: str, key: str, resamples: int = QUESTION_RESAMPLES):
    """The standard deviation a seed's difference (``arm`` − ``baseline``) would have from the held-out
    questions alone: a paired bootstrap over the questions both runs answered, per seed, root-mean-square over
    seeds. Set against the sd of the differences between seeds, it says how much of the noise more held-out
    questions could remove (the rest is run to run). None where no seed has both runs' per-question figures."""
    after = {(r["arm"], r["seed"]): r["after"].get("per_question") for r in results}
    rng = random.Random(0)
    variances = []
    for seed in sorted({r["seed"] for r in results}):
        mine, theirs = after.get((arm, seed)), after.get((baseline, seed))
        if not mine or not theirs:
            continue
        questions = sorted(set(mine) & set(theirs), key=int)
        draws = []
        for _ in range(resamples):
            sample = rng.choices(questions, k=len(questions))
            draw = _question_figure(mine, sample, key) - _question_figure(theirs, sample, key)
            if not math.isnan(draw):
                draws.append(draw)
        if len(draws) > 1:
            variances.append(statistics.pvariance(draws))
    return math.sqrt(statistics.fmean(variances)) if variances else None


def comparisons(results: list[dict]) -> list[dict]:
    """Each paired comparison that the runs allow: its per-seed differences and their t interval, their sd
    (between seeds) and the part of it the held-out questions explain, and the seeds a ±0.05 interval needs
    (from three seeds on)."""
    arms = {r["arm"] for r in results}
    rows = []
    for arm, baseline in COMPARISONS:
        if arm not in arms or baseline not in arms:
            continue
        for key, _ in COMPARED_FIGURES:
            pairs = paired_differences(results, arm, baseline, key)
            differences = [difference for _, difference in pairs]
            mean, low, high, n = t_interval(differences)
            sd = statistics.stdev(differences) if n > 1 else math.nan
            rows.append(
                {
                    "arm": arm,
                    "baseline": baseline,
                    "figure": key,
                    "mean": mean,
                    "low": low,
                    "high": high,
                    "seeds": n,
                    "per_seed": dict(pairs),
                    "sd": sd,
                    "question_sd": question_noise_sd(results, arm, baseline, key),
                    # Two seeds' sd has one degree of freedom: too loose to size anything by.
                    "seeds_for_target": seeds_needed(sd, TARGET_HALF_WIDTH) if n >= 3 else None,
                }
            )
    return rows


def _number(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:+.3f}"


def excludes_zero(row: dict) -> bool | None:
    """Whether a paired difference's interval excludes 0; None without an interval (fewer than two seeds)."""
    return None if math.isnan(row["low"]) else row["low"] > 0 or row["high"] < 0


def comparison_table(rows: list[dict]) -> str:
    """The paired differences as a Markdown table, with whether each interval excludes 0."""
    lines = [
        f"Paired differences after training, mean over seeds with a {CONFIDENCE:.0%} interval (paired t over seeds);",
        "sd: of the per-seed differences; from questions: the sd a seed's difference has from its held-out",
        f"questions alone (paired bootstrap over them); seeds for ±{TARGET_HALF_WIDTH}: what an interval that narrow",
        "would need at this sd:",
        "",
        f"| difference | figure | mean | 95% interval | seeds | excludes 0 | sd | from questions | seeds for ±{TARGET_HALF_WIDTH} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    titles = dict(COMPARED_FIGURES)
    for row in rows:
        excludes = {None: "n/a", True: "yes", False: "no"}[excludes_zero(row)]
        sd, question_sd, needed = row.get("sd", math.nan), row.get("question_sd"), row.get("seeds_for_target")
        lines.append(
            f"| {row['arm']} − {row['baseline']} | {titles[row['figure']]} | {_number(row['mean'])} | "
            f"[{_number(row['low'])}, {_number(row['high'])}] | {row['seeds']} | {excludes} | "
            f"{'n/a' if math.isnan(sd) else f'{sd:.3f}'} | {'n/a' if question_sd is None else f'{question_sd:.3f}'} | "
            f"{'n/a' if needed is None else needed} |"
        )
    return "\n".join(lines)


def live_steps_table(results: list[dict]) -> str:
    """Per arm, the training steps with a non-zero advantage: the mean per run with a 95% t interval over runs
    (the run is what replicates: its steps share one policy), and every run's count."""
    lines = [
        f"Training steps with a non-zero advantage (mean per run, {CONFIDENCE:.0%} t interval over runs):",
        "",
        "| arm | runs | steps with a gradient per run | 95% interval | per seed |",
        "|---|---|---|---|---|",
    ]
    arms = dict.fromkeys(r["arm"] for r in sorted(results, key=lambda r: r["seed"]) if r.get("live_steps"))
    for arm in arms:
        runs = sorted((r for r in results if r["arm"] == arm and r.get("live_steps")), key=lambda r: r["seed"])
        mean, low, high, n = t_interval([r["live_steps"][0] for r in runs])
        interval = "n/a" if math.isnan(low) else f"[{low:.1f}, {high:.1f}]"
        per_seed = ", ".join(f"{r['live_steps'][0]}/{r['live_steps'][1]}" for r in runs)
        lines.append(f"| {arm} | {n} | {mean:.1f} of {runs[0]['live_steps'][1]} | {interval} | {per_seed} |")
    return "\n".join(lines)


def per_seed_table(results: list[dict]) -> str:
    """Every run's raw figures after training (and the base model's, per seed), as a Markdown table."""
    lines = [
        "| seed | arm | " + " | ".join(title for _, title in FIGURES) + " |",
        "|---|---|" + "---|" * len(FIGURES),
    ]
    seen_base: set[int] = set()
    for result in sorted(results, key=lambda r: (r["seed"], r["arm"])):
        # An fdpo run has no base-model figures of its own (run_once): another arm's run gives the seed's.
        runs = [] if result["seed"] in seen_base or result["before"] is None else [("base model", result["before"])]
        if result["before"] is not None:
            seen_base.add(result["seed"])
        for name, figures_of_run in [*runs, (result["arm"], result["after"])]:
            cells = []
            for key, _ in FIGURES:
                value = figure_value(figures_of_run, key)
                cells.append("n/a" if value is None or math.isnan(value) else f"{value:.3f}")
            lines.append(f"| {result['seed']} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summarise(results: list[dict]) -> dict[str, dict[str, tuple[float, float, int]]]:
    """Per arm (and ``base model``: the untrained model, from every run's validation before training),
    each figure's mean, std and count over seeds."""
    first = next((r["arm"] for r in results if r["before"] is not None), None)
    groups: dict[str, list[dict]] = {"base model": [r["before"] for r in results if r["arm"] == first]}
    for result in results:
        groups.setdefault(result["arm"], []).append(result["after"])
    return {
        name: {key: mean_std([figure_value(f, key) for f in runs]) for key, _ in FIGURES}
        for name, runs in groups.items()
    }


def markdown_table(summary: dict, steps: int, val_rows: int, run_s: float, versions: str = "") -> str:
    """The results as a Markdown table of mean ± std over each arm's runs (one per seed), with how they were
    measured.

    A figure some of an arm's runs lack (a run whose answers hold no closed reasoning has no step figures) shows
    over how many runs it is taken, ``(n=2)``, so a collapsed seed does not vanish into the mean unseen."""
    lines = [
        f"{val_rows} held-out questions, greedy; {steps} training steps per run; mean ± std over each arm's runs "
        f"(one per seed); {run_s / 60:.1f} min of runs (Ray start-up, validation, training); code: {versions}",
        "",
        "| arm | runs | " + " | ".join(title for _, title in FIGURES) + " |",
        "|---|---|" + "---|" * len(FIGURES),
    ]
    for name, stats in summary.items():
        runs = max(count for _, _, count in stats.values())
        cells = [
            "n/a" if count == 0 else f"{mean:.3f} ± {std:.3f}" + (f" (n={count})" if count < runs else "")
            for mean, std, count in stats.values()
        ]
        lines.append(f"| {name} | {runs} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(results: list[dict], steps: int, val_rows: int, paired: list[dict] | None = None) -> str:
    """Every table of a comparison, from its runs: mean ± std per arm, the paired differences (``paired``, when
    the caller has computed them already), the steps with a gradient, and every run's figures."""
    run_s = sum(result["seconds"] for result in results)
    return "\n\n".join(
        [
            markdown_table(summarise(results), steps, val_rows, run_s, code_versions(results)),
            comparison_table(comparisons(results) if paired is None else paired),
            live_steps_table(results),
            "Every run's figures after training:\n\n" + per_seed_table(results),
            answer_table(results),
        ]
    )


# What reading a file that is not a results.json of this script raises: unreadable or not JSON (OSError,
# ValueError), a field missing (KeyError, StopIteration) or of another shape (TypeError, AttributeError,
# IndexError). --table and fspo_vs_grpo_docs.py answer each with one line.
MALFORMED_RESULTS = (OSError, ValueError, KeyError, StopIteration, TypeError, AttributeError, IndexError)


def print_table(results_path: Path, chart: Path | None) -> int:
    """``--table``: the tables (and with ``--chart`` the chart) of a results.json, from its runs alone."""
    try:
        measured = json.loads(results_path.read_text())
        results = measured["runs"]
        table = report(results, measured["steps"], measured["val_rows"])
    except MALFORMED_RESULTS as error:
        print(f"--table {results_path}: not a results.json of this script ({error})", file=sys.stderr)
        return 2
    if chart:
        plot(summarise(results), chart)
    print(table)
    return 0


def code_versions(results: list[dict]) -> str:
    """The commits the runs were trained on, with how many runs each: ``abc123 (6 runs), def456 (3 runs)``."""
    counts: dict[str, int] = {}
    for result in results:
        version = result.get("code_version", "unknown")
        counts[version] = counts.get(version, 0) + 1
    return ", ".join(f"{version} ({count} run{'s' if count > 1 else ''})" for version, count in counts.items())


def plot(summary: dict, path: Path) -> None:
    """One grouped bar chart: a group per rate, a bar per arm, error bars of one std; n/a draws no bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(11, 4))
    width = 0.8 / len(summary)
    for index, (name, stats) in enumerate(summary.items()):
        means = [stats[key][0] for key, _ in CHART_FIGURES]
        stds = [stats[key][1] for key, _ in CHART_FIGURES]
        positions = [x + index * width for x in range(len(CHART_FIGURES))]
        # A figure with no value (no closed reasoning to judge) gets no bar rather than a bar at 0.
        axis.bar(positions, means, width, yerr=[0.0 if math.isnan(s) else s for s in stds], capsize=3, label=name)
    axis.set_xticks([x + 0.4 - width / 2 for x in range(len(CHART_FIGURES))])
    axis.set_xticklabels([textwrap.fill(title, 24) for _, title in CHART_FIGURES], fontsize=8)
    axis.set_ylim(0, 1.05)
    axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.table:
        return print_table(args.table, args.chart)
    if args.seeds < 1 or args.steps < 1 or args.val_rows < 1:
        parser.error("--seeds, --steps and --val-rows must be at least 1")
    if args.model and not (args.model / "config.json").is_file():
        parser.error(f"--model {args.model}: not a Hugging Face model directory (no config.json)")
    if not validates_before_training(args.overrides):
        parser.error(
            "trainer.val_before_train=false: each seed's first run validates before training (the base model's figures); leave it out"
        )
    args.arms = list(dict.fromkeys([*(args.arms or DEFAULT_ARMS), *args.baseline]))
    args.output_dir = args.output_dir.resolve()
    args.output_dir.mkdir(parents=True, exist_ok=True)
    # Every run computes in float32 (the trainer, the rollout server and the verifiers inherit it).
    os.environ[DTYPE_ENV] = FLOAT32
    clock = time.time()
    if args.collect:
        results = collect_finished(args, clock)
        if not results:
            print(f"--collect: no finished run of these arms and seeds in {args.output_dir}", file=sys.stderr)
            return 2
    else:
        if args.model:
            model = args.model.resolve()
        else:
            from fspo.quickstart.smollm2 import convert_smollm2

            model = convert_smollm2()
        refusal = None if args.separate_ray else sweep_refusal(args.overrides)
        if refusal:
            say(clock, f"each run starts its own Ray: {refusal}")
        launcher = SweepLauncher(args.separate_ray or refusal is not None)
        results = []
        for seed in range(args.seeds):
            seed_results: list[dict] = []
            for arm in args.arms:
                seed_results.append(run_once(arm, seed, args, model, clock, list(seed_results), launcher))
            results += seed_results
    wall_s = time.time() - clock  # this invocation only; the runs' own seconds survive a resume
    run_s = sum(result["seconds"] for result in results)
    paired = comparisons(results)
    table = report(results, args.steps, args.val_rows, paired)
    (args.output_dir / "results.json").write_text(
        json.dumps(
            {
                "steps": args.steps,
                "seeds": args.seeds,
                "val_rows": args.val_rows,
                "arms": args.arms,
                "dtype": FLOAT32,
                "run_seconds": round(run_s, 1),
                "wall_seconds": round(wall_s, 1),
                "runs": results,
                "comparisons": paired,
                # Per answer (answer_metrics): each run's figures before and after training, and the paired differences.
                "per_answer": [
                    {"arm": r["arm"], "seed": r["seed"]}
                    | {when: None if r[when] is None else answer_metrics(r[when]) for when in ("before", "after")}
                    for r in results
                ],
                "answer_comparisons": answer_comparisons(results),
            },
            indent=2,
        )
    )
    (args.output_dir / "results.md").write_text(table + "\n")
    plot(summarise(results), args.output_dir / "fspo_vs_grpo.png")
    print("\n" + table)
    print(f"\nresults: {args.output_dir / 'results.json'}\nchart:   {args.output_dir / 'fspo_vs_grpo.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
