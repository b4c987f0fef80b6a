"""docs/gpu-sizing.md's generated tables are what benchmarks/recipe_memory.py and benchmarks/paper_scale.py print."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

from fspo_testing import background

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "gpu-sizing.md"


def _benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_the_sizing_page_holds_recipe_memorys_table():
    recipe_memory = _benchmark("recipe_memory")
    page = PAGE.read_text()
    assert page == recipe_memory.page_with_table(page), (
        "run `python benchmarks/recipe_memory.py --docs docs/gpu-sizing.md`"
    )


def test_a_checkpoint_is_twelve_bytes_a_trained_parameter_and_lora_keeps_the_fp32_base():
    recipe_memory = _benchmark("recipe_memory")
    full = recipe_memory.RECIPES["run_qwen2.5_7b_base.sh / _instruct.sh"]
    lora = recipe_memory.RECIPES["run_qwen3_4b_lora_1gpu.sh"]
    qwen3_4b = recipe_memory.MODELS["Qwen3-4B"]
    assert recipe_memory.checkpoint_gb(full) == pytest.approx(12 * 7.62)
    adapters = qwen3_4b.lora_parameters(64)
    assert recipe_memory.checkpoint_gb(lora) == pytest.approx((4 * 4.02e9 + 12 * adapters) / 1e9)


def sizing_cost_tables(folder: Path) -> tuple[list[str], dict[str, str]]:
    """paper_scale.py rewriting a copy of the page (its recipes' dry runs take ~45 CPU-s: it runs from collection on)."""
    shutil.copy(PAGE, folder / "page.md")
    script = REPO / "benchmarks" / "paper_scale.py"
    command = [sys.executable, str(script), "--cpu-tokens-per-s", "540", "--docs", str(folder / "page.md")]
    return command, dict(os.environ)


@pytest.mark.background.with_args(sizing_cost_tables)
def test_the_sizing_page_holds_paper_scales_cost_tables():
    process = background.result(sizing_cost_tables, timeout_s=600)
    assert process.returncode == 0, process.stderr[-3000:]
    written = (background.folder(sizing_cost_tables) / "page.md").read_text()
    assert PAGE.read_text() == written, (
        "run `python benchmarks/paper_scale.py --cpu-tokens-per-s 540 --docs docs/gpu-sizing.md`"
    )


def test_recipes_of_equal_figures_share_one_row():
    paper_scale = _benchmark("paper_scale")
    label = paper_scale.recipe_label(["run_qwen2.5_7b_base.sh", "run_qwen2.5_7b_instruct.sh"])
    assert label == "qwen2.5_7b_base / _instruct"
