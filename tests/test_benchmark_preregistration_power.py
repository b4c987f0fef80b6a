"""The power calculation behind the shortcut-world pre-registration's seed count."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
_spec = importlib.util.spec_from_file_location("preregistration_power", BENCHMARKS / "preregistration_power.py")
power = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(power)


def test_power_matches_the_published_one_sample_t_table():
    """G*Power 3.1 (Faul et al. 2007), "t tests - Means: Difference from constant", two-tailed, alpha 0.05,
    power 0.80: d = 0.5 needs n = 34 (actual power 0.8078), d = 0.8 needs n = 15; Cohen (1988) table 2.4.1."""
    assert power.seeds_for_power(0.5, 1.0) == 34
    assert power.paired_t_power(0.5, 1.0, 34) == pytest.approx(0.8078, abs=5e-4)
    assert power.seeds_for_power(0.8, 1.0) == 15


@settings(max_examples=15, deadline=None)
@given(st.floats(0.05, 1.0), st.integers(2, 40))
def test_power_is_alpha_at_no_effect_and_grows_with_seeds_and_effect(sd, seeds):
    assert power.paired_t_power(0.0, sd, seeds) == pytest.approx(power.ALPHA, abs=1e-4)
    # Non-decreasing (to the integration's 1e-9; a power near 1 cannot grow).
    assert power.paired_t_power(0.1, sd, seeds + 1) >= power.paired_t_power(0.1, sd, seeds) - 1e-9
    assert power.paired_t_power(0.2, sd, seeds) >= power.paired_t_power(0.1, sd, seeds) - 1e-9


def test_noninferiority_power_is_half_alpha_at_the_margin():
    """A true difference equal to −margin is rejected as inferior except in alpha/2 of the seeds' draws."""
    assert power.noninferiority_power(-0.1, 0.1, 0.138, 16) == pytest.approx(power.ALPHA / 2, abs=1e-4)
