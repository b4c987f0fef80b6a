"""The pre-registered comparison's report (benchmarks/preregistration_shortcut.md), from its committed runs.

    python benchmarks/preregistered_report.py --store outputs/shortcut            # copy the sweep's finished runs in
    python benchmarks/preregistered_report.py --store outputs/rerun --reruns      # planned runs trained again
    python benchmarks/preregistered_report.py           # rewrite docs/results.md's section and README's Results
    python benchmarks/preregistered_report.py --check   # exit 1 when either differs

The runs live one file each in ``benchmarks/results/shortcut/<arm>/seed<N>.json`` (``fspo_vs_grpo.py``'s
``result.json``, as the sweep wrote it). Until every run of the plan is in, the section says how many are and
reports no figure: the plan allows no interim look. Then it reports the primary and secondary figures against the
plan, whatever their sign; README's Results shows the plan's figures and verdicts. :data:`PLAN` is the
pre-registration's; a test holds the two equal. A planned run trained again at a later commit
(``benchmarks/results/shortcut_reruns/``) shows whether the code changes between the runs changed a result: the
section says on how many questions the two runs' records agree.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from fspo.evaluation.intervals import t_interval
from fspo.utils.input_files import read_json

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks" / "results" / "shortcut"
# Planned runs trained again at a later commit, one file each as in RUNS: did the code they ran at change a result?
RERUNS = ROOT / "benchmarks" / "results" / "shortcut_reruns"
RESULTS_MD = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
README_SECTION = "## Results"
PREREGISTRATION = ROOT / "benchmarks" / "preregistration_shortcut.md"
SECTION = "## Pre-registered: FSPO against GRPO on the shortcut world"
UNTIL = "## What one update with the flip does, paired"  # the section after it

_spec = importlib.util.spec_from_file_location("fspo_vs_grpo_docs", Path(__file__).with_name("fspo_vs_grpo_docs.py"))
docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs)
bench = docs.bench  # fspo_vs_grpo.py, as the quickstart comparison's docs read it
generated_pages = docs.generated_pages


@dataclass(frozen=True)
class Plan:
    """What the pre-registration fixed before the first run."""

    arm: str = "fspo"
    baseline: str = "grpo"
    seeds: tuple[int, ...] = tuple(range(16))
    val_rows: int = 64
    world: str = "shortcut"
    overrides: tuple[str, ...] = ("fspo.verifier.abstain_non_claims=true",)
    primary: str = "flawed_positive_share"
    secondary: str = "supported_chain_accuracy"
    non_inferior: str = "exact_match"
    margin: float = -0.10
    budget: str = "SmolLM2-135M-Instruct in float32, 12 steps"  # the quickstart's, per run


PLAN = Plan()
# A result.json records its commit, not its date or CPU: both from the commits that stored the runs
# (git log benchmarks/results/shortcut/).
MEASURED = "2026-11-29 and 30 on 2 cores of an Intel Xeon held to AVX2 kernels, some runs beside other work"
# What changed between the pre-registration (862b466) and the last run's commit (cafb8a7), read off `git diff`:
# the plan fixes the judge, the verifier and the metrics; the trainer's changes are named too.
DEVIATIONS = (
    "Unchanged from the pre-registration (862b466) to cafb8a7: the world judge, the verifier, the metrics.",
    "The CPU trainer changed after 3 runs (from 3fdb9d0): a dead update skips its forward and backward, and the "
    "weights sync through shared memory (the same weights).",
)
TITLES = {
    "flawed_positive_share": "flawed-positive share",
    "supported_chain_accuracy": "supported-chain accuracy",
    "exact_match": "exact match",
    "steps_per_answer": "steps per answer",
    "non_claim_share": "share of steps that are no claim",
    "hallucinated_step_rate": "pooled hallucinated-step rate",
    "answer_f1": "answer F1",
}
# The per-answer figures, defined where the page first shows them (the quickstart's sections use them too).
DEFINITIONS = (
    "A flawed positive is a right answer holding a step the world judge contradicts; a supported chain, a right "
    "answer stating every gold hop as a supported step, none contradicted."
)
# The paired differences shown beside the plan's (each arm's steps per answer and non-claim share are in the levels).
DESCRIPTIVE = ["hallucinated_step_rate", "answer_f1"]


def run_path(arm: str, seed: int, folder: Path = RUNS) -> Path:
    return folder / arm / f"seed{seed}.json"


def plan_arguments(plan: Plan = PLAN) -> list[str]:
    """The pre-registered command's arguments to ``fspo_vs_grpo.py`` (steps and model at their defaults)."""
    return ["--world", plan.world, "--arms", plan.arm, plan.baseline, "--seeds", str(len(plan.seeds)),
            "--val-rows", str(plan.val_rows), *plan.overrides]  # fmt: skip


