"""Writes the quickstart comparisons' prose and tables into the docs from results.json files of ``fspo_vs_grpo.py``.

    python benchmarks/fspo_vs_grpo_docs.py            # rewrite docs/results.md's two sections
    python benchmarks/fspo_vs_grpo_docs.py --check    # exit 1 when the docs differ from what it would write

Every figure in those sections comes from the results files, so a new measurement changes the docs in one
command and a test (``--check``) catches docs edited by hand.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
from pathlib import Path

from fspo.evaluation.intervals import t_interval, t_quantile

ROOT = Path(__file__).resolve().parents[1]
# FSPO against GRPO; the other methods, with the FSPO and GRPO runs of their seeds, measured at other code.
RESULTS = ROOT / "benchmarks" / "results" / "fspo_vs_grpo.json"
OTHERS = ROOT / "benchmarks" / "results" / "quickstart_2026-11-26.json"
RESULTS_MD = ROOT / "docs" / "results.md"

_spec = importlib.util.spec_from_file_location("fspo_vs_grpo", Path(__file__).with_name("fspo_vs_grpo.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)
_pages_spec = importlib.util.spec_from_file_location("generated_pages", Path(__file__).with_name("generated_pages.py"))
generated_pages = importlib.util.module_from_spec(_pages_spec)
_pages_spec.loader.exec_module(generated_pages)

NAMES = {
    "fspo": "FSPO",
    "grpo": "GRPO",
    "grpo_factuality_reward": "GRPO with factuality in the reward",
    "knowrl": "KnowRL",
    "fapo": "FAPO",
    "fdpo": "F-DPO",
}
OTHER_ARMS = ["grpo_factuality_reward", "knowrl", "fapo", "fdpo"]
TITLES = dict(bench.FIGURES) | dict(bench.ANSWER_FIGURES)
# The paired differences the docs show, the primary first: per answer, defined for every run that answered, then
# the pooled hallucinated-step rate, which a run without a judged step lacks. Issue 69 chose the primary before the
# runs of RESULTS (the plan of the runs of OTHERS named the pooled rate).
PRIMARY = "flawed_positive_share"
DIFFERENCES = [PRIMARY, "supported_chain_accuracy", "exact_match", "answer_f1", "hallucinated_step_rate"]
# A results.json records each run's commit but not its date or CPU: both from the commits that added the runs
# (git log benchmarks/results/). Update with the next measurement.
MEASURED = {
    RESULTS: "2026-11-29 on 2 otherwise idle cores of an Intel Xeon, its kernels held to AVX2",
    OTHERS: "2026-11-26 on 2 cores of a shared CPU machine whose model was not recorded",
}
# The world judge the runs of OTHERS were judged by: before f0fef0b it judged three true restatements of a relation
# contradicted. The runs kept per-question counts, not the answers, so they cannot be judged again.
OLD_JUDGE = (
    'Their world judge predates f0fef0b: it judged a step in three true wordings ("A\'s birthplace is B", "The '
    'headquarters of A are in B", "B was the mentor of A") contradicted. The runs kept counts per question, not the '
    "answers, so they are not judged again."
)
# Fewer closed reasoning steps than one in this many answers: the policy stopped writing reasoning.
COLLAPSE_ANSWERS_PER_STEP = 4
# The comparison is finished when the primary interval excludes 0 or this many seeds are in.
SEEDS_PLANNED = 8

FSPO_SECTION = "## FSPO against GRPO on the quickstart"
OTHERS_SECTION = "## The other methods on the quickstart"
NEXT_SECTION = "## Still to measure"
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


def stopped_writing(run: dict) -> bool:
    """The run's policy stopped writing reasoning: under one closed step in :data:`COLLAPSE_ANSWERS_PER_STEP` answers."""
    after = run["after"]
    return bool(after["answers"]) and after["steps"] * COLLAPSE_ANSWERS_PER_STEP < after["answers"]


def stopped_reasoning(runs: list[dict]) -> str:
    """Collapsed runs by arm: ``GRPO seed 1 (2 steps in 32 answers), seed 5 (0 steps in 32 answers)``."""
    by_arm: dict[str, list[str]] = {}
    for run in runs:
        after = run["after"]
        by_arm.setdefault(NAMES[run["arm"]], []).append(
            f"seed {run['seed']} ({after['steps']} steps in {after['answers']} answers)"
        )
    return "; ".join(f"{arm} {', '.join(seeds)}" for arm, seeds in by_arm.items())


