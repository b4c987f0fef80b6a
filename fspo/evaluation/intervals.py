"""Student's t intervals: the 95% interval every measured claim about the method is reported with (paired
FSPO − GRPO differences over seeds or repeats, in ``benchmarks/``).

There is no SciPy in fspo's dependencies: the t distribution's CDF is integrated numerically (Simpson's rule)
and inverted by bisection, to about 1e-6 (t(0.975, 2) = 4.3027, t(0.975, 9) = 2.2622).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence

CONFIDENCE = 0.95


def _t_density(x: float, df: int) -> float:
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))


def _t_cdf(x: float, df: int, intervals: int = 2000) -> float:
    """P(T <= x) for x >= 0: one half plus the density's integral over [0, x]."""
    h = x / intervals
    inner = sum((4 if i % 2 else 2) * _t_density(i * h, df) for i in range(1, intervals))
    return 0.5 + h / 3 * (_t_density(0.0, df) + inner + _t_density(x, df))


@functools.cache
def t_quantile(probability: float, df: int) -> float:
    """The x with P(T <= x) = ``probability`` (in [0.5, 1)) for ``df`` >= 1 degrees of freedom."""
    if not 0.5 <= probability < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 <= probability < 1 and df >= 1, got {probability}, {df}")
    low, high = 0.0, 1.0
    while _t_cdf(high, df) < probability:
        low, high = high, 2 * high
    while high - low > 1e-7:
        middle = (low + high) / 2
        low, high = (middle, high) if _t_cdf(middle, df) < probability else (low, middle)
    return (low + high) / 2


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float, int]:
    """(mean, lower, upper, n): the interval of the mean of the finite ``values`` (NaN and inf are dropped).

    With one value there is no spread to estimate: the bounds are NaN (and everything is NaN with none)."""
    values = [v for v in values if math.isfinite(v)]
    n = len(values)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = statistics.fmean(values)
    if n == 1:
        return mean, math.nan, math.nan, 1
    half = t_quantile(0.5 + confidence / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half, n
