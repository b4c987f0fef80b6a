"""What the docs state as a fact the code holds, and where each fact's source is: the docs drift checks.

Each check takes a page's path and text (the tests plant drifts into a copy of a real page in memory) and returns
one line per problem. The patterns a page must use for a fact the checks read:

- a default: "`--option` (default V)" or "`--option` (V)" in the paragraph or table row of one `fspo` command;
  "`fspo.key` (V)", "`fspo.key` …, by default V", "`fspo.key=V` (the default)"; "`VAR` (V)", "`VAR` defaults to V",
  or a row of a table headed "| variable | default |" (`VAR` cells against their leading `V` cells);
- a guess: a `key=V` code span, a name then a number ("lr 1e-6"), or "V … (GUESS" in a sentence that says GUESS;
- a measured duration ("N s", "N min", "N–M s a step") with a date (YYYY-MM-DD), a commit (7+ hex) and a machine
  in its paragraph, or in the caption above its table.
"""

from __future__ import annotations

import ast
import re
from fnmatch import fnmatch
from fractions import Fraction
from functools import cache

import yaml

from fspo.config.calibrated_thresholds import calibrated_threshold
from fspo_testing.docs_pages import REPO

# ---------------------------------------------------------------------------------------------------------- blocks


def blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each paragraph, list, table or fenced block; a table carries its caption."""
    found, current, start, fenced = [], [], 1, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            fenced = not fenced
        if not line.strip() and not fenced:
            if current:
                found.append((start, "\n".join(current)))
            current = []
            continue
        if not current:
            start = number
        current.append(line)
    if current:
        found.append((start, "\n".join(current)))
    # A table's caption is the paragraph right above it.
    return [
        (line, f"{found[i - 1][1]}\n{block}" if block.startswith("|") and i else block)
        for i, (line, block) in enumerate(found)
    ]


def units(text: str) -> list[tuple[int, str]]:
    """Table rows and list items one by one, paragraphs whole: the unit an option and its stated default share."""
    found = []
    for start, block in blocks(text):
        item: list[str] = []
        item_start = start
        for offset, line in enumerate(block.splitlines()):
            if line.startswith("|") or re.match(r"\s*([-*]|\d+\.) ", line) or not item:
                if item:
                    found.append((item_start, "\n".join(item)))
                item, item_start = [line], start + offset
            else:
                item.append(line)
        if item:
            found.append((item_start, "\n".join(item)))
    return found


# -------------------------------------------------------------------------------------------------------- defaults

VALUE = r"(`[^`\n]+`|-?\d[\d,]*(?:\.\d+)?(?:e-?\d+)?(?:/\d+)?)"
# V right after a name: "(V)", "(default V", "(V s)", "(V tokens)", "default V:"; "by default V", "defaults to V".
STATED = re.compile(
    rf"^`?\s*(?:\(\s*(?:default\s+)?|[,:]?\s*(?:by\s+)?default(?:s to)?\s+){VALUE}(?:\s*[a-zA-Z%]+)?\s*(?:[),;:|]|\.(?!\d)|$)"
)


def same_value(stated: str, actual: object) -> bool:
    """A page's literal (`V`, 1,800, 1/3, 0.5) against the code's value (300.0, None, 'outputs/quickstart')."""
    text = stated.strip("`").replace(",", "") if re.fullmatch(r"[\d,./e-]+", stated) else stated.strip("`")
    try:
        number = Fraction(text) if re.fullmatch(r"-?\d+/\d+", text) else None
        parsed = number if number is not None else yaml.safe_load(text)
    except yaml.YAMLError:
        parsed = text
    if isinstance(actual, (int, float)) and not isinstance(actual, bool) and isinstance(parsed, (int, float, Fraction)):
        return abs(float(parsed) - float(actual)) <= 1e-6 * max(1.0, abs(float(actual)))
    return parsed == actual or text == str(actual)


@cache
def config_defaults() -> dict[str, object]:
    """`fspo.<key>` → default, read from fspo_trainer.yaml, which test_config holds equal to the dataclasses
    (tests/test_config.py::test_the_yaml_shows_the_dataclass_defaults); the yaml spares verl's import."""
    block = yaml.safe_load((REPO / "fspo" / "config" / "fspo_trainer.yaml").read_text(encoding="utf-8"))["fspo"]
    flat = {f"fspo.{k}": v for k, v in block.items() if k not in ("_target_", "verifier")}
    verifier = {k: v for k, v in block["verifier"].items() if k != "_target_"}
    verifier["threshold"] = calibrated_threshold(verifier["name"])  # the yaml's ${fspo_calibrated_threshold:...}
    return flat | {f"fspo.verifier.{k}": v for k, v in verifier.items()}


