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
from fspo_testing.cli_commands import COMMANDS, all_parsers, option_mentions, option_strings
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
    """Paths in code that start at a top-level folder of the repository (`fspo/steps.py`, `recipes/run_cpu.sh`)."""
    paths = set()
    for span in code_spans(text):
        for word in span.split():
            if any(mark in word for mark in "<>{}*$…"):  # a pattern, not a path
                continue
            match = PATH.match(word.lstrip("(["))
            path = match.group(1).rstrip(".,;:)") if match else ""
            if path and not re.fullmatch(r"fspo/\w+", path):  # `fspo/supported_step_rate` is a metric's name
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
    assert len(mentions) > 40  # the pages name many options: the scan must find them
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
