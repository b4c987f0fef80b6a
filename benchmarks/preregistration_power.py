"""The seed count of the shortcut-world pre-registration (benchmarks/preregistration_shortcut.md), from the
committed spreads.

The primary test is a paired two-sided t test over seeds of FSPO − GRPO in the flawed-positive share (right
answers holding a step the world judge contradicts, over all held-out questions). Its power at N seeds is the
non-central t's: with per-seed differences of mean ``effect`` and sd ``sd``, the statistic is t(N − 1) with
non-centrality effect·√N / sd, and the test rejects when it passes t(1 − α/2, N − 1) either way. The sd is
that of the committed per-seed differences (``benchmarks/results/quickstart_2026-11-26.json``: the quickstart's world, 32
held-out questions): the pre-registration's 64 questions can only lower the part the questions add.

The secondary exact-match test is one-sided non-inferiority: FSPO is not worse than GRPO by more than the
margin when the 95% interval's lower bound lies above −margin; its power is reported at a true difference of 0
and at the committed mean.

    python benchmarks/preregistration_power.py
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
from pathlib import Path

from fspo.evaluation.intervals import t_quantile

RESULTS = Path(__file__).resolve().parent / "results" / "quickstart_2026-11-26.json"
ALPHA = 0.05
TARGET_POWER = 0.80
# The primary effect the design must detect: 4 more of 32 questions (8 of 64) answered right through a
# contradicted step, about the committed GRPO runs' own share (0.160 per question).
EFFECT = 0.125
NONINFERIORITY_MARGIN = 0.10
MAX_SEEDS = 200


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def _chi_density(s: float, df: int) -> float:
    """The density of S = sqrt(V / df) for V ~ chi-square(df): what divides a normal into a t."""
    if s <= 0:
        # s^(df-1) at 0: 1 for one degree of freedom (S is then a half-normal), 0 for more.
        return math.sqrt(2 / math.pi) if s == 0 and df == 1 else 0.0
    log = math.log(2) + (df / 2) * math.log(df / 2) - math.lgamma(df / 2) + (df - 1) * math.log(s) - df * s * s / 2
    return math.exp(log)


def noncentral_t_sf(x: float, df: int, noncentrality: float, intervals: int = 2000) -> float:
    """P(T > x) for T = (Z + noncentrality) / S, S as in :func:`_chi_density`: E over S of P(Z > x·S − λ),
    integrated by Simpson's rule over S in [0, 1 + 12/√df] (beyond it the density is below 1e-30)."""
    if df < 1 or intervals % 2:
        raise ValueError(f"noncentral_t_sf needs df >= 1 and an even number of intervals, got {df}, {intervals}")
    top = 1 + 12 / math.sqrt(df) + (6 if df < 4 else 0)
    h = top / intervals

    def f(s: float) -> float:
        return _chi_density(s, df) * (1 - _normal_cdf(x * s - noncentrality))

    inner = sum((4 if i % 2 else 2) * f(i * h) for i in range(1, intervals))
    return h / 3 * (f(0.0) + inner + f(top))


def paired_t_power(effect: float, sd: float, seeds: int, alpha: float = ALPHA) -> float:
    """The power of a two-sided paired t test at level ``alpha`` over ``seeds`` per-seed differences of mean
    ``effect`` and standard deviation ``sd``."""
    if seeds < 2 or sd <= 0:
        raise ValueError(f"paired_t_power needs seeds >= 2 and sd > 0, got {seeds}, {sd}")
    critical = t_quantile(1 - alpha / 2, seeds - 1)
    noncentrality = effect * math.sqrt(seeds) / sd
    return noncentral_t_sf(critical, seeds - 1, noncentrality) + noncentral_t_sf(critical, seeds - 1, -noncentrality)


def seeds_for_power(effect: float, sd: float, power: float = TARGET_POWER, alpha: float = ALPHA) -> int:
    """The fewest seeds (at least 2) whose paired t test has ``power`` at ``effect``."""
    for seeds in range(2, MAX_SEEDS + 1):
        if paired_t_power(effect, sd, seeds, alpha) >= power:
            return seeds
    raise ValueError(f"more than {MAX_SEEDS} seeds for effect {effect} at sd {sd}")


def noninferiority_power(true_difference: float, margin: float, sd: float, seeds: int, alpha: float = ALPHA) -> float:
    """The chance that the (1 − alpha) two-sided t interval's lower bound lies above −``margin`` (a one-sided
    test at alpha/2) when the per-seed differences have mean ``true_difference`` and sd ``sd``."""
    critical = t_quantile(1 - alpha / 2, seeds - 1)
    return noncentral_t_sf(critical, seeds - 1, (true_difference + margin) * math.sqrt(seeds) / sd)


def committed_differences(path: Path = RESULTS) -> dict[str, list[float]]:
    """FSPO − GRPO per seed in the flawed-positive share and the exact match, from the committed runs'
    per-question records (benchmarks/fspo_vs_grpo.py's ``answer_comparisons``)."""
    spec = importlib.util.spec_from_file_location("fspo_vs_grpo", Path(__file__).with_name("fspo_vs_grpo.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = bench.answer_comparisons(json.loads(path.read_text())["runs"])
    return {
        row["figure"]: list(row["per_seed"].values())
        for row in rows
        if (row["arm"], row["baseline"]) == ("fspo", "grpo")
        and row["figure"] in ("flawed_positive_share", "exact_match")
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="a results.json of fspo_vs_grpo.py")
    parser.add_argument("--effect", type=float, default=EFFECT, help=f"primary effect to detect (default {EFFECT})")
    args = parser.parse_args(argv)
    differences = committed_differences(args.results)
    flawed, exact = differences["flawed_positive_share"], differences["exact_match"]
    sd_flawed, sd_exact = statistics.stdev(flawed), statistics.stdev(exact)
    seeds = seeds_for_power(args.effect, sd_flawed)
    print(f"committed FSPO - GRPO over {len(flawed)} seeds (quickstart world, 32 questions):")
    print(f"  flawed-positive share: mean {statistics.fmean(flawed):+.3f}, sd {sd_flawed:.3f}")
    print(f"  exact match:           mean {statistics.fmean(exact):+.3f}, sd {sd_exact:.3f}")
    print(f"primary: paired two-sided t, alpha {ALPHA}, effect {args.effect}, power >= {TARGET_POWER}: N = {seeds}")
    for n in (8, seeds, seeds + 4):
        print(f"  power at N = {n}: {paired_t_power(args.effect, sd_flawed, n):.3f}")
    margin = NONINFERIORITY_MARGIN
    print(f"secondary: exact-match non-inferiority, margin -{margin}, at N = {seeds}:")
    print(f"  power if the true difference is 0: {noninferiority_power(0.0, margin, sd_exact, seeds):.3f}")
    committed = statistics.fmean(exact)
    print(f"  power if it is {committed:+.3f}: {noninferiority_power(committed, margin, sd_exact, seeds):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