SCRIPTS = ("recipes/*.sh", "evaluate/*.sh", "scripts/*.sh")


@cache
def script_defaults() -> dict[str, set[str]]:
    """VAR → every literal a script gives it (`${VAR:-V}`, `VAR=V`); a variable read without one has none."""
    found: dict[str, set[str]] = {}
    for pattern in SCRIPTS:
        for script in REPO.glob(pattern):
            for var, default in re.findall(r"\$\{([A-Z][A-Z0-9_]*):-([^}$]*)\}", script.read_text(encoding="utf-8")):
                found.setdefault(var, set())
                if default.strip('"'):
                    found[var].add(default.strip('"'))
            for var in re.findall(r"\$\{?([A-Z][A-Z0-9_]*)\b", script.read_text(encoding="utf-8")):
                found.setdefault(var, set())
            # A default assigned when the variable is unset: `if [[ -z "${VAR:-}" ]]; then VAR=16; fi`.
            for var, value in re.findall(r"(?<![\w$])([A-Z][A-Z0-9_]*)=([\w.-]+)(?=[\s;]|$)", script.read_text()):
                found.setdefault(var, set()).add(value)
    return found


def stated_after(unit: str, name: str) -> list[str]:
    """Each V stated for `name` in `unit` (see the module's patterns)."""
    values = []
    for match in re.finditer(rf"`{re.escape(name)}(?:[ =][^`]*)?`", unit):
        stated = STATED.match(unit[match.end() :])
        if stated:
            values.append(stated.group(1))
    return values


def wrong_option_defaults(page: str, text: str, parsers: dict, commands_of) -> list[str]:
    """Each `--option` default a page states against its command's argparse default.

    `commands_of(page, unit)` names the commands a unit is about (fspo_testing.cli_commands.unit_commands).
    """
    found = []
    for line, unit in units(text):
        commands = commands_of(page, unit)
        if len(commands) != 1:
            continue
        actions = {o: a for a in parsers[commands[0]]._actions for o in a.option_strings}
        for option in sorted(set(re.findall(r"`(?:fspo [\w -]*?)?(--[a-z][\w-]*)", unit))):
            if option not in actions:
                continue  # test_the_docs_name_only_options_their_commands_have says so
            for segment in re.findall(rf"`(?:fspo [\w -]*?)?{option}[^`]*`.*", unit):
                stated = STATED.match(re.sub(r"^`[^`]*`\s*(\|\s*[^|]*?(?=default|\())?", "", segment))
                if stated and not same_value(stated.group(1), actions[option].default):
                    found.append(
                        f"{page}:{line}: {commands[0]} {option} default {stated.group(1)}; "
                        f"the parser's is {actions[option].default!r}"
                    )
    return found


def wrong_key_defaults(page: str, text: str) -> list[str]:
    """Each `fspo.*` default a page states, and each "`key=V` (the default)", against fspo_trainer.yaml."""
    defaults = config_defaults()
    by_leaf: dict[str, list[str]] = {}
    for key in defaults:
        by_leaf.setdefault(key.rsplit(".", 1)[1], []).append(key)
    found = []
    for line, unit in units(text):
        # A null default is "the backend's" or "derived" (`request_deadline_s`): the page may name what it becomes.
        for key in sorted(
            k for k in set(re.findall(r"`(fspo(?:\.\w+)+)`", unit)) & set(defaults) if defaults[k] is not None
        ):
            found += [
                f"{page}:{line}: {key} default {v}; the config's is {defaults[key]!r}"
                for v in stated_after(unit, key)
                if not same_value(v, defaults[key])
            ]
        for name, value in re.findall(r"`([\w.]+)[=:] ?([^`\s]+)`\s*\((?:the )?default\)", unit):
            keys = [name] if name in defaults else by_leaf.get(name, [])
            if len(keys) == 1 and defaults[keys[0]] is not None and not same_value(value, defaults[keys[0]]):
                found.append(f"{page}:{line}: {keys[0]} default {value}; the config's is {defaults[keys[0]]!r}")
    return found


