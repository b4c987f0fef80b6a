"""The shortcut-world pre-registration (benchmarks/preregistration_shortcut.md): its seed count and quoted
figures are what benchmarks/preregistration_power.py computes from the committed runs."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
_spec = importlib.util.spec_from_file_location("preregistration_power", BENCHMARKS / "preregistration_power.py")
power = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(power)


def test_the_preregistration_quotes_the_seed_count_the_committed_spreads_give(capsys):
    """The committed FSPO − GRPO flawed-positive sd (0.165 over 8 seeds) needs 16 seeds for 80% power at 0.125, and
    the pre-registration's N and quoted figures are the script's output."""
    assert power.main([]) == 0
    output = capsys.readouterr().out
    assert "N = 16" in output
    preregistration = (BENCHMARKS / "preregistration_shortcut.md").read_text()
    assert len(preregistration.encode()) <= 3500
    quoted = re.search(r"```\n(.*?)```", preregistration, re.S).group(1)
    assert quoted.strip() == output.strip()
