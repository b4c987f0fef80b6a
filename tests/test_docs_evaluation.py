"""docs/evaluation.md states what evaluate/run.sh and `fspo evaluate` do: their usage lines, run.sh's defaults and
the prompt formats are compared here with what the scripts do and with `fspo evaluate`'s parser."""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from fspo.evaluation.cli import build_parser
from fspo.training.prompt_formats import PROMPT_FORMATS

REPO = Path(__file__).resolve().parent.parent
PAGE = (REPO / "docs" / "evaluation.md").read_text(encoding="utf-8")
RUN_SH = REPO / "evaluate" / "run.sh"

# pytest imports tests in importlib mode (no sibling imports): load test_recipes.py's run.sh harness by path.
_spec = importlib.util.spec_from_file_location("recipe_dry_runs", Path(__file__).with_name("test_recipes.py"))
_recipe_dry_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_recipe_dry_runs)
evaluate_run_sh_calls = _recipe_dry_runs.evaluate_run_sh_calls


def variable_rows(page: str) -> dict[str, str]:
    """The page's table of run.sh's variables: {variable: its default cell}; `JUDGE`, `JUDGE_MODEL` share a row."""
    rows = {}
    for names, default in re.findall(r"^\| (`[A-Z_]+`(?:, `[A-Z_]+`)*) \| ([^|]*) \|", page, flags=re.M):
        for name in re.findall(r"`([A-Z_]+)`", names):
            rows[name] = default.strip()
    return rows


def literal(cell: str) -> str:
    """The default a cell states as code: its first code span."""
    return re.search(r"`([^`]+)`", cell).group(1)


def header_defaults(script: str) -> dict[str, str]:
    """run.sh's header: `#   NAME [default]` for every variable it documents (several may share a line)."""
    header = script.split("set -euo pipefail")[0].split("# Environment")[1]
    return dict(re.findall(r"\b([A-Z][A-Z_]+) \[([^\]]*)\]", header))


def fenced_lines(page: str) -> list[str]:
    return [line for block in re.findall(r"^```\n(.*?)^```", page, flags=re.S | re.M) for line in block.splitlines()]


ROWS = variable_rows(PAGE)


def test_the_page_lists_every_variable_of_run_sh_header():
    assert sorted(ROWS) == sorted(header_defaults(RUN_SH.read_text(encoding="utf-8")))


def test_the_usage_lines_are_the_scripts_own():
    """Each script prints its usage line when called without arguments (exit 2)."""
    shown = fenced_lines(PAGE)
    for script in ("scripts/merge_checkpoint.sh", "evaluate/run.sh"):
        process = subprocess.run(["bash", str(REPO / script)], capture_output=True, text=True, timeout=30)
        assert process.returncode == 2
        usage = process.stderr.strip().removeprefix("usage: ")
        assert usage in shown, f"docs/evaluation.md should show `{usage}`"


def test_the_literal_defaults_are_run_sh_header_defaults():
    header = header_defaults(RUN_SH.read_text(encoding="utf-8"))
    for name in ("DATA_DIR", "BENCHMARKS", "OUTPUT_DIR"):
        assert literal(ROWS[name]) == header[name], name
    for name in ("TEMPERATURE", "TOP_P", "SAMPLES"):  # the header's "[RECIPE's, else 0.6]"
        assert header[name].endswith(f"else {literal(ROWS[name])}"), name
    assert header["TOP_K"].startswith(f"RECIPE's, else {literal(ROWS['TOP_K'])}")