def table_defaults(block: str) -> list[tuple[str, str]]:
    """(VAR, V) from a table headed "| variable | default |": names against the leading code spans of the cell."""
    lines = block.splitlines()
    header = next((i for i, line in enumerate(lines) if re.match(r"\|\s*variable\s*\|\s*default\s*\|", line)), None)
    if header is None:
        return []
    rows = [line for line in lines[header:] if line.startswith("|")]
    pairs = []
    for row in rows[2:]:  # past the header and its |---| line
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if len(cells) < 2:
            continue
        names = re.findall(r"`([A-Z][A-Z0-9_]*)`", cells[0])
        leading = re.split(r"[(;:]", cells[1])[0]
        for name, item in zip(names, leading.split(","), strict=False):
            if re.fullmatch(r"\s*`[^`]+`\s*", item):
                pairs.append((name, item.strip()))
    return pairs


def wrong_variable_defaults(page: str, text: str) -> list[str]:
    """Each default a page states for an environment variable a script reads, against its `${VAR:-default}`."""
    scripts = script_defaults()
    found = []
    for line, unit in units(text) + blocks(text):
        stated = table_defaults(unit) if unit.startswith("|") or "\n|" in unit else []
        if not stated and not unit.lstrip().startswith("|"):
            stated = [
                (v, value) for v in set(re.findall(r"`([A-Z][A-Z0-9_]*)`", unit)) for value in stated_after(unit, v)
            ]
        for var, value in stated:
            if var not in scripts:
                continue  # not the project's variable (HF_HUB_ETAG_TIMEOUT is huggingface_hub's)
            if not any(same_value(value, d) for d in scripts[var]):
                given = " or ".join(sorted(scripts[var])) or "no literal default"
                found.append(f"{page}:{line}: {var} default {value}; the scripts give {given}")
    return sorted(set(found))


# ---------------------------------------------------------------------------------------------------------- guesses

GUESS_MARK = re.compile(r"#.*\bGUESS\b")


def script_guesses(name: str, text: str) -> tuple[dict[str, set[str]], list[str]]:
    """One script's `# GUESS` lines as key → values, and each GUESS line the test cannot read.

    Readable: `key=V  # GUESS…`; a `# GUESS…` comment above its `key=V` line; "# VAR default V is a GUESS" with
    `${VAR:-V}` in the script; or a line that only names the mark ("marked GUESS").
    """
    guesses: dict[str, set[str]] = {}
    unreadable = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not GUESS_MARK.search(line) or re.search(r"marked GUESS", line):
            continue
        own = line.split("#", 1)[0].strip()
        below = next((b.strip() for b in lines[index + 1 :] if not b.strip().startswith("#")), "")
        code = own or (below if re.match(r"\s*#\s*GUESS\b", line) else "")
        variable = re.search(r"#\s*([A-Z][A-Z0-9_]*) default (\S+) is a GUESS", line)
        setting = re.fullmatch(r"'?([\w.]+)=\"?(?:\$\{[A-Z_]+:-)?([^\s\"'}]+)\}?\"?'?", code)
        if variable and f"${{{variable[1]}:-{variable[2]}}}" in text:
            guesses.setdefault(variable[1], set()).add(variable[2])
        elif setting:
            guesses.setdefault(setting[1], set()).add(setting[2])
        else:
            unreadable.append(f"{name}:{index + 1}: a GUESS the test cannot read; write `key=V  # GUESS: why`")
    return guesses, unreadable


@cache
def recipe_guesses() -> tuple[dict[str, set[str]], tuple[str, ...]]:
    """Every recipes/*.sh `# GUESS` value by key, and the GUESS lines the test cannot read."""
    guesses: dict[str, set[str]] = {}
    unreadable: list[str] = []
    for script in sorted(REPO.glob("recipes/*.sh")):
        found, bad = script_guesses(str(script.relative_to(REPO)), script.read_text(encoding="utf-8"))
        for key, values in found.items():
            guesses.setdefault(key, set()).update(values)
        unreadable += bad
    return guesses, tuple(unreadable)


def _guess_of(name: str, guesses: dict[str, set[str]]) -> set[str] | None:
    """The values of the GUESS key `name` ends (`lr` is `actor_rollout_ref.actor.optim.lr`)."""
    keys = [key for key in guesses if key == name or key.endswith(f".{name}")]
    return set().union(*(guesses[key] for key in keys)) if keys else None


