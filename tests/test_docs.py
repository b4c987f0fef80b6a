"""The docs name only what exists: on every Markdown page (README.md, docs/, the READMEs beside the code),
each relative link and its anchor, each repository path in code, each `fspo.*` config key or module, each
`fspo <command>` and each option named for a command."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
import yaml

from fspo.cli import SUBCOMMANDS
from fspo_testing import docs_facts as facts
from fspo_testing.cli_commands import (
    COMMANDS,
    all_parsers,
    named_commands,
    option_mentions,
    option_strings,
    page_commands,
)
from fspo_testing.docs_pages import REPO, markdown_pages

PAGES = markdown_pages()
# Files the project writes, named by the docs before they exist, each with the file that writes it.
WRITTEN = {"tests/durations.json": "tests/conftest.py"}


def _text(page: str) -> str:
    return (REPO / page).read_text(encoding="utf-8")


def _without_code(text: str) -> str:
    """The prose: fenced blocks and inline code removed (a link there is an example, not a link)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M))


def code_spans(text: str) -> list[str]:
    """Inline code and the lines of shell blocks (```bash): where the docs name paths, keys and commands."""
    shell = re.findall(r"^```(?:bash|sh)\n(.*?)^```", text, flags=re.S | re.M)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.findall(r"`([^`\n]+)`", prose) + [line for block in shell for line in block.splitlines()]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(heading) for heading in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def broken_links(page: str, text: str) -> list[str]:
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _without_code(text)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (REPO / page).parent / path if path else REPO / page
        if not file.exists():
            found.append(f"{page}: link {target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.resolve()):
            found.append(f"{page}: link {target}: no heading #{anchor}")
    return found


TOP_LEVEL = sorted(p.name for p in REPO.iterdir() if p.is_dir() and not p.name.startswith("."))
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(map(re.escape, TOP_LEVEL))})/[\w./-]*)")


def repository_paths(text: str) -> set[str]:
    """Paths that start at a top-level folder of the repository (`fspo/steps.py`, `recipes/run_cpu.sh`), anywhere on
    the page: inline code, any code block (fenced or indented) and prose."""
    paths = set()
    for word in re.split(r"[\s`]+", text):
        if any(mark in word for mark in "<>{}*$…"):  # a pattern, not a path
            continue
        match = PATH.match(word.lstrip("(['\""))
        path = match.group(1).rstrip(".,;:)'\"") if match else ""
        if path and not (re.fullmatch(r"fspo/\w+", path) and not (REPO / path).exists()):  # a metric: unknown_metrics
            paths.add(path)
    return paths


def ignored(paths: set[str]) -> set[str]:
    """The paths git ignores: what the project builds or writes there (data sets, checkpoints), not its files."""
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"], input="\n".join(sorted(paths)), text=True,
        capture_output=True, cwd=REPO,
    )  # fmt: skip
    assert result.returncode in (0, 1), f"git check-ignore: {result.stderr.strip()}"  # 1: none ignored
    return set(result.stdout.split())


def missing_paths(page: str, text: str) -> list[str]:
    paths = repository_paths(text)
    built = ignored(paths) | set(WRITTEN) | {p for p in paths if p.startswith("data/") and p.endswith(".parquet")}
    return [f"{page}: `{p}` does not exist" for p in sorted(paths - built) if not (REPO / p).exists()]


@cache
def config_keys() -> set[str]:
    """Every `fspo:` key, read from fspo_trainer.yaml.

    The yaml lists each dataclass field with its default (tests/test_config.py holds them equal); reading it
    spares this test verl's import, which the dataclasses need (seconds).
    """
    block = yaml.safe_load((REPO / "fspo" / "config" / "fspo_trainer.yaml").read_text(encoding="utf-8"))["fspo"]
    keys = {f"fspo.{key}" for key in block if key != "_target_"}
    return keys | {f"fspo.verifier.{key}" for key in block["verifier"] if key != "_target_"}


KEY = re.compile(r"(?<![\w.])\+?(fspo(?:\.[A-Za-z_]\w*)+)")