class Comparison:
    """A results.json read for the docs: its runs, tables and paired differences."""

    def __init__(self, measured: dict):
        self.measured = measured
        self.runs = measured["runs"]
        self.paired = bench.comparisons(self.runs) + bench.answer_comparisons(self.runs)
        # `--table`'s per-answer table of the arms (its caption and the differences around it are not shown).
        self.answer_table = bench.answer_table(self.runs).split("\n\n")[1]
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
        """(arm, baseline) of each difference shown: FSPO against GRPO, each other method against GRPO, and FSPO
        against each but GRPO with factuality in the reward (an ablation of FSPO's reward)."""
        return [("fspo", "grpo")] + [
            pair
            for arm in self.other_arms()
            for pair in [(arm, "grpo")] + ([] if arm == "grpo_factuality_reward" else [("fspo", arm)])
        ]

    def figures(self) -> list[str]:
        """:data:`DIFFERENCES` that some pair has (runs written before the gold chain was kept have no
        supported-chain accuracy)."""
        return [f for f in DIFFERENCES if any(self.difference(a, b, f)["seeds"] for a, b in self.pairs())]

    def difference_table(self, pairs: list[tuple[str, str]], figures: list[str]) -> str:
        """Each pair's differences after training in ``figures``: mean [95% paired t interval] (seeds)."""
        lines = [
            "| difference | " + " | ".join(TITLES[f] for f in figures) + " |",
            "|---|" + "---|" * len(figures),
        ]
        for a, b in pairs:
            cells = [short_interval(self.difference(a, b, figure)) for figure in figures]
            lines.append(f"| {a} − {b} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def intervals_excluding_zero(self, pairs: list[tuple[str, str]], figures: list[str]) -> str:
        """The differences of ``pairs`` whose interval excludes 0, named ("F-DPO − GRPO in answer F1"), or ""."""
        return "; ".join(
            f"{NAMES[a]} − {NAMES[b]} in {TITLES[figure]}"
            for a, b in pairs
            for figure in figures
            if not spans_zero(self.difference(a, b, figure))
        )

    def collapsed(self, arms: tuple[str, ...] | None = None) -> list[dict]:
        """Runs whose policy stopped writing reasoning, by seed then arm."""
        return [
            run
            for run in sorted(self.runs, key=lambda run: (run["seed"], list(NAMES).index(run["arm"])))
            if (arms is None or run["arm"] in arms) and stopped_writing(run)
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


def verdict(primary: dict, seeds: int, finished: bool) -> str:
    """The bold line on FSPO − GRPO in the primary figure: what its interval shows."""
    name = TITLES[PRIMARY]
    if not spans_zero(primary):
        fewer = "fewer" if primary["mean"] < 0 else "more"
        return (
            f"**On {seeds} seeds FSPO's answers hold {fewer} flawed positives than GRPO's: the 95% interval of {name} "
            "excludes 0.**"
        )
    if finished:
        return (
            f"**On {seeds} seeds the 95% interval of FSPO − GRPO in {name} spans 0: this benchmark does not show "
            "that FSPO lowers them.**"
        )
    return f"**With {seeds} of {SEEDS_PLANNED} seeds the intervals still span 0.**"


def fspo_section(c: Comparison) -> str:
    fspo_seeds = c.seeds("fspo")
    primary = c.difference("fspo", "grpo", PRIMARY)
    finished = len(fspo_seeds) >= SEEDS_PLANNED or not spans_zero(primary)
    copied = {arm: c.summary[arm]["copy_rate"][0] for arm in ("fspo", "grpo")}
    minutes = statistics.fmean(run["seconds"] for run in c.runs) / 60

    lines = [
        FSPO_SECTION,
        "",
        f"Plan: `.venv/bin/python benchmarks/fspo_vs_grpo.py --arms fspo grpo --seeds {SEEDS_PLANNED}` trains each "
        f"arm at the [quickstart](quickstart.md)'s settings, {c.measured['steps']} steps in {c.measured['dtype']}; "
        f"the world judge reads the greedy answers to {c.measured['val_rows']} held-out questions.",
        "The arms share each seed's held-out questions, data order, rollout sampling seeds and validation before "
        "training.",
        f"Seeds {seed_range(fspo_seeds)} are finished."
        if len(fspo_seeds) >= SEEDS_PLANNED
        else f"Seeds {seed_range(fspo_seeds)} of the {SEEDS_PLANNED} are finished; the same command resumes at seed "
        f"{len(fspo_seeds)}, because finished runs stay in `outputs/fspo_vs_grpo/`.",
        f"Measured {MEASURED[RESULTS]}, at code {bench.code_versions(c.runs)}: {minutes:.1f} minutes a run (mean).",
        "`benchmarks/fspo_vs_grpo_docs.py` writes these sections from `benchmarks/results/`.",
        "",
        "Per answer after training, over every held-out question; mean ± std over each arm's runs (one per seed):",
        "",
        c.answer_table,
        "",
        "FSPO − GRPO after training (mean, 95% paired t interval, seeds):",
        "",
        c.difference_table([("fspo", "grpo")], c.figures()),
        "",
        verdict(primary, len(fspo_seeds), finished),
        "",
    ]
    if primary["per_seed"] and all(value < 0 for value in primary["per_seed"].values()):
        lines.append(f"- FSPO's {TITLES[PRIMARY]} are the fewer on every seed.")
    collapsed = c.collapsed(("fspo", "grpo"))
    if collapsed:
        lines.append(
            f"- Stopped writing reasoning: {stopped_reasoning(collapsed)}; an answer with no step holds no flawed "
            "positive, and a run with no judged step has no pooled rate."
        )
    collapsed_seeds = {str(run["seed"]) for run in collapsed}
    rest = [value for seed, value in primary["per_seed"].items() if str(seed) not in collapsed_seeds]
    if collapsed_seeds and len(rest) > 1:
        mean, low, high, n = t_interval(rest)
        lines.append(
            f"- Without seed{'s' if len(collapsed_seeds) > 1 else ''} "
            f"{', '.join(sorted(collapsed_seeds, key=int))}, FSPO − GRPO in {TITLES[PRIMARY]} is "
            f"{signed(mean)}, 95% CI [{signed(low)}, {signed(high)}] ({n} seeds)."
        )
    lines += [
        # Why FSPO may answer worse: only the mechanism and the figures this file holds.
        "- At `lexical` threshold 1.0 a sentence copied from the evidence is labelled +1 and a step joining two hops "
        "in its own words −1, so the flip pays copying.",
        f"  FSPO's policies copy more of their steps than GRPO's ({copied['fspo']:.3f} against "
        f"{copied['grpo']:.3f}). What one update with `lexical` labels does to copied claims, claims in other words "
        "and a right answer: [the flip](#what-one-update-with-the-flip-does-paired).",
    ]
    return "\n".join(lines)


def others_section(o: Comparison) -> str:
    others, seeds = o.other_arms(), o.other_seeds()
    pairs = o.pairs()[1:]
    # Per answer only: with 3 seeds and runs without a judged step, the pooled rate's intervals outrun its range
    # (its levels are in the arms' table).
    figures = [figure for figure in o.figures() if figure != "hallucinated_step_rate"]
    excluding_zero = o.intervals_excluding_zero(pairs, figures)
    lines = [
        OTHERS_SECTION,
        "",
        f"Plan: `.venv/bin/python benchmarks/fspo_vs_grpo.py --arms fspo grpo {' '.join(others)} --seeds {len(seeds)}` "
        "trains each as [methods](methods.md) defines it, on the same verifier, data, seeds and budget.",
        f"Measured {MEASURED[OTHERS]}, at code {bench.code_versions(o.runs)}, beside the FSPO and GRPO runs of that date "
        f"(seeds {seed_range(o.seeds('fspo'))}), which their differences pair with.",
        OLD_JUDGE,
        "Per answer after training, mean ± std over each arm's runs:",
        "",
        o.answer_table,
        "",
        "Paired differences per answer after training (mean, 95% paired t interval, seeds), "
        + (
            f"wide with {len(seeds)} seeds (t(0.975, {len(seeds) - 1}) = {t_quantile(0.975, len(seeds) - 1):.3f}):"
            if len(seeds) > 1
            else f"without intervals on {len(seeds)} seed:"
        ),
        "",
        o.difference_table(pairs, figures),
        "",
        f"Intervals that exclude 0: {excluding_zero}."
        if excluding_zero
        else "No interval of theirs excludes 0: none of them can be ranked against GRPO or FSPO.",
        "",
    ]
    for run, base in o.same_answers():
        lines.append(
            f"- {NAMES[run['arm']]}'s seed-{run['seed']} run answered every held-out question as "
            f"{NAMES[base['arm']]}'s did."
        )
    collapsed = o.collapsed(tuple(others))
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


def written_docs(measured: dict, others: dict, results_md: str) -> str:
    """docs/results.md with its comparison sections written from ``measured`` (FSPO against GRPO) and ``others``
    (the other methods)."""
    c, o = Comparison(measured), Comparison(others)
    sections = [fspo_section(c), *([others_section(o)] if o.other_arms() else [])]
    start, end = generated_pages.section_bounds(results_md, FSPO_SECTION, NEXT_SECTION, "docs/results.md")
    return results_md[:start] + "\n\n".join(sections).rstrip("\n") + "\n\n" + results_md[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--results", type=Path, default=RESULTS, help="FSPO against GRPO: a results.json of fspo_vs_grpo.py"
    )
    parser.add_argument(
        "--others", type=Path, default=OTHERS, help="the other methods: a results.json of fspo_vs_grpo.py"
    )
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when the docs differ")
    args = parser.parse_args(argv)
    files = {}
    for option, path in (("--results", args.results), ("--others", args.others)):
        try:
            files[option] = json.loads(path.read_text())
            Comparison(files[option])
        except bench.MALFORMED_RESULTS as error:
            print(f"{option} {path}: not a results.json of fspo_vs_grpo.py ({error!r})", file=sys.stderr)
            return 2
    results_md = RESULTS_MD.read_text()
    try:  # the page first, so that an error below is the results file's
        generated_pages.section_bounds(results_md, FSPO_SECTION, NEXT_SECTION, "docs/results.md")
    except ValueError as error:
        print(f"fspo_vs_grpo_docs: {error}", file=sys.stderr)
        return 2
    try:
        new = written_docs(files["--results"], files["--others"], results_md)
    except bench.MALFORMED_RESULTS as error:
        print(f"--results {args.results}: not a results.json of fspo_vs_grpo.py ({error!r})", file=sys.stderr)
        return 2
    return generated_pages.write_or_check(
        {RESULTS_MD: new}, ".venv/bin/python benchmarks/fspo_vs_grpo_docs.py", args.check
    )


if __name__ == "__main__":
    sys.exit(main())