def planned(result: dict, plan: Plan = PLAN) -> str | None:
    """Why a stored run is not one the plan covers (None: it is): its arm and seed, and its whole configuration
    (``fspo_vs_grpo.run_config``: the quickstart's overrides, the arm's, the plan's, the sizes, the model)."""
    arm, seed = result.get("arm"), result.get("seed")
    if arm not in (plan.arm, plan.baseline) or seed not in plan.seeds:
        return f"arm {arm} seed {seed} is not in the plan"
    wanted = bench.run_config(arm, seed, bench._parser().parse_args(plan_arguments(plan)))
    config = result.get("config") or []
    if config != wanted:
        differing = sorted(set(config) ^ set(wanted)) or ["the order of its overrides"]
        return f"its configuration is not the plan's ({', '.join(differing[:4])})"
    return None


def stored_runs(folder: Path = RUNS, plan: Plan = PLAN) -> dict[tuple[str, int], dict]:
    """The plan's runs stored in ``folder``, by (arm, seed). A stored file the plan does not cover is an error."""
    runs = {}
    for arm in (plan.arm, plan.baseline):
        for seed in plan.seeds:
            path = run_path(arm, seed, folder)
            if path.is_file():
                result = read_json(path)
                held = (result.get("arm"), result.get("seed"))
                why = f"holds arm {held[0]} seed {held[1]}" if held != (arm, seed) else planned(result, plan)
                if why:
                    raise ValueError(f"{path}: {why}")
                runs[arm, seed] = result
    return runs


def store(sweep: Path, folder: Path = RUNS, plan: Plan = PLAN) -> list[Path]:
    """Copy the plan's finished runs from a sweep's output folder (``<arm>/seed<N>/result.json``) into ``folder``."""
    copied = []
    for arm in (plan.arm, plan.baseline):
        for seed in plan.seeds:
            source = sweep / arm / f"seed{seed}" / "result.json"
            if not source.is_file():
                continue
            why = planned(read_json(source), plan)
            if why:
                raise ValueError(f"{source}: {why}")
            target = run_path(arm, seed, folder)
            if target.is_file() and target.read_bytes() != source.read_bytes():
                raise ValueError(f"{target} is stored already and differs from {source}: a run is stored once")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            copied.append(target)
    return copied


def stored_reruns(runs: dict[tuple[str, int], dict], folder: Path = RERUNS, plan: Plan = PLAN) -> list[dict]:
    """The reruns in ``folder`` (``<arm>/seed<N>.json``): each a planned run whose first run is stored."""
    reruns = []
    for path in sorted(folder.glob("*/seed*.json")):
        rerun = read_json(path)
        why = planned(rerun, plan)
        if why is None and (rerun["arm"], rerun["seed"]) not in runs:
            why = "its first run is not stored"
        if why:
            raise ValueError(f"{path}: {why}")
        reruns.append(rerun)
    return reruns


def rerun_line(first: dict, rerun: dict) -> str:
    """On how many held-out questions a rerun recorded after training what its first run did."""
    theirs, mine = first["after"]["per_question"], rerun["after"]["per_question"]
    same = sum(mine.get(question) == record for question, record in theirs.items())
    return (
        f"Rerun: {rerun['arm'].upper()} seed {rerun['seed']} ({first.get('code_version', 'unknown')}, again at "
        f"{rerun.get('code_version', 'unknown')}): the same record on {same} of {len(theirs)} questions"
        + (" (the same run)." if same == len(theirs) == len(mine) else ".")
    )


def figure(run: dict, key: str) -> float | None:
    """A run's figure after training: a per-answer one (``answer_metrics``) or, for F1, the run's own."""
    after = run["after"]
    return after.get("answer_f1") if key == "answer_f1" else bench.answer_metrics(after)[key]


def differences(runs: dict[tuple[str, int], dict], key: str, plan: Plan = PLAN) -> dict[int, float]:
    """Per seed: the arm's figure after training minus the baseline's (seeds where either lacks it left out)."""
    out = {}
    for seed in plan.seeds:
        mine, theirs = figure(runs[plan.arm, seed], key), figure(runs[plan.baseline, seed], key)
        if mine is not None and theirs is not None:
            out[seed] = mine - theirs
    return out


def _signed(value: float) -> str:
    return f"{value:+.3f}"


