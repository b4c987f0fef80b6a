"""Writes docs/results.md's flip section from the pre-registered runs of ``flip_effect.py``.

    python benchmarks/flip_effect_docs.py --store DIR    # copy the run's finished seed files (DIR/S.json) in
    python benchmarks/flip_effect_docs.py                # rewrite the section
    python benchmarks/flip_effect_docs.py --check        # exit 1 when the section differs

The plan (benchmarks/preregistration_flip_labels.md) runs one ``flip_effect.py`` process a seed. Its files live in
``benchmarks/results/flip_effect_labels/seed<S>.json`` as the run wrote them. Until every planned seed is in, the
section says how many are and reports no figure of the plan (it allows no interim look); it shows the earlier
measurement with the judge's labels meanwhile. Then it shows ``flip_effect.py --table`` of all the seeds: the table
and the figures the plan decided, whatever their sign.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import sys
from pathlib import Path

from fspo.utils.input_files import read_json

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "benchmarks" / "results" / "flip_effect_labels"
# The one-update measurement with the judge's labels alone, rollouts sampled on an H200 (f575c6f): shown until the
# plan's runs, whose judge arm repeats it on a CPU, are all in.
EARLIER = ROOT / "benchmarks" / "results" / "flip_effect_smollm2.json"
RESULTS_MD = ROOT / "docs" / "results.md"
SECTION = "## What one update with the flip does, paired"
UNTIL = "## FSPO against GRPO on the quickstart"

flip_effect = sys.modules.get("flip_effect")
if flip_effect is None:  # loaded once: its dataclasses look their module up in sys.modules
    _spec = importlib.util.spec_from_file_location("flip_effect", Path(__file__).with_name("flip_effect.py"))
    flip_effect = sys.modules["flip_effect"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(flip_effect)

_pages_spec = importlib.util.spec_from_file_location("generated_pages", Path(__file__).with_name("generated_pages.py"))
generated_pages = importlib.util.module_from_spec(_pages_spec)
_pages_spec.loader.exec_module(generated_pages)

# The pre-registered command, one process a seed (``--seeds S --out S.json``); a test holds it to the plan's.
PLAN_LABELS = ("judge", "lexical", "lexical-abstain")
PLAN_ARGUMENTS = ("--model", "smollm2", "--rollouts", "sampled", "--batches", "3", "--labels", *PLAN_LABELS)
PLAN_SEEDS = tuple(range(8))
# A file records its settings, not its date, CPU or commit: from the run (the clone it ran in, its log).
# At cafb8a7, `flip_effect.py` and `fspo/` are as at the plan's commit (git diff 6c9d812 cafb8a7 is empty for both).
MEASURED = "2026-11-30 on 2 cores of an Intel Xeon held to AVX2 kernels, 21–42 minutes a seed, at code cafb8a7 (measuring as at the plan)"


def seed_path(seed: int, folder: Path = RUNS) -> Path:
    return folder / f"seed{seed}.json"


def planned(result: dict, seed: int) -> str | None:
    """Why a seed file is not the plan's run of ``seed`` (None: it is): every setting but the file written must be
    the pre-registered command's, and it must hold one repeat a batch, each with every span group of every label
    source on both sets of rollouts (as ``flip_effect.measure`` writes them)."""
    wanted = vars(flip_effect._parser().parse_args([*PLAN_ARGUMENTS, "--seeds", str(seed)]))
    args, repeats = result.get("args"), result.get("repeats")
    if not isinstance(args, dict) or not isinstance(repeats, list):
        return "not an --out file of flip_effect.py"
    keys = (set(wanted) | set(args)) - {"out", "table"}
    differing = sorted(key for key in keys if args.get(key) != wanted.get(key))
    if differing:
        return f"its settings are not the plan's ({', '.join(differing)})"
    if len(repeats) != wanted["batches"]:
        return f"it holds {len(repeats)} repeats, not the plan's {wanted['batches']}"
    spans = {f"{source}/{rollouts}/{group}" for source in wanted["labels"] for rollouts in ("same", "fresh")
             for group in flip_effect.GROUPS}  # fmt: skip
    if any(not isinstance(repeat, dict) or set(repeat) != spans for repeat in repeats):
        return "a repeat does not hold every label source's span groups"
    return None


def stored_runs(folder: Path = RUNS) -> dict[int, dict]:
    """The plan's seed files in ``folder``, by seed. A file the plan does not cover is an error, and so is a repeat
    found in two files (one seed's run stored under another's name)."""
    runs, seen = {}, {}
    for path in sorted(folder.glob("*.json")):
        seed = next((s for s in PLAN_SEEDS if path.name == seed_path(s, folder).name), None)
        if seed is None:
            raise ValueError(f"{path}: not a seed file of the plan (seed0.json … seed{PLAN_SEEDS[-1]}.json)")
        result = read_json(path)
        why = planned(result, seed)
        if why:
            raise ValueError(f"{path}: {why}")
        for repeat in result["repeats"]:
            fingerprint = json.dumps(repeat, sort_keys=True)
            if fingerprint in seen:
                raise ValueError(f"{path}: a repeat of it is also in {seen[fingerprint].name}")
            seen[fingerprint] = path
        runs[seed] = result
    return runs


def store(run_dir: Path, folder: Path = RUNS) -> list[Path]:
    """Copy the plan's finished seed files (``S.json``) from ``run_dir`` into ``folder``, each once."""
    if not run_dir.is_dir():
        raise ValueError(f"--store {run_dir}: no such folder")
    copied = []
    for seed in PLAN_SEEDS:
        source = run_dir / f"{seed}.json"
        if not source.is_file():
            continue
        why = planned(read_json(source), seed)
        if why:
            raise ValueError(f"{source}: {why}")
        target = seed_path(seed, folder)
        if target.is_file() and target.read_bytes() != source.read_bytes():
            raise ValueError(f"{target} is stored already and differs from {source}: a run is stored once")
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        copied.append(target)
    return copied