def _defines(module: Path, name: str) -> bool:
    source = module.read_text(encoding="utf-8")
    return bool(re.search(rf"^\s*(def|class|async def) {name}\b|^{name}\s*[:=]|\bimport\b.*\b{name}\b", source, re.M))


def module_member_exists(dotted: str) -> bool:
    """`fspo.steps.reasoning_steps`: the longest prefix that is a module file, then a name it defines or imports."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = REPO.joinpath(*parts[:end])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if module.is_file():
            rest = parts[end:]
            return not rest or _defines(module, rest[0])
    return False


def unknown_keys(page: str, text: str) -> list[str]:
    """`fspo.<key>`, `fspo.verifier.<key>`: a key of the `fspo:` block's dataclasses; any other `fspo.x.y` a module."""
    keys = config_keys()
    blocks = {key.split(".")[1] for key in keys if key.startswith("fspo.")}
    found = []
    for span in code_spans(text):
        for name in KEY.findall(span):
            second = name.split(".")[1]
            if second in blocks or "." not in name[5:] and not module_member_exists(name):
                config_key = ".".join(name.split(".")[:3] if second == "verifier" else name.split(".")[:2])
                if config_key not in keys and name != "fspo.verifier":
                    found.append(f"{page}: `{name}` is not a key of the fspo: block")
            elif not module_member_exists(name):
                found.append(f"{page}: `{name}` is neither a config key nor a module's name")
    return found


# `fspo` where a shell runs it: a span's first word, after a path, a separator, a prompt or a loop's `do`; not an
# argument (`--arms fspo grpo`).
COMMAND = re.compile(
    r"(?:^|(?<=[;&|(/])|(?<=[;&|(] )|(?<=\$ )|(?<=\bdo )|(?<=\bthen )|(?<=\btime ))fspo ([a-z][\w-]*)(?: ([a-z][\w-]*))?"
)


def unknown_commands(page: str, text: str) -> list[str]:
    """`fspo <command>` a dispatcher has, and for `fspo data`, `fspo verifier`, `fspo fdpo` the subcommand."""
    dispatchers = {name.split()[1] for name in COMMANDS if len(name.split()) == 3}
    found = []
    for span in code_spans(text):
        for command, sub in COMMAND.findall(span):
            if command not in SUBCOMMANDS:
                found.append(f"{page}: `fspo {command}` is not a command")
            elif command in dispatchers and sub and f"fspo {command} {sub}" not in COMMANDS:
                found.append(f"{page}: `fspo {command} {sub}` is not a command")
    return found


@pytest.mark.parametrize(
    "check", [broken_links, missing_paths, unknown_keys, unknown_commands], ids=lambda check: check.__name__
)
def test_the_docs_name_only_what_exists(check):
    assert [problem for page in PAGES for problem in check(page, _text(page))] == []


def test_the_docs_name_only_options_their_commands_have():
    mentions = option_mentions(PAGES)
    assert len(mentions) > 25  # the pages name many options (35 after the cut of issue 72): the scan must find them
    parsers = all_parsers()
    unknown = [
        (page, option)
        for page, commands, option in mentions
        if not any(option in option_strings(parsers[command]) for command in commands)
    ]
    assert unknown == []


def test_each_file_the_docs_name_before_it_is_written_is_written_by_the_file_named():
    for path, writer in WRITTEN.items():
        assert Path(path).name in (REPO / writer).read_text(encoding="utf-8"), (path, writer)