def comparison_row(runs, key: str, role: str, plan: Plan = PLAN) -> tuple[str, float, float, float]:
    """(table row, mean, low, high) of the paired difference in ``key``; ``role``: what the plan makes of it."""
    per_seed = differences(runs, key, plan)
    mean, low, high, n = t_interval(list(per_seed.values()))
    above = sum(value > 0 for value in per_seed.values())
    below = sum(value < 0 for value in per_seed.values())
    row = (
        f"| {TITLES[key]} | {role} | {_signed(mean)} | [{_signed(low)}, {_signed(high)}] | {n} | "
        f"{above} / {n - above - below} / {below} |"
    )
    return row, mean, low, high


def section(runs: dict[tuple[str, int], dict], plan: Plan = PLAN, reruns: list[dict] = ()) -> str:
    """The section of docs/results.md: progress until every planned run is in, then the result against the plan."""
    lines = [SECTION, "", *_plan_lines(plan, "../benchmarks/preregistration_shortcut.md")]
    if len(runs) < 2 * len(plan.seeds):
        return "\n".join(lines + ["", *_progress(runs, plan)])
    minutes = sorted(run["seconds"] / 60 for run in runs.values())
    split = [
        s for s in plan.seeds if runs[plan.arm, s].get("code_version") != runs[plan.baseline, s].get("code_version")
    ]
    lines += [
        "",
        f"Measured {MEASURED}, at code {bench.code_versions(list(runs.values()))}: "
        f"{minutes[len(minutes) // 2]:.1f} minutes a run (median; {minutes[0]:.1f}-{minutes[-1]:.1f}).",
        *DEVIATIONS,
    ]
    if split:
        lines.append(
            f"Seed{'s' if len(split) > 1 else ''} {', '.join(map(str, split))}: the arms ran at different commits."
        )
    lines += [rerun_line(runs[rerun["arm"], rerun["seed"]], rerun) for rerun in reruns]
    planned_rows, descriptive_rows, bullets = _result(runs, plan)
    lines += [
        "",
        f"Per answer after training ({plan.val_rows} questions a seed), mean ± std over runs; the base model is each "
        "seed's validation before training:",
        "",
        bench.answer_table(list(runs.values())).split("\n\n")[1],
        "",
        f"Paired over seeds, {plan.arm.upper()} − {plan.baseline.upper()} after training, 95% t interval; "
        "seeds with the difference above / equal to / below 0:",
        "",
        *TABLE_HEAD,
        *planned_rows,
        *descriptive_rows,
        "",
        *bullets,
    ]
    return "\n".join(lines)


def readme_section(runs: dict[tuple[str, int], dict], plan: Plan = PLAN) -> str:
    """README's Results: the pre-registered comparison's planned figures and verdicts, or its progress."""
    lines = ["## Results", "", *_plan_lines(plan, "benchmarks/preregistration_shortcut.md"), ""]
    if len(runs) < 2 * len(plan.seeds):
        lines += _progress(runs, plan)
    else:
        planned_rows, _, bullets = _result(runs, plan)
        lines += [
            f"{plan.arm.upper()} − {plan.baseline.upper()} after training, paired over seeds:",
            "",
            *TABLE_HEAD,
            *planned_rows,
            "",
            *bullets,
        ]
    lines += [
        "",
        "Each figure's date and commit, the levels, the quickstart world's comparisons, the other methods and the "
        "flip's one-update effect: [docs/results.md](docs/results.md).",
    ]
    return "\n".join(lines)


TABLE_HEAD = (
    "| figure | in the plan | mean | 95% interval | seeds | above / equal / below |",
    "|---|---|---|---|---|---|",
)


def _plan_lines(plan: Plan, link: str) -> list[str]:
    return [
        f"[Plan]({link}), committed before the first run: {plan.arm.upper()} and {plan.baseline.upper()} on the "
        f"{plan.world} world (a wrong chain can reach the right answer), {len(plan.seeds)} seeds, {plan.val_rows} "
        f"held-out questions a seed; the quickstart's budget: {plan.budget}.",
        DEFINITIONS,
    ]


def _progress(runs: dict[tuple[str, int], dict], plan: Plan) -> list[str]:
    return [
        f"Runs finished and committed: {len(runs)} of {2 * len(plan.seeds)}"
        + (" (`benchmarks/results/shortcut/`)." if runs else "."),
        "No figure is reported before all are in: the plan allows no interim look.",
    ]


