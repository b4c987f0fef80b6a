"""Writes the comparison's prose and tables into the docs from a results.json of ``fspo_vs_grpo.py``.

    python benchmarks/fspo_vs_grpo_docs.py            # rewrite docs/results.md's three sections and README's Results
    python benchmarks/fspo_vs_grpo_docs.py --check    # exit 1 when the docs differ from what it would write

Every figure in those sections comes from the results file, so a new measurement changes the docs in one
command and a test (``--check``) catches docs edited by hand.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from pathlib import Path

from fspo.evaluation.intervals import t_interval, t_quantile

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "fspo_vs_grpo.json"
RESULTS_MD = ROOT / "docs" / "results.md"
README = ROOT / "README.md"

_spec = importlib.util.spec_from_file_location("fspo_vs_grpo", Path(__file__).with_name("fspo_vs_grpo.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

NAMES = {
    "fspo": "FSPO",
    "grpo": "GRPO",
    "grpo_factuality_reward": "GRPO with factuality in the reward",
    "knowrl": "KnowRL",
    "fapo": "FAPO",
    "fdpo": "F-DPO",
}
OTHER_ARMS = ["grpo_factuality_reward", "knowrl", "fapo", "fdpo"]
FIGURE_NAMES = {"hallucinated_step_rate": "hallucinated-step rate", "answer_f1": "answer F1"}
# results.json records each run's commit but not its date or CPU: both from the commits that added the runs
# (git log benchmarks/results/fspo_vs_grpo.json). Update with the next measurement.
MEASURED = "2026-11-26 on 2 cores of a shared CPU machine whose model was not recorded"
# Fewer closed reasoning steps than one in this many answers: the policy stopped writing reasoning.
COLLAPSE_ANSWERS_PER_STEP = 4
# The rule: the comparison is finished when the interval excludes 0 or this many seeds are in.
SEEDS_PLANNED = 8
# A held-out answer is right at F1 1 (the per-question figures keep F1, not the scorer's exact match).
RIGHT_F1 = 1.0

FSPO_SECTION = "## FSPO against GRPO on the quickstart"
OTHERS_SECTION = "## The other methods on the quickstart"
FLAWED_SECTION = "## Flawed positives in the quickstart's world"
NEXT_SECTION = "## What one update with the flip does, paired"
METHODS_DEPARTURES = "[methods](methods.md#departures-from-the-authors-code)"


def signed(value: float) -> str:
    return f"{value:+.3f}".replace("-", "−")


def seed_range(seeds: list[int]) -> str:
    return f"{seeds[0]}–{seeds[-1]}" if len(seeds) > 1 else f"{seeds[0]}"


def interval(comparison: dict) -> str:
    if math.isnan(comparison["mean"]):
        return "n/a (no seed with both figures)"
    if math.isnan(comparison["low"]):
        return f"{signed(comparison['mean'])} (one seed: no interval)"
    return f"{signed(comparison['mean'])}, 95% CI [{signed(comparison['low'])}, {signed(comparison['high'])}]"


def short_interval(comparison: dict) -> str:
    """A table cell: ``−0.192 [−0.520, +0.137] (7)``, the seeds paired in parentheses."""
    if math.isnan(comparison["low"]):
        return f"{interval(comparison)} ({comparison['seeds']})"
    low, high = signed(comparison["low"]), signed(comparison["high"])
    return f"{signed(comparison['mean'])} [{low}, {high}] ({comparison['seeds']})"


def spans_zero(comparison: dict) -> bool:
    """No interval, or one that holds 0: the difference is not shown."""
    return not bench.excludes_zero(comparison)


def stopped_reasoning(runs: list[dict]) -> str:
    """Collapsed runs by arm: ``GRPO seed 1 (2 steps in 32 answers), seed 5 (0 steps in 32 answers)``."""
    by_arm: dict[str, list[str]] = {}
    for run in runs:
        after = run["after"]
        by_arm.setdefault(NAMES[run["arm"]], []).append(
            f"seed {run['seed']} ({after['steps']} steps in {after['answers']} answers)"
        )
    return "; ".join(f"{arm} {', '.join(seeds)}" for arm, seeds in by_arm.items())


def flawed_positives(per_question: dict) -> tuple[int, int, int]:
    """(right answers, those holding a contradicted step, those with no judged step) of one validation pass,
    from its per-question [contradicted, claims, F1, unseen] figures."""
    right = [figures for figures in per_question.values() if figures[2] == RIGHT_F1]
    return len(right), sum(figures[0] > 0 for figures in right), sum(figures[1] == 0 for figures in right)


class Comparison:
    """A results.json read for the docs: its runs, tables and paired differences."""

    def __init__(self, measured: dict):
        self.measured = measured
        self.runs = measured["runs"]
        self.paired = bench.comparisons(self.runs)
        self.tables = bench.report(self.runs, measured["steps"], measured["val_rows"], self.paired).split("\n\n")
        self.summary = bench.summarise(self.runs)

    def seeds(self, arm: str) -> list[int]:
        return sorted(run["seed"] for run in self.runs if run["arm"] == arm)

    def other_arms(self) -> list[str]:
        return [arm for arm in OTHER_ARMS if self.seeds(arm)]

    def other_seeds(self) -> list[int]:
        return sorted({seed for arm in self.other_arms() for seed in self.seeds(arm)})

    def difference(self, arm: str, baseline: str, figure: str) -> dict:
        return next(c for c in self.paired if c["arm"] == arm and c["baseline"] == baseline and c["figure"] == figure)

    def pairs(self) -> list[tuple[str, str]]:
        """(arm, baseline) of each difference the docs show: FSPO against GRPO, each other method against GRPO,
        and FSPO against each but GRPO with factuality in the reward (an ablation of FSPO's reward)."""
        return [("fspo", "grpo")] + [
            pair
            for arm in self.other_arms()
            for pair in [(arm, "grpo")] + ([] if arm == "grpo_factuality_reward" else [("fspo", arm)])
        ]

    def other_intervals_excluding_zero(self) -> str:
        """The other methods' differences whose interval excludes 0, named ("F-DPO − GRPO in answer F1"), or ""."""
        return "; ".join(
            f"{NAMES[a]} − {NAMES[b]} in {FIGURE_NAMES[figure]}"
            for a, b in self.pairs()[1:]
            for figure in FIGURE_NAMES
            if not spans_zero(self.difference(a, b, figure))
        )

    def collapsed(self, arms: tuple[str, ...] | None = None) -> list[dict]:
        """Runs whose policy stopped writing reasoning, by seed then arm."""
        return [
            run
            for run in sorted(self.runs, key=lambda run: (run["seed"], list(NAMES).index(run["arm"])))
            if (arms is None or run["arm"] in arms)
            and run["after"]["answers"]
            and run["after"]["steps"] * COLLAPSE_ANSWERS_PER_STEP < run["after"]["answers"]
        ]

    def same_answers(self) -> list[tuple[dict, dict]]:
        """Pairs (other arm's run, FSPO's or GRPO's run of its seed) with identical figures on every question."""

        def figures(run: dict) -> dict:
            return {key: run["after"].get(key) for key in ("answer_f1", "steps", "answers", "per_question")}

        return [
            (run, base)
            for run in self.runs
            if run["arm"] in OTHER_ARMS
            for base in self.runs
            if base["arm"] in ("grpo", "fspo") and base["seed"] == run["seed"] and figures(base) == figures(run)
        ]

    def flawed(self, arm: str) -> tuple[int, int, int]:
        """:func:`flawed_positives` summed over an arm's runs after training (``base model``: before, once a seed)."""
        if arm == "base model":
            first = next(run["arm"] for run in self.runs if run["before"] is not None)
            passes = [run["before"] for run in self.runs if run["arm"] == first]
        else:
            passes = [run["after"] for run in self.runs if run["arm"] == arm]
        counts = [flawed_positives(figures.get("per_question", {})) for figures in passes]
        return tuple(sum(column) for column in zip(*counts, strict=True)) if counts else (0, 0, 0)

    def flawed_share_difference(self, arm: str, baseline: str) -> tuple[float, float, float, int]:
        """``arm`` − ``baseline`` in the share of right answers holding a contradicted step: mean and 95% t
        interval over the seeds where both runs have a right answer."""
        shares = {}
        for run in self.runs:
            right, flawed, _ = flawed_positives(run["after"].get("per_question", {}))
            if right:
                shares[(run["arm"], run["seed"])] = flawed / right
        seeds = sorted({seed for a, seed in shares if a == arm} & {seed for b, seed in shares if b == baseline})
        return t_interval([shares[(arm, seed)] - shares[(baseline, seed)] for seed in seeds])


def fspo_section(c: Comparison) -> str:
    fspo_seeds = c.seeds("fspo")
    rate = c.difference("fspo", "grpo", "hallucinated_step_rate")
    live = [run["live_steps"][0] for run in c.runs if run["arm"] in ("fspo", "grpo") and run.get("live_steps")]
    live_mean, live_low, live_high, _ = t_interval(live)
    finished = len(fspo_seeds) >= SEEDS_PLANNED or not spans_zero(rate)
    copied = {arm: c.summary[arm]["copy_rate"][0] for arm in ("fspo", "grpo")}

    lines = [
        FSPO_SECTION,
        "",
        f"Plan: `.venv/bin/python benchmarks/fspo_vs_grpo.py --arms fspo grpo --seeds {SEEDS_PLANNED}` trains each "
        f"arm at the [quickstart](quickstart.md)'s settings, {c.measured['steps']} steps in {c.measured['dtype']}; "
        f"the world judge reads the greedy answers to {c.measured['val_rows']} held-out questions.",
        "The arms share each seed's held-out questions, data order and rollout sampling seeds.",
        f"Seeds {seed_range(fspo_seeds)} are finished."
        if len(fspo_seeds) >= SEEDS_PLANNED
        else f"Seeds {seed_range(fspo_seeds)} of the {SEEDS_PLANNED} are finished; the same command resumes at seed "
        f"{len(fspo_seeds)}, because finished runs stay in `outputs/fspo_vs_grpo/`.",
        f"Measured {MEASURED}, at code {bench.code_versions(c.runs)}.",
        "`benchmarks/fspo_vs_grpo_docs.py` writes these sections from `benchmarks/results/fspo_vs_grpo.json`, "
        "which holds each run's time (`seconds`).",
        "",
        "After training, mean ± std over each arm's runs (one per seed):",
        "",
        c.tables[1],
        "",
        "Paired differences after training (mean, 95% paired t interval, seeds):",
        "",
        "| difference | hallucinated-step rate | answer F1 |",
        "|---|---|---|",
        *(
            f"| {a} − {b} | {short_interval(c.difference(a, b, 'hallucinated_step_rate'))} | "
            f"{short_interval(c.difference(a, b, 'answer_f1'))} |"
            for a, b in c.pairs()
        ),
        "",
    ]
    paired_note = (
        "" if rate["seeds"] == len(fspo_seeds) else f" ({rate['seeds']} of them paired in the hallucinated-step rate)"
    )
    if not spans_zero(rate):
        lines.append(
            f"**On {len(fspo_seeds)} seeds FSPO's hallucinated-step rate is below GRPO's: the 95% interval excludes 0.**"
        )
    elif finished:
        lines.append(
            f"**On {len(fspo_seeds)} seeds the 95% interval of FSPO − GRPO in the hallucinated-step rate "
            "spans 0: this benchmark does not show that FSPO lowers it.**"
        )
    else:
        lines.append(f"**With {len(fspo_seeds)} of {SEEDS_PLANNED} seeds{paired_note} the intervals still span 0.**")
    lines.append("")
    if rate["per_seed"] and all(value < 0 for value in rate["per_seed"].values()):
        lines.append("- FSPO's hallucinated-step rate is the lower on every seed.")
    collapsed = c.collapsed(("fspo", "grpo"))
    if collapsed:
        lines.append(
            f"- Stopped writing reasoning: {stopped_reasoning(collapsed)}; a run with no step has no "
            "hallucinated-step rate to pair."
        )
    collapsed_seeds = {str(run["seed"]) for run in collapsed}
    rest = [value for seed, value in rate["per_seed"].items() if str(seed) not in collapsed_seeds]
    if collapsed_seeds and len(rest) > 1:
        mean, low, high, n = t_interval(rest)
        lines.append(
            f"- Without seed{'s' if len(collapsed_seeds) > 1 else ''} "
            f"{', '.join(sorted(collapsed_seeds, key=int))}, FSPO − GRPO in the hallucinated-step rate is "
            f"{signed(mean)}, 95% CI [{signed(low)}, {signed(high)}] ({n} seeds)."
        )
    lines += [
        f"- Steps with a gradient: {sum(live)} of {c.measured['steps'] * len(live)} over FSPO's and GRPO's "
        f"{len(live)} runs, {live_mean:.1f} of {c.measured['steps']} a run, 95% CI [{live_low:.1f}, {live_high:.1f}].",
        # Why FSPO may answer worse: only the mechanism and the figures this file holds.
        "- At `lexical` threshold 1.0 a sentence copied from the evidence is labelled +1 and a step joining two hops "
        "in its own words −1, so the flip pays copying.",
        f"  FSPO's policies copy more of their steps than GRPO's ({copied['fspo']:.3f} against "
        f"{copied['grpo']:.3f}); whether that costs F1 was not measured.",
    ]
    return "\n".join(lines)


def others_section(c: Comparison) -> str:
    others, seeds = c.other_arms(), c.other_seeds()
    excluding_zero = c.other_intervals_excluding_zero()
    lines = [
        OTHERS_SECTION,
        "",
        f"Plan: `.venv/bin/python benchmarks/fspo_vs_grpo.py --arms {' '.join(others)} --seeds {len(seeds)}` trains "
        "each as [methods](methods.md) defines it, on the same verifier, data, seeds and budget.",
        "Measured on the same date, machine and code as above.",
        "Their figures and paired differences are in the tables [above](#fspo-against-grpo-on-the-quickstart), "
        + (
            f"wide with {len(seeds)} seeds (t(0.975, {len(seeds) - 1}) = {t_quantile(0.975, len(seeds) - 1):.3f})."
            if len(seeds) > 1
            else f"without intervals on {len(seeds)} seed."
        ),
        f"Intervals that exclude 0: {excluding_zero}."
        if excluding_zero
        else "No interval of theirs excludes 0: none of them can be ranked against GRPO or FSPO.",
        "",
    ]
    for run, base in c.same_answers():
        lines.append(
            f"- {NAMES[run['arm']]}'s seed-{run['seed']} run answered every held-out question as "
            f"{NAMES[base['arm']]}'s did."
        )
    collapsed = c.collapsed(tuple(others))
    if collapsed:
        lines.append(f"- Stopped writing reasoning: {stopped_reasoning(collapsed)}.")
    if "knowrl" in others:
        lines.append(
            f"- KnowRL's factuality term is ~0 at these answer lengths ({METHODS_DEPARTURES}): its arm trains on the "
            "outcome and refusal grades."
        )
    if "fdpo" in others:
        lines.append(
            "- F-DPO's runs flipped misordered sampled pairs (`--flip-real-pairs`, no longer the default): not the "
            f"authors' pair mix ({METHODS_DEPARTURES})."
        )
    return "\n".join(lines)


def flawed_section(c: Comparison) -> str:
    arms = ["base model", "fspo", "grpo", *c.other_arms()]
    mean, low, high, n = c.flawed_share_difference("fspo", "grpo")
    lines = [
        FLAWED_SECTION,
        "",
        f"A flawed positive is a right answer (F1 {RIGHT_F1:g}) holding a step the world judge contradicts.",
        "Over the held-out answers of the runs above:",
        "",
        "| arm | right answers | with a contradicted step | share | with no judged step |",
        "|---|---|---|---|---|",
    ]
    for arm in arms:
        right, flawed, unjudged = c.flawed(arm)
        share = f"{flawed / right:.3f}" if right else "n/a"
        lines.append(f"| {arm} | {right} | {flawed} | {share} | {unjudged} |")
    lines += [
        "",
        f"FSPO − GRPO in the share, paired over {n} seeds: {signed(mean)}, 95% CI [{signed(low)}, {signed(high)}].",
        "A right answer with no judged step counts as not flawed.",
        "",
        "`fspo quickstart --world shortcut` builds a test bed where a wrong chain still reaches the right answer.",
    ]
    return "\n".join(lines)


def readme_section(c: Comparison) -> str:
    fspo_seeds = c.seeds("fspo")
    rate = c.difference("fspo", "grpo", "hallucinated_step_rate")
    f1 = c.difference("fspo", "grpo", "answer_f1")
    so_far = "" if len(fspo_seeds) >= SEEDS_PLANNED else " so far"
    if spans_zero(rate) and spans_zero(f1):
        verdict = "Both intervals span 0"
    elif not spans_zero(rate):
        verdict = "The hallucinated-step interval excludes 0"
    else:
        verdict = "The F1 interval excludes 0"
    if len(fspo_seeds) >= SEEDS_PLANNED:
        verdict += f" with {len(fspo_seeds)} seeds" + (
            ": this benchmark does not show FSPO lowering the judge's hallucinated-step rate."
            if spans_zero(rate)
            else "."
        )
    else:
        verdict += f" with {len(fspo_seeds)} of {SEEDS_PLANNED} seeds; the rest of the seeds follow."
    lines = [
        "## Results",
        "",
        f"`.venv/bin/python benchmarks/fspo_vs_grpo.py --arms fspo grpo --seeds {SEEDS_PLANNED}` on the quickstart, "
        f"seeds {seed_range(fspo_seeds)}{so_far}, {c.measured['dtype']}; {c.measured['val_rows']} held-out questions, "
        f"greedy, after {c.measured['steps']} training steps; mean ± std over each arm's runs (one per seed):",
        "",
        c.tables[1],
        "",
        f"FSPO − GRPO, paired over seeds: hallucinated-step rate {interval(rate)}; answer F1 {interval(f1)}.",
        verdict,
    ]
    if c.other_arms():
        excluding_zero = c.other_intervals_excluding_zero()
        lines.append(
            f"The other methods ran on seeds {seed_range(c.other_seeds())} on the same verifier; "
            + (
                f"the paired intervals that exclude 0: {excluding_zero}."
                if excluding_zero
                else "none of their paired intervals excludes 0."
            )
        )
    lines += [
        "",
        "Every paired difference, the flawed positives, the flip's one-update effect, and each measurement's plan, "
        "date and commit: [docs/results.md](docs/results.md).",
    ]
    return "\n".join(lines)


def replace_section(text: str, heading: str, new: str, until: str | None = None) -> str:
    """``text`` with the section from ``heading`` up to ``until`` (default: the next ``## `` heading or the
    end) replaced by ``new``."""
    start = text.index(heading + "\n")
    end = text.index(until, start) if until else text.find("\n## ", start + len(heading))
    end = len(text) if end == -1 else end + (0 if until else 1)
    return text[:start] + new.rstrip("\n") + "\n\n" + text[end:].lstrip("\n")


def written_docs(measured: dict, results_md: str, readme: str) -> tuple[str, str]:
    """docs/results.md and README.md with their comparison sections written from ``measured``."""
    c = Comparison(measured)
    sections = [fspo_section(c), *([others_section(c)] if c.other_arms() else []), flawed_section(c)]
    results_md = replace_section(results_md, FSPO_SECTION, "\n\n".join(sections), until=NEXT_SECTION)
    readme = replace_section(readme, "## Results", readme_section(c))
    return results_md.rstrip("\n") + "\n", readme


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="a results.json of fspo_vs_grpo.py")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when the docs differ")
    args = parser.parse_args(argv)
    try:
        measured = json.loads(args.results.read_text())
        new_results_md, new_readme = written_docs(measured, RESULTS_MD.read_text(), README.read_text())
    except bench.MALFORMED_RESULTS as error:
        print(f"--results {args.results}: not a results.json of fspo_vs_grpo.py ({error!r})", file=sys.stderr)
        return 2
    stale = [path for path, new in ((RESULTS_MD, new_results_md), (README, new_readme)) if path.read_text() != new]
    if args.check:
        for path in stale:
            print(
                f"{path.relative_to(ROOT)} differs from `.venv/bin/python benchmarks/fspo_vs_grpo_docs.py`",
                file=sys.stderr,
            )
        return 1 if stale else 0
    for path, new in ((RESULTS_MD, new_results_md), (README, new_readme)):
        path.write_text(new)
    print(f"wrote {RESULTS_MD.relative_to(ROOT)}, {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