def test_the_checks_find_what_is_missing():
    """Each check fails on a page that names a renamed key, a moved path, a missing command or a broken link."""
    page = "docs/configuration.md"
    text = """Set `fspo.verifier.nmae=hhem` and `fspo.flip=false`; see `fspo/step.py` and `fspo/steps.py`.
Run `fspo verifer train` or `fspo verifier train`; `fspo.steps.reasoning_step` is `fspo.steps.reasoning_steps`.
See [install](install.md), [the block](#the-fspo-block), [nothing](nothing.md) and [here](install.md#nowhere).
"""
    assert unknown_keys(page, text) == [
        f"{page}: `fspo.verifier.nmae` is not a key of the fspo: block",
        f"{page}: `fspo.steps.reasoning_step` is neither a config key nor a module's name",
    ]
    assert missing_paths(page, text) == [f"{page}: `fspo/step.py` does not exist"]
    assert unknown_commands(page, text) == [f"{page}: `fspo verifer` is not a command"]
    assert broken_links(page, text) == [
        f"{page}: link nothing.md: no such file",
        f"{page}: link install.md#nowhere: no heading #nowhere",
    ]


# ------------------------------------------------------------------ facts the code holds (fspo_testing/docs_facts.py)


def _commands_of(page: str, unit: str) -> tuple[str, ...]:
    return named_commands(unit) or page_commands(page)


@cache
def _parsers() -> dict:
    return all_parsers()


def wrong_option_defaults(page: str, text: str) -> list[str]:
    return facts.wrong_option_defaults(page, text, _parsers(), _commands_of)


DEFAULT_CHECKS = [wrong_option_defaults, facts.wrong_key_defaults, facts.wrong_variable_defaults]
FACT_CHECKS = [*DEFAULT_CHECKS, facts.wrong_guesses, facts.unknown_metrics, facts.unstamped_durations]


@pytest.mark.parametrize("check", FACT_CHECKS, ids=lambda check: check.__name__)
def test_the_docs_state_what_the_code_holds(check):
    """Defaults as the parsers, fspo_trainer.yaml and the scripts give them; guesses as recipes/*.sh marks them;
    metrics fspo logs; each measured duration with its date, commit and machine."""
    assert [problem for page in PAGES for problem in check(page, _text(page))] == []


def test_the_readme_points_to_the_recipes_guesses_and_each_guess_line_reads():
    assert facts.unlisted_guesses(_text("README.md")) == []


def test_a_measured_figure_is_on_one_page():
    assert facts.repeated_durations({page: _text(page) for page in PAGES}) == []


def test_the_docs_fit_their_budget():
    """README.md <= 15,000 bytes and docs/*.md <= 70,000 bytes together (issue 72)."""
    sizes = {page: (REPO / page).stat().st_size for page in PAGES}
    assert facts.over_budget(sizes) == []


# A drift of each kind, planted into a copy of a real page: (kind, page, text appended, what the checks report).
PLANTS = [
    ("option default", "docs/verifiers.md", "`fspo verifier train --steps` (default 401) sets the steps.",
     "fspo verifier train --steps default 401; the parser's is 400"),
    ("option default, table", "docs/quickstart.md", "| `fspo quickstart --steps N` | training steps (default 13) |",
     "fspo quickstart --steps default 13; the parser's is 12"),
    ("config default", "docs/gpu-training.md", "`fspo.verifier.request_timeout_s` (999 s) bounds one wait.",
     "fspo.verifier.request_timeout_s default 999; the config's is 300.0"),
    ("config default, key=V", "docs/verifiers.md", "`scorer_timeout_s=20` (the default) bounds a scorer.",
     "fspo.scorer_timeout_s default 20; the config's is 10.0"),
    ("variable default, table", "docs/gpu-training.md", "| variable | default |\n|---|---|\n| `CKPT_KEEP` | `3` |",
     "CKPT_KEEP default `3`; the scripts give 2"),
    ("variable default, prose", "docs/evaluation.md", "`MAX_NEW_TOKENS` defaults to 2048.",
     "MAX_NEW_TOKENS default 2048; the scripts give"),
    ("GUESS value, key=V", "README.md", "The learning rate is a guess: `lr=5e-6`.",
     "lr=5e-6 is called a guess; recipes/*.sh's GUESS lines give ['1e-5', '1e-6']"),
    ("GUESS value, name V", "docs/gpu-training.md", "Guesses: lr 5e-6 and the rest.",
     "lr=5e-6 is called a guess"),
    ("GUESS value, V (GUESS)", "docs/gpu-training.md", "Responses are capped at 8192 tokens (GUESS).",
     "8192 is called a guess; no GUESS line of recipes/*.sh gives it"),
    ("metric name", "docs/configuration.md", "Watch fspo/supported_step_ratio fall.",
     "fspo/supported_step_ratio is not a metric fspo logs"),
    ("duration", "docs/quickstart.md", "The run took 1,355 s on 2 cores.", "'1,355 s' lacks a date, a commit, a machine"),
    ("path, indented block", "docs/gpu-training.md", "    python benchmarks/no_such_bench.py --seeds 3",
     "`benchmarks/no_such_bench.py` does not exist"),
    ("path, plain block", "docs/results.md", "```\nbenchmarks/no_such_bench.py\n```", "`benchmarks/no_such_bench.py`"),
    ("path, prose", "docs/development.md", "The bench is benchmarks/no_such_bench.py.", "`benchmarks/no_such_bench.py`"),
]  # fmt: skip