def test_run_sh_samples_and_writes_as_the_page_says_without_a_recipe(tmp_path):
    """No RECIPE, no MAX_NEW_TOKENS: the page's defaults reach fspo evaluate, and the response length is the longest
    data.max_response_length of recipes/ (each read as run.sh reads it, FSPO_PRINT_OVERRIDE)."""
    plain, aime = evaluate_run_sh_calls(tmp_path)
    assert plain["--temperature"] == literal(ROWS["TEMPERATURE"])
    assert plain["--top-p"] == literal(ROWS["TOP_P"])
    assert plain["--top-k"] == literal(ROWS["TOP_K"])
    assert plain["--samples"] == literal(ROWS["SAMPLES"])
    assert aime["--samples"] == literal(ROWS["AIME_SAMPLES"])
    assert plain["--batch-size"] == "8" and ROWS["BATCH_SIZE"].endswith("else `8`")  # the stand-in has no vLLM
    assert "--prompt-format" not in plain and ROWS["PROMPT_FORMAT"] == "the model's own chat template"
    assert plain["--output-dir"] == str(REPO / literal(ROWS["OUTPUT_DIR"]))
    assert aime["--output-dir"] == str(REPO / literal(ROWS["OUTPUT_DIR"]) / "aime")
    lengths = [
        subprocess.run(
            ["bash", str(recipe)],
            env={"FSPO_PRINT_OVERRIDE": "data.max_response_length", "MODEL_PATH": "unused", "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
        for recipe in sorted((REPO / "recipes").glob("run_*.sh"))
    ]
    assert int(plain["--max-new-tokens"]) == max(int(length) for length in lengths if length.isdigit())
    assert ROWS["MAX_NEW_TOKENS"].endswith("else the longest in `recipes/`")


def test_aime_draws_one_sample_when_greedy(tmp_path):
    _, aime = evaluate_run_sh_calls(tmp_path, TEMPERATURE="0", MAX_NEW_TOKENS="8")
    assert aime["--samples"] == "1" and ROWS["AIME_SAMPLES"].endswith("or `1` at temperature 0")


@pytest.mark.parametrize("prompt_format", PROMPT_FORMATS)
def test_the_prompt_formats_are_fspo_evaluates_and_run_sh_passes_them_on(prompt_format, tmp_path):
    """The page, run.sh's header and `fspo evaluate --prompt-format` name the same six formats."""
    stated = re.findall(r"`([a-z0-9-]+)`", ROWS["PROMPT_FORMAT"] + re.search(r"PROMPT_FORMAT.*?\|(.*)", PAGE).group(1))
    choices = next(action.choices for action in build_parser()._actions if "--prompt-format" in action.option_strings)
    header = header_defaults(RUN_SH.read_text(encoding="utf-8"))
    header_formats = re.search(r"PROMPT_FORMAT \[\]\s+(.*)", RUN_SH.read_text(encoding="utf-8")).group(1)
    assert list(choices) == list(PROMPT_FORMATS) == [name for name in stated if name in PROMPT_FORMATS] == stated
    assert header_formats.split(" | ") == list(PROMPT_FORMATS) and header["PROMPT_FORMAT"] == ""
    plain, _ = evaluate_run_sh_calls(tmp_path, PROMPT_FORMAT=prompt_format, MAX_NEW_TOKENS="8")
    assert plain["--prompt-format"] == prompt_format


def test_fspo_evaluates_own_defaults_are_the_pages():
    stated = re.search(r"Called directly, it samples with `([^`]+)`", PAGE).group(1)
    words = shlex.split(stated)
    defaults = vars(build_parser().parse_args(["--model", "m", "--data", "d.parquet", "--output-dir", "o"]))
    for option, value in zip(words[::2], words[1::2]):
        assert str(defaults[option.removeprefix("--").replace("-", "_")]) == value, option


DATA_PAGE = (REPO / "data" / "README.md").read_text(encoding="utf-8")


def section_table(page: str, heading: str) -> list[list[str]]:
    """The cells of the first table under `## heading`, header and rule left out."""
    section = page.split(f"## {heading}\n")[1].split("\n## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_the_data_page_lists_every_set_of_the_registry_as_it_builds():
    """Each row of data/README.md's Sets table against its DatasetSpec: the forms `--form` offers, the data_source
    each form writes, the splits built by default and the hub dataset."""
    from fspo.data import synthetic
    from fspo.data.registry import COMMANDS, DATASETS

    rows = {spans(row[0])[0].split()[0]: row for row in section_table(DATA_PAGE, "Sets")}
    assert sorted(rows) == sorted(name for name in COMMANDS if name != "check")
    assert spans(rows.pop("synthetic")[1]) == [synthetic.DATA_SOURCE]
    for name, (command, sources, splits, hub, *_) in rows.items():
        spec = DATASETS[name]
        parser = argparse.ArgumentParser()
        if spec.add_arguments:
            spec.add_arguments(parser)
        forms = next((action.choices for action in parser._actions if "--form" in action.option_strings), None)
        stated_forms = [span.split()[-1] for span in spans(command)] if forms else []
        assert sorted(stated_forms) == sorted(forms or []), name
        args = [argparse.Namespace(simplerl_subset="subset", form=form) for form in stated_forms or [None]]
        assert spans(sources) == [spec.data_source(arg) for arg in args], name
        assert splits.split(", ") == sorted(spec.splits, reverse=True), name  # "train, test"
        location = spec.hub(spec.splits[0], args[0])
        assert (spans(hub)[0] if location else hub.split()[0]) == (location[0] if location else "none"), name


def test_the_data_page_scores_each_source_as_outcome_does():
    """The Scoring table's rows are fspo.training.outcome.SCORERS grouped by scorer: every source, each once."""
    from fspo.training.outcome import SCORERS

    stated = sorted(sorted(spans(row[0])) for row in section_table(DATA_PAGE, "Scoring"))
    by_scorer: dict[object, list[str]] = {}
    for source, scorer in SCORERS.items():
        by_scorer.setdefault(scorer, []).append(source)
    assert stated == sorted(sorted(sources) for sources in by_scorer.values())


def test_the_data_page_names_every_prompt_format():
    section = DATA_PAGE.split("## Prompt formats\n")[1].split("\n## ")[0]
    assert re.findall(r"^- `([a-z0-9-]+)`:", section, flags=re.M) == list(PROMPT_FORMATS)


def test_the_development_page_names_every_benchmark():
    page = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(\w+\.py)`", page.split("## Benchmarks")[1]))
    assert sorted(path.name for path in (REPO / "benchmarks").glob("*.py")) == sorted(named)