def _result(runs: dict[tuple[str, int], dict], plan: Plan) -> tuple[list[str], list[str], list[str]]:
    """The paired differences as table rows (the plan's, the descriptive ones) and the verdicts against the plan."""
    for key in (plan.primary, plan.secondary, plan.non_inferior):
        missing = sorted(set(plan.seeds) - set(differences(runs, key, plan)))
        if missing:  # the plan: no run drops out of the compared figures
            raise ValueError(f"{TITLES[key]} is missing for seeds {missing}; every planned run must have it")
    collapsed = [
        run
        for run in sorted(runs.values(), key=lambda run: (run["arm"] != plan.arm, run["seed"]))
        if docs.stopped_writing(run)
    ]
    primary, p_mean, p_low, p_high = comparison_row(runs, plan.primary, "primary", plan)
    secondary, _, s_low, s_high = comparison_row(runs, plan.secondary, "secondary", plan)
    non_inferior, _, n_low, _ = comparison_row(runs, plan.non_inferior, "secondary: non-inferiority", plan)
    descriptive = [comparison_row(runs, key, "descriptive", plan)[0] for key in DESCRIPTIVE]
    verdict = (
        "no difference shown: the interval includes 0"
        if p_low <= 0 <= p_high
        else f"{plan.arm.upper()} {'lower' if p_mean < 0 else 'higher'}: the interval excludes 0"
    )
    bullets = [
        f"- Primary, {TITLES[plan.primary]}: {verdict}."
        + (" An answer without a step holds no flawed positive." if collapsed else ""),
        f"- Secondary, {TITLES[plan.secondary]}: "
        + ("the interval includes 0." if s_low <= 0 <= s_high else "the interval excludes 0."),
        f"- {TITLES[plan.non_inferior].capitalize()}, non-inferiority at a margin of {plan.margin:+.2f}: "
        + (
            f"shown (the interval's lower end {n_low:+.3f} is above it)."
            if n_low > plan.margin
            else f"not shown (the interval's lower end {n_low:+.3f} is not above it)."
        ),
    ]
    if collapsed:
        bullets.append(
            f"- Stopped writing reasoning (under one step in {docs.COLLAPSE_ANSWERS_PER_STEP} answers): "
            f"{docs.stopped_reasoning(collapsed)}."
        )
        # As the quickstart comparison's section shows it: how much of the primary rests on those runs.
        left_out = sorted({run["seed"] for run in collapsed})
        rest = [value for seed, value in differences(runs, plan.primary, plan).items() if seed not in left_out]
        if len(rest) > 1:
            mean, low, high, n = t_interval(rest)
            bullets.append(
                f"- Not in the plan: without seed{'s' if len(left_out) > 1 else ''} "
                f"{', '.join(map(str, left_out))}, {plan.arm.upper()} − {plan.baseline.upper()} in "
                f"{TITLES[plan.primary]} is {_signed(mean)}, 95% interval [{_signed(low)}, {_signed(high)}] ({n} seeds)."
            )
    return [primary, secondary, non_inferior], descriptive, bullets


def written(
    results_md: str, readme: str, runs: dict[tuple[str, int], dict], reruns: list[dict] = ()
) -> tuple[str, str]:
    """docs/results.md with the section rewritten up to :data:`UNTIL`, and README.md with its Results."""
    start, end = generated_pages.section_bounds(results_md, SECTION, UNTIL, "docs/results.md")
    results_md = results_md[:start] + section(runs, reruns=reruns).rstrip("\n") + "\n\n" + results_md[end:]
    start, end = generated_pages.section_bounds(readme, README_SECTION, "\n## ", "README.md")
    end += 1
    return results_md, readme[:start] + readme_section(runs) + "\n\n" + readme[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, help="a sweep's --output-dir: copy its finished planned runs in first")
    parser.add_argument(
        "--reruns", action="store_true", help="with --store: the sweep trained planned runs again; store them apart"
    )
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a page differs")
    args = parser.parse_args(argv)
    try:
        if args.store:
            folder = RERUNS if args.reruns else RUNS
            copied = store(args.store, folder)
            print(f"stored {len(copied)} runs in {folder.relative_to(ROOT)}")
        runs = stored_runs()
        pages = {RESULTS_MD: RESULTS_MD.read_text(), README: README.read_text()}
        new = dict(zip(pages, written(*pages.values(), runs, stored_reruns(runs))))
    except ValueError as error:
        print(f"preregistered_report: {error}", file=sys.stderr)
        return 2
    return generated_pages.write_or_check(
        new,
        ".venv/bin/python benchmarks/preregistered_report.py",
        args.check,
        f" ({len(runs)} of {2 * len(PLAN.seeds)} runs)",
    )


if __name__ == "__main__":
    sys.exit(main())
