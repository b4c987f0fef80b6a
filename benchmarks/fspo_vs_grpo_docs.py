"""Writes the comparison's prose and tables into the docs from a results.json of ``fspo_vs_grpo.py``.

    python benchmarks/fspo_vs_grpo_docs.py            # rewrite docs/results.md's two sections and README's Results
    python benchmarks/fspo_vs_grpo_docs.py --check    # exit 1 when the docs differ from what it would write

Every figure in those sections comes from the results file, so a new measurement changes the docs in one
command and a test (``--check``) catches docs edited by hand. The chart is redrawn only without ``--check``.
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
CHART = ROOT / "docs" / "fspo_vs_grpo.png"

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
WHAT_A_RUN_DOES = {
    "grpo_factuality_reward": "GRPO's advantages, outcome + 0.5 × mean step label as the reward, no flip",
    "knowrl": "KnowRL's reward on exact-match correctness",
    "fapo": "FAPO's flawed-positive penalty on exact-match correctness",
    "fdpo": "sampling the base model on the training questions, pairs labelled by the training verifier, "
    "`fspo fdpo train`, then one RL step whose update is not used, for the validation",
}
OTHER_ARMS = ["grpo_factuality_reward", "knowrl", "fapo", "fdpo"]
FIGURE_NAMES = {"hallucinated_step_rate": "hallucinated-step rate", "answer_f1": "answer F1"}
# Runs that shared the machine with other work: their minutes are not the benchmark's cost.
BESIDE_OTHER_WORK = {("fspo", 0)}
# Fewer closed reasoning steps than one in this many answers: the policy stopped writing reasoning.
COLLAPSE_ANSWERS_PER_STEP = 4
# The rule: the comparison is finished when the interval excludes 0 or this many seeds are in.
SEEDS_PLANNED = 8

FSPO_SECTION = "## FSPO against GRPO on the quickstart"
NEXT_SECTION = "## What one update with the flip does, paired"
OTHERS_SECTION = "## The other methods on the quickstart"


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


def per_seed(comparison: dict) -> str:
    values = sorted(comparison["per_seed"].items(), key=lambda item: int(item[0]))
    return ", ".join(signed(value) for _, value in values) or "none"


def spans_zero(comparison: dict) -> bool:
    """No interval, or one that holds 0: the difference is not shown."""
    return not bench.excludes_zero(comparison)


class Comparison:
    """A results.json read for the docs: its runs, tables and paired differences."""

    def __init__(self, measured: dict):
        self.measured = measured
        self.runs = measured["runs"]
        self.paired = bench.comparisons(self.runs)
        self.tables = bench.report(self.runs, measured["steps"], measured["val_rows"], self.paired).split("\n\n")

    def seeds(self, arm: str) -> list[int]:
        return sorted(run["seed"] for run in self.runs if run["arm"] == arm)

    def other_arms(self) -> list[str]:
        return [arm for arm in OTHER_ARMS if self.seeds(arm)]

    def other_seeds(self) -> list[int]:
        return sorted({seed for arm in self.other_arms() for seed in self.seeds(arm)})

    def difference(self, arm: str, baseline: str, figure: str) -> dict:
        return next(c for c in self.paired if c["arm"] == arm and c["baseline"] == baseline and c["figure"] == figure)

    def other_pairs(self) -> list[tuple[str, str]]:
        """(arm, baseline) of each difference the docs show for the other methods: each against GRPO, and FSPO
        against each but GRPO with factuality in the reward (an ablation of FSPO's reward, paired with GRPO only)."""
        return [
            pair
            for arm in self.other_arms()
            for pair in [(arm, "grpo")] + ([] if arm == "grpo_factuality_reward" else [("fspo", arm)])
        ]

    def other_intervals_excluding_zero(self) -> str:
        """The other methods' differences whose interval excludes 0, named ("F-DPO − GRPO in answer F1"), or ""."""
        return "; ".join(
            f"{NAMES[a]} − {NAMES[b]} in {FIGURE_NAMES[figure]}"
            for a, b in self.other_pairs()
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


def fspo_section(c: Comparison) -> str:
    fspo_seeds = c.seeds("fspo")
    rate = c.difference("fspo", "grpo", "hallucinated_step_rate")
    f1 = c.difference("fspo", "grpo", "answer_f1")
    main_runs = [run for run in c.runs if run["arm"] in ("fspo", "grpo")]
    minutes = sorted(run["seconds"] / 60 for run in main_runs if (run["arm"], run["seed"]) not in BESIDE_OTHER_WORK)
    beside = [run for run in main_runs if (run["arm"], run["seed"]) in BESIDE_OTHER_WORK]
    live = [run["live_steps"][0] for run in main_runs if run.get("live_steps")]
    live_mean, live_low, live_high, _ = t_interval(live)
    finished = len(fspo_seeds) >= SEEDS_PLANNED or not spans_zero(rate)

    lines = [
        FSPO_SECTION,
        "",
        f"`.venv/bin/python benchmarks/fspo_vs_grpo.py --arms fspo grpo --seeds {SEEDS_PLANNED}` trains FSPO and GRPO at the "
        f"quickstart's settings, {c.measured['steps']} steps each, in {c.measured['dtype']}.",
        "Those are today's: the worked example as a chat turn, and `lexical` scoring each clause against its best "
        "evidence sentence.",
        f"It judges the greedy answers on {c.measured['val_rows']} held-out questions per seed with the world judge.",
        "A seed fixes the held-out questions, the data order and every rollout's sampling seed; every arm shares it.",
        f"Seeds {seed_range(fspo_seeds)} are finished."
        if len(fspo_seeds) >= SEEDS_PLANNED
        else f"Seeds {seed_range(fspo_seeds)} of the {SEEDS_PLANNED} are finished; the same command resumes at seed "
        f"{len(fspo_seeds)}, because finished runs stay in `outputs/fspo_vs_grpo/`.",
    ]
    if c.other_arms():
        lines.append(
            f"The other methods' arms ran on seeds {seed_range(c.other_seeds())} "
            "([below](#the-other-methods-on-the-quickstart))."
        )
    lines += [
        f"`.venv/bin/python benchmarks/fspo_vs_grpo.py --arms {' '.join(['fspo', 'grpo', *c.other_arms()])} "
        f"--seeds {len(fspo_seeds)} --collect` gathered every finished run into "
        "`benchmarks/results/fspo_vs_grpo.json`.",
        "The tables below are `.venv/bin/python benchmarks/fspo_vs_grpo.py --table benchmarks/results/fspo_vs_grpo.json`, "
        "the chart is its `--chart docs/fspo_vs_grpo.png`, and this section is "
        "`.venv/bin/python benchmarks/fspo_vs_grpo_docs.py`.",
        f"An FSPO or GRPO run took {minutes[0]:.1f}–{minutes[-1]:.1f} minutes alone on 2 cores"
        + "".join(
            f"; {NAMES[run['arm']]}'s seed-{run['seed']} run took {run['seconds'] / 60:.1f} beside other work"
            for run in beside
        )
        + ".",
        "",
        *"\n\n".join(c.tables).split("\n"),
        "",
        "![Every arm after 12 steps, mean and std over its runs](fspo_vs_grpo.png)",
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
            f"**On {len(fspo_seeds)} seeds{paired_note} the 95% interval of FSPO − GRPO in the hallucinated-step rate "
            "spans 0: this benchmark does not show that FSPO lowers it.**"
        )
    else:
        lines.append(f"**With {len(fspo_seeds)} of {SEEDS_PLANNED} seeds{paired_note} the intervals still span 0.**")
    lines += [
        "",
        f"- FSPO − GRPO in the judge's hallucinated-step rate is {interval(rate)} (per seed {per_seed(rate)}).",
    ]
    if rate["per_seed"] and all(value < 0 for value in rate["per_seed"].values()):
        lines.append("  FSPO's rate is the lower on every seed.")
    lines.append(f"- FSPO − GRPO in answer F1 is {interval(f1)} (per seed {per_seed(f1)}).")
    collapsed = c.collapsed(("fspo", "grpo"))
    for run in collapsed:
        steps, answers = run["after"]["steps"], run["after"]["answers"]
        consequence = (
            f"so its hallucinated-step rate rests on those {steps}."
            if steps
            else f"so it has no hallucinated-step rate and seed {run['seed']} drops out of that comparison."
        )
        lines.append(
            f"- {NAMES[run['arm']]}'s seed-{run['seed']} policy stopped writing reasoning: {steps} steps in "
            f"{answers} answers, {consequence}"
        )
    collapsed_seeds = {str(run["seed"]) for run in collapsed}
    rest = [value for seed, value in rate["per_seed"].items() if str(seed) not in collapsed_seeds]
    if collapsed_seeds and len(rest) > 1:
        mean, low, high, n = t_interval(rest)
        lines.append(
            f"- Without seed{'s' if len(collapsed_seeds) > 1 else ''} "
            f"{', '.join(sorted(collapsed_seeds, key=int))}, the other {n} seeds give {signed(mean)}, "
            f"95% CI [{signed(low)}, {signed(high)}]."
        )
    lines += [
        f"- Steps with a gradient: {sum(live)} of {c.measured['steps'] * len(live)} over FSPO's and GRPO's "
        f"{len(live)} runs, {live_mean:.1f} of {c.measured['steps']} per run, 95% CI [{live_low:.1f}, "
        f"{live_high:.1f}] over runs.",
        "  The seed-0 run with the worked example in the system message had 4 "
        "([steps that carry a gradient](#steps-that-carry-a-gradient)).",
        "- An earlier 3-seed measurement, with the worked example in the system message and `lexical` on the whole "
        "evidence, gave FSPO − GRPO −0.020, 95% CI [−0.213, +0.173].",
        "  That verifier passed most of the judge's hallucinations (0.77 of FSPO's after training); this "
        "measurement replaces it.",
    ]
    return "\n".join(lines)


def others_section(c: Comparison) -> str:
    others, seeds = c.other_arms(), c.other_seeds()

    def seconds(arm: str) -> str:
        times = sorted(run["seconds"] for run in c.runs if run["arm"] == arm)
        return f"{times[0]:.0f}–{times[-1]:.0f} s" if len(times) > 1 else f"{times[0]:.0f} s"

    lines = [
        OTHERS_SECTION,
        "",
        "The other methods' arms ran as the methods are defined in [methods](methods.md), on the same verifier, "
        "data, seeds and budget as FSPO and GRPO above.",
        f"`.venv/bin/python benchmarks/fspo_vs_grpo.py --arms {' '.join(others)} --seeds {len(seeds)}` trained them, alone on "
        "2 cores.",
        "Their runs are in the tables [above](#fspo-against-grpo-on-the-quickstart); each is paired with FSPO's and "
        "GRPO's run of its seed.",
        "",
        "| arm | runs | seconds a run | what a run does |",
        "|---|---|---|---|",
        *(f"| {NAMES[arm]} | {len(c.seeds(arm))} | {seconds(arm)} | {WHAT_A_RUN_DOES[arm]} |" for arm in others),
        "",
        "| difference | hallucinated-step rate | answer F1 |",
        "|---|---|---|",
    ]
    for pair in c.other_pairs():
        rate, f1 = (c.difference(*pair, figure) for figure in FIGURE_NAMES)
        lines.append(
            f"| {NAMES[pair[0]]} − {NAMES[pair[1]]} | {interval(rate)} (per seed {per_seed(rate)}) | "
            f"{interval(f1)} (per seed {per_seed(f1)}) |"
        )
    lines.append("")
    if excluding_zero := c.other_intervals_excluding_zero():
        lines.append(f"Intervals that exclude 0: {excluding_zero}.")
    else:
        lines.append(
            f"No interval of these excludes 0: on {len(seeds)} seeds none of the other methods can be ranked "
            "against GRPO or FSPO."
        )
    lines.append("")
    for run, base in c.same_answers():
        lines.append(
            f"- {NAMES[run['arm']]}'s seed-{run['seed']} run answered every held-out question exactly as "
            f"{NAMES[base['arm']]}'s: the two runs are one."
        )
        if run["arm"] == "fapo" and base["arm"] == "grpo":
            lines.append(
                "  FAPO's penalty moves GRPO's advantages only in a group whose right rollouts are partly flawed: "
                "when all of them are, it scales their rewards by one factor, which the group's normalisation removes."
            )
    collapsed = c.collapsed()
    if collapsed:
        by_arm: dict[str, list[str]] = {}
        for run in collapsed:
            by_arm.setdefault(NAMES[run["arm"]], []).append(str(run["seed"]))
        lines.append(
            "- Runs whose policy stopped writing reasoning (fewer than one step in "
            f"{COLLAPSE_ANSWERS_PER_STEP} answers): "
            + "; ".join(f"{arm} seed {', '.join(seeds_)}" for arm, seeds_ in by_arm.items())
            + ". A run without steps has no hallucinated-step rate, so its pairs drop out of that column."
            + ("" if "FSPO" in by_arm else f" FSPO: none of {len(c.seeds('fspo'))}.")
        )
    lines += [
        "",
        f"With {len(seeds)} seeds a paired t interval is wide (t(0.975, {len(seeds) - 1}) = "
        f"{t_quantile(0.975, len(seeds) - 1):.3f}): these are measured, not settled."
        if len(seeds) > 1
        else f"With {len(seeds)} seed there is no interval: these are measured, not settled.",
        "The benchmark's table gives, beside each interval, the seeds a ±0.05 interval would need at the spread "
        "measured (from three seeds on).",
        "",
        "An earlier measurement of these arms (seeds 0–2) predates the methods' redefinition and the verifier "
        "scoring each step against its best evidence sentence; this one replaces it.",
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
        f"seeds {seed_range(fspo_seeds)}{so_far}, {c.measured['dtype']}:",
        "",
        c.tables[0],
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
                f"the paired intervals that exclude 0: {excluding_zero} "
                "([docs/results.md](docs/results.md#the-other-methods-on-the-quickstart))."
                if excluding_zero
                else "none of their paired intervals excludes 0."
            )
        )
    lines += [
        "",
        "The paired differences, the steps with a gradient, every run's figures, the flip's paired one-update "
        "effect and the other methods: [docs/results.md](docs/results.md).",
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
    results_md = replace_section(results_md, FSPO_SECTION, fspo_section(c), until=NEXT_SECTION)
    if c.other_arms():
        results_md = replace_section(results_md, OTHERS_SECTION, others_section(c))
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
    bench.plot(bench.summarise(measured["runs"]), CHART)
    print(f"wrote {', '.join(str(p.relative_to(ROOT)) for p in (RESULTS_MD, README, CHART))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