def wrong_guesses(page: str, text: str) -> list[str]:
    """Each value a page calls a guess is a `# GUESS` value of recipes/*.sh, under the same key where one is named."""
    guesses, _ = recipe_guesses()
    leaves = {key.rsplit(".", 1)[-1] for key in guesses}
    every_value = set().union(*guesses.values())
    found = []
    for line, block in blocks(text):
        for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z`])", block):
            if not re.search(r"(?i)\bguess(es)?\b", sentence):
                continue
            named = re.findall(r"`([\w.]+)=([^`\s]+)`", sentence)
            named += re.findall(rf"\b({'|'.join(map(re.escape, sorted(leaves)))})[ =](-?\d[\d.e-]*)\b", sentence)
            for name, value in dict.fromkeys(named):
                values = _guess_of(name, guesses)
                if values is None or not any(same_value(value, v) for v in values):
                    found.append(f"{page}:{line}: {name}={value} is called a guess; recipes/*.sh's GUESS lines give "
                                 f"{sorted(values) if values else 'no such key'}")  # fmt: skip
            for value in re.findall(r"(-?\d[\d,.]*)\s+[a-z]+\s+\(GUESS", sentence):
                if not any(same_value(value, v) for v in every_value):
                    found.append(f"{page}:{line}: {value} is called a guess; no GUESS line of recipes/*.sh gives it")
    return found


def unlisted_guesses(readme: str) -> list[str]:
    """The README's Status names every GUESS key, or says they are the values marked `# GUESS` in recipes/*.sh."""
    guesses, unreadable = recipe_guesses()
    status = re.search(r"^## Status\n(.*?)(?=^## )", readme, flags=re.S | re.M)
    status = status.group(1) if status else ""
    if re.search(r"`# GUESS` in `recipes/\*\.sh`", status):
        return list(unreadable)
    missing = [key for key in sorted(guesses) if key.rsplit(".", 1)[-1] not in status]
    return list(unreadable) + [f"README.md Status: the GUESS key {key} is not listed" for key in missing]


# ---------------------------------------------------------------------------------------------------------- metrics

METRIC = re.compile(r"(?<![\w./-])fspo/\w+")


@cache
def logged_metrics() -> frozenset[str]:
    """The `fspo/*` names the trainer logs: fspo.config.metrics.METRICS' keys (a test holds them equal to what it
    logs), read without importing fspo; without that file, the "fspo/…" strings of the code that logs them."""
    table = REPO / "fspo" / "config" / "metrics.py"
    if table.exists():
        for node in ast.walk(ast.parse(table.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "METRICS" for t in node.targets):
                return frozenset(key.value for key in node.value.keys)
    sources = [*(REPO / "fspo" / "training").rglob("*.py"), *(REPO / "fspo" / "methods").rglob("*.py")]
    names = {m for source in sources for m in re.findall(r"[\"'](fspo/\w+)[\"']", source.read_text(encoding="utf-8"))}
    # update_metrics logs each of fspo.advantage.flip_stats' names as fspo/<name>.
    flip = re.findall(r'"(\w+_frac)"', (REPO / "fspo" / "advantage.py").read_text(encoding="utf-8"))
    return frozenset(names | {f"fspo/{name}" for name in flip})


def unknown_metrics(page: str, text: str) -> list[str]:
    """Each `fspo/<name>` a page names (prose or code) that is neither a repository path nor a logged metric."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for name in METRIC.findall(line):
            if name not in logged_metrics() and not (REPO / name).exists() and not (REPO / f"{name}.py").exists():
                found.append(f"{page}:{number}: {name} is not a metric fspo logs (fspo/config/metrics.py)")
    return found


# -------------------------------------------------------------------------------------------------------- durations

UNITS = {"ms": 0.001, "s": 1, "sec": 1, "seconds": 1, "CPU-s": 1, "min": 60, "minutes": 60, "h": 3600, "hours": 3600}
DURATION = re.compile(
    rf"(?<![\w.,/-])(~?\d[\d,]*(?:\.\d+)?)(?:\s?[-–→]\s?~?\d[\d,]*(?:\.\d+)?)*\s?({'|'.join(sorted(UNITS, key=len, reverse=True))})(?![\w-])"
)
STAMP = {
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
    "a commit": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"),
    "a machine": re.compile(r"\bAVX(?:2|512)|\b(?:EPYC|Xeon|Ryzen|Core i\d|Apple M\d|H100|H200|A100|L40S?)\b"),
}
TIME_NAME = re.compile(r"(?i)(_s|_seconds|timeout|deadline|interval|heartbeat)$")


@cache
def time_constants() -> frozenset[float]:
    """Seconds the code configures (limits, timeouts, back-offs), not measures: each number bound to a name ending
    `_s`, `_seconds`, `timeout`, `deadline`, `interval` or `heartbeat` in fspo/ (assignments, fields, parameters)
    or in its yaml configs."""
    values = set()
    for module in (REPO / "fspo").rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            pairs = []
            if isinstance(node, ast.Assign):
                targets = [e for t in node.targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
                values_ = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value] * len(targets)
                pairs = list(zip(targets, values_, strict=False))
            elif isinstance(node, ast.AnnAssign) and node.value is not None:
                pairs = [(node.target, node.value)]
            elif isinstance(node, ast.arguments):
                positional = node.posonlyargs + node.args
                pairs = list(zip(positional[len(positional) - len(node.defaults) :], node.defaults, strict=False))
                pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults, strict=False) if d is not None]
            for target, value in pairs:
                name = getattr(target, "id", getattr(target, "attr", getattr(target, "arg", "")))
                if (
                    TIME_NAME.search(name or "")
                    and isinstance(value, ast.Constant)
                    and isinstance(value.value, int | float)
                ):
                    values.add(float(value.value))
    for config in (REPO / "fspo" / "config").rglob("*.yaml"):
        text = config.read_text(encoding="utf-8")
        values |= {float(v) for k, v in re.findall(r"(\w+):\s*(-?\d+(?:\.\d+)?)\b", text) if TIME_NAME.search(k)}
    return frozenset(values)


def seconds(number: str, unit: str) -> float:
    return float(number.lstrip("~").replace(",", "")) * UNITS[unit]


def durations(text: str) -> list[tuple[int, str, float, str]]:
    """(line, figure, seconds, its block) of each duration a page states, but in code blocks."""
    found = []
    for start, block in blocks(text):
        if block.startswith(("```", "    ")):
            continue
        own = block.split("\n|", 1)[-1] if block.startswith("|") or "\n|" in block else block
        offset = block.count("\n") - own.count("\n")
        for index, line in enumerate(own.splitlines()):
            for match in DURATION.finditer(re.sub(r"`[^`]*`", "", line)):
                found.append((start + offset + index, match.group(0), seconds(match[1], match[2]), block))
    return found


def unstamped_durations(page: str, text: str) -> list[str]:
    """Each measured duration without a date, a commit and a machine beside it (configured limits exempt)."""
    found = []
    for line, figure, value, block in durations(text):
        if value in time_constants():
            continue
        lacking = [what for what, stamp in STAMP.items() if not stamp.search(block)]
        if lacking:
            found.append(f"{page}:{line}: {figure!r} lacks {', '.join(lacking)} in its paragraph")
    return found


def repeated_durations(texts: dict[str, str]) -> list[str]:
    """A measured figure stated on two pages: one page owns it, the other links there."""
    pages: dict[str, set[str]] = {}
    for page, text in texts.items():
        for _, figure, value, _ in durations(text):
            if value not in time_constants() and re.search(r"\d{2,}|\.", figure):  # "3 s" could be any step
                pages.setdefault(re.sub(r"\s", " ", figure.lstrip("~")), set()).add(page)
    return [f"{figure!r} is on {', '.join(sorted(on))}" for figure, on in sorted(pages.items()) if len(on) > 1]


# ---------------------------------------------------------------------------------------------------------- budget

BUDGET = {"README.md": 15_000, "docs/*.md": 70_000}


def over_budget(sizes: dict[str, int]) -> list[str]:
    """Pages past their budget, from each page's size in bytes: the README alone, docs/*.md together."""
    found = []
    for pattern, limit in BUDGET.items():
        size = sum(n for page, n in sizes.items() if fnmatch(page, pattern))
        if size > limit:
            found.append(f"{pattern}: {size:,} bytes, over the {limit:,} budget")
    return found