@pytest.mark.parametrize("page, plant, expected", [p[1:] for p in PLANTS], ids=[p[0] for p in PLANTS])
def test_the_checks_find_a_planted_drift(page, plant, expected):
    """What each check reports for the planted copy and not for the page as it is."""
    original = _text(page)
    planted = f"{original}\n\n{plant}\n"
    checks = [*FACT_CHECKS, missing_paths]
    new = {p.split(":", 2)[-1] for c in checks for p in c(page, planted)} - {
        p.split(":", 2)[-1] for c in checks for p in c(page, original)
    }
    assert any(expected in problem for problem in new), new


def test_the_guess_check_reads_each_mark_and_refuses_the_rest():
    script = """fspo_launch \\
    data.train_batch_size=128                  # GUESS (paper: not stated)
    # GUESS: 500 rows, for a quarter of the generation
    data.val_max_samples=500
    trainer.total_epochs="${TOTAL_EPOCHS:-3}"  # GUESS
# STEP_REWARD_WEIGHT default 0.5 is a GUESS
    fspo.step_reward_weight="${STEP_REWARD_WEIGHT:-0.5}"
# Values marked GUESS are not in the paper.
# lr is a GUESS too
"""
    guesses, unreadable = facts.script_guesses("r.sh", script)
    assert guesses == {
        "data.train_batch_size": {"128"}, "data.val_max_samples": {"500"}, "trainer.total_epochs": {"3"},
        "STEP_REWARD_WEIGHT": {"0.5"},
    }  # fmt: skip
    assert unreadable == ["r.sh:9: a GUESS the test cannot read; write `key=V  # GUESS: why`"]
    assert facts.unlisted_guesses("## Status\n- Guesses: lr 1e-6.\n## Next\n")[-1].startswith("README.md Status")


def test_a_duration_is_stamped_or_a_configured_limit():
    stamped = (
        "It took 1,355 s on an AMD EPYC with AVX2 at commit 1a2b3c4 (2026-11-29).\n\nThe trainer stops at 1,800 s."
    )
    assert facts.unstamped_durations("p.md", stamped) == []  # 1,800 s: fspo/quickstart/launch.py's timeout
    table = "Runs (2026-11-29, 1a2b3c4, AVX512):\n| arm | time |\n|---|---|\n| GRPO | 662 s |"
    assert facts.unstamped_durations("p.md", table) == []  # a table's caption stamps it
    assert facts.repeated_durations({"a.md": "took 662 s", "b.md": "took 662 s", "c.md": "after 1,800 s"}) == [
        "'662 s' is on a.md, b.md"
    ]


def test_the_budget_counts_the_readme_alone_and_docs_together():
    assert facts.over_budget({"README.md": 15_000, "docs/a.md": 35_000, "docs/b.md": 35_000}) == []
    assert facts.over_budget({"README.md": 15_001, "docs/a.md": 35_000, "docs/b.md": 35_001, "data/README.md": 9}) == [
        "README.md: 15,001 bytes, over the 15,000 budget",
        "docs/*.md: 70,001 bytes, over the 70,000 budget",
    ]