def section(runs: dict[int, dict], earlier: dict) -> str:
    """The flip section: the plan, then its table and decided figures once every seed is in (until then, progress
    and the earlier judge-labelled measurement)."""
    lines = [
        SECTION,
        "",
        "[Plan](../benchmarks/preregistration_flip_labels.md), committed before the first run: from the same weights "
        "and rollouts, `benchmarks/flip_effect.py` takes one update with GRPO's advantages and one with FSPO's per "
        "source of the flip's labels: the world judge (a perfect verifier), `lexical` as the quickstart trains "
        "(sentence unit, threshold 1.0), and `lexical` abstaining on non-claims.",
        "SmolLM2-135M-Instruct in float32; 4 quickstart questions × 8 rollouts at temperature 0.7, up to 96 tokens; "
        f"verl's clipped loss, AdamW at lr 2e-5; 3 batches on each of {len(PLAN_SEEDS)} seeds.",
        "",
    ]
    if len(runs) < len(PLAN_SEEDS):
        return "\n".join(
            lines
            + [
                f"Seeds stored: {len(runs)} of {len(PLAN_SEEDS)}. No figure of the plan is reported before all are in.",
                "Until then, the earlier run with the judge's labels alone (one NVIDIA H200, 2026-11-26, f575c6f), the "
                "change in a span's log-probability (summed over its tokens) after each update:",
                "",
                flip_effect.markdown_table(flip_effect.merge_results([earlier])),
            ]
        )
    merged = flip_effect.merge_results([runs[seed] for seed in PLAN_SEEDS])
    return "\n".join(
        lines
        + [
            f"Measured {MEASURED}.",
            "GRPO: the mean change in a span's log-probability (summed over its tokens) after GRPO's update. Under each "
            "label source: FSPO − GRPO, with its 95% t interval over the repeats with such a span.",
            "",
            flip_effect.markdown_table(merged),
            "",
            "The figures the plan decided:",
            "",
            *flip_effect.decided_verdicts(merged),
            *answer_reading(merged),
        ]
    )


LABELS_OF = {"judge": "the world judge's", "lexical": "`lexical`'s", "lexical-abstain": "abstaining `lexical`'s"}


def answer_reading(merged: dict) -> list[str]:
    """A line on where a right answer's drop comes from, read from the table's fresh-rollout rows: the label
    sources whose update lowers it against GRPO's (interval below 0). With the judge's labels among them, the drop
    comes with the flip itself; with only `lexical`'s, with its labels. Nothing when no source lowers it."""
    summary = merged["summary"]
    answer = {source: summary[f"{source}/fresh/{flip_effect.RIGHT_ANSWER}"] for source in PLAN_LABELS}
    grpo = answer["judge"]["grpo"]  # one GRPO update pairs with every source
    lowering = [source for source in PLAN_LABELS if answer[source]["upper"] < 0]
    if not lowering:
        return []
    names = [LABELS_OF[source] for source in lowering]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    cause = "the flip itself, whatever labels it follows" if "judge" in lowering else "`lexical`'s labels"
    return [
        "",
        f"On fresh rollouts FSPO's update lowers a right answer's log-probability against GRPO's, which "
        f"{'raises' if grpo > 0 else 'lowers'} it, with {listed} labels: the answer's cost comes with {cause}.",
    ]


def written(results_md: str, runs: dict[int, dict], earlier: dict) -> str:
    """docs/results.md with the section rewritten, up to :data:`UNTIL`."""
    start, end = generated_pages.section_bounds(results_md, SECTION, UNTIL, "docs/results.md")
    return results_md[:start] + section(runs, earlier).rstrip("\n") + "\n\n" + results_md[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, help="a folder of the run's S.json files: copy the finished seeds in")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when the section differs")
    args = parser.parse_args(argv)
    try:
        if args.store:
            print(f"stored {len(store(args.store, RUNS))} seed files in {RUNS}")
        runs = stored_runs(RUNS)
        new = written(RESULTS_MD.read_text(), runs, read_json(EARLIER))
    except ValueError as error:
        print(f"flip_effect_docs: {error}", file=sys.stderr)
        return 2
    except (KeyError, TypeError) as error:  # repeats of another shape than flip_effect.py writes
        print(f"flip_effect_docs: a stored file is not an --out file of flip_effect.py ({error!r})", file=sys.stderr)
        return 2
    return generated_pages.write_or_check(
        {RESULTS_MD: new},
        ".venv/bin/python benchmarks/flip_effect_docs.py",
        args.check,
        f" ({len(runs)} of {len(PLAN_SEEDS)} seeds)",
    )


if __name__ == "__main__":
    sys.exit(main())
