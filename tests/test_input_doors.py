"""The package's input doors: environment variables through :mod:`fspo.config.environment`, JSON through
:mod:`fspo.utils.input_files`, and no bad byte of user input replaced anywhere.

A side door is found in the syntax tree of each module (as tests/test_layout.py reads imports): a ``json.load(s)``
call outside the JSON reader; ``os.environ``/``os.getenv`` read for a declared variable or any ``FSPO_*`` one
outside the environment door; a ``decode``/``encode``/``open`` told ``errors="replace"``; standard input read as
text (decoded by the locale) rather than as bytes. A variable named through
a module-level constant (``THREADS_ENV = "FSPO_CPU_THREADS"``) is resolved to its name; a read whose name cannot be
resolved is a side door unless :data:`UNNAMED_READS` lists it with why.
"""

from __future__ import annotations

import ast
import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fspo
from fspo.config.environment import (
    ENVIRONMENT,
    Choice,
    EnvironmentVariableError,
    NumberVariable,
    Switch,
    Text,
    check_environment,
    environment_value,
)
from fspo.utils.input_files import InputFileError, parse_json, parse_json_bytes, read_stdin_text

PACKAGE = Path(fspo.__file__).parent

JSON_DOOR = "fspo.utils.input_files"
ENVIRONMENT_DOOR = "fspo.config.environment"
# module -> the unresolvable names it reads from os.environ, and why they are no declared setting.
UNNAMED_READS = {
    # The paths verl's processes read (RUN_ENV_NAMES: VERL_FILE_LOGGER_PATH), forwarded to a joined cluster as given.
    "fspo.training.main": {"name"},
    # The variable the user names for an API key (--variant-api-key-env, fspo.verifier.api_key_env): a secret.
    "fspo.utils.chat_client": {"api_key_env"},
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def string_constants(trees: list[ast.Module]) -> dict[str, set[str]]:
    """Every module-level ``NAME = "text"`` of the package: name -> the texts it is bound to."""
    found: dict[str, set[str]] = {}
    for tree in trees:
        for node in tree.body:
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found.setdefault(target.id, set()).add(node.value.value)
    return found


def _is_os_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and ast.unparse(node.value) == "os"


def environment_reads(tree: ast.AST) -> list[ast.expr]:
    """The name argument of each read of one variable from ``os.environ`` or ``os.getenv`` in ``tree``."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("get", "pop") and _is_os_environ(func.value):
                names.append(node.args[0])
            elif ast.unparse(func) == "os.getenv":
                names.append(node.args[0])
        elif isinstance(node, ast.Subscript) and _is_os_environ(node.value) and isinstance(node.ctx, ast.Load):
            names.append(node.slice)
        elif isinstance(node, ast.Compare) and any(_is_os_environ(c) for c in node.comparators):
            names.append(node.left)
    return names


def side_doors(tree: ast.AST, module: str, constants: dict[str, set[str]]) -> list[str]:
    """Each side door of ``module`` (its syntax ``tree``), as ``"line N: what"``."""
    found = []
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "stdin"
            and ast.unparse(node.value) == "sys"
            and module != JSON_DOOR
        ):
            parent = parents.get(node)
            if not (isinstance(parent, ast.Attribute) and parent.attr == "buffer"):
                found.append(f"line {node.lineno}: sys.stdin as text decodes by the locale: read_stdin_text")
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("json.loads", "json.load") and module != JSON_DOOR:
            found.append(f"line {node.lineno}: {ast.unparse(node.func)} outside {JSON_DOOR}")
        if isinstance(node, ast.ImportFrom) and node.module in ("json", "os"):
            taken = {alias.name for alias in node.names} & {"loads", "load", "environ", "getenv"}
            if taken:
                found.append(f"line {node.lineno}: from {node.module} import {', '.join(sorted(taken))}")
        if isinstance(node, ast.Call):
            replace_kw = any(
                k.arg == "errors" and isinstance(k.value, ast.Constant) and k.value.value == "replace"
                for k in node.keywords
            )
            replace_arg = (
                isinstance(node.func, ast.Attribute)
                and node.func.attr in ("decode", "encode")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value == "replace"
            )
            if replace_kw or replace_arg:
                found.append(f"line {node.lineno}: errors='replace' turns bad bytes into U+FFFD: refuse them")
    if module == ENVIRONMENT_DOOR:
        return found
    for name in environment_reads(tree):
        if isinstance(name, ast.Constant):
            texts = {name.value}
        elif isinstance(name, ast.Name) and name.id in constants:
            texts = constants[name.id]
        else:
            if ast.unparse(name) not in UNNAMED_READS.get(module, ()):
                found.append(f"line {name.lineno}: os.environ read of {ast.unparse(name)}, which names no variable")
            continue
        for text in sorted(texts):
            if text in ENVIRONMENT or text.startswith("FSPO_"):
                found.append(f"line {name.lineno}: os.environ read of {text} outside {ENVIRONMENT_DOOR}")
    return found


def package_trees() -> dict[str, ast.Module]:
    return {module_name(path): ast.parse(path.read_text(), str(path)) for path in sorted(PACKAGE.rglob("*.py"))}


def test_the_package_has_no_side_door():
    trees = package_trees()
    constants = string_constants(list(trees.values()))
    doors = {module: side_doors(tree, module, constants) for module, tree in trees.items()}
    assert {module: found for module, found in doors.items() if found} == {}


PLANTED = {
    "json.loads": "import json\nvalue = json.loads(text)\n",
    "json.load": "import json\nvalue = json.load(handle)\n",
    "from json import loads": "from json import loads\n",
    "a declared variable by name": 'import os\nthreads = int(os.environ.get("FSPO_CPU_THREADS", "1"))\n',
    "a declared variable through a constant": 'import os\nRANK_ENV = "RANK"\nrank = int(os.environ[RANK_ENV])\n',
    "an undeclared FSPO_ variable": 'import os\nflag = os.getenv("FSPO_NEW_SWITCH") == "1"\n',
    "a membership test": 'import os\nasked = "FSPO_DRY_RUN" in os.environ\n',
    "a read that names no variable": "import os\nvalue = os.environ.get(some_name)\n",
    "errors='replace' as a keyword": 'text = data.decode("utf-8", errors="replace")\n',
    "errors='replace' in open": 'handle = open(path, encoding="utf-8", errors="replace")\n',
    "'replace' as decode's second argument": 'text = data.decode("utf-8", "replace")\n',
    "standard input as text": "import sys\nrows = sys.stdin.read()\n",
}


@pytest.mark.parametrize("source", PLANTED.values(), ids=PLANTED.keys())
def test_a_planted_side_door_is_found(source):
    tree = ast.parse(source)
    assert len(side_doors(tree, "fspo.planted", string_constants([tree]))) == 1


def test_the_doors_themselves_and_writes_are_no_side_door():
    source = (
        'import os, sys\nos.environ["FSPO_GPU_WORKER_IMPORTS"] = ""\nenv = {**os.environ, "FSPO_X": "1"}\n'
        "data = sys.stdin.buffer.read()\n"
    )
    tree = ast.parse(source)
    assert side_doors(tree, "fspo.planted", {}) == []
    assert side_doors(ast.parse("import json\njson.loads(text)\n"), JSON_DOOR, {}) == []
    assert side_doors(ast.parse('import os\nos.environ.get("FSPO_DRY_RUN")\n'), ENVIRONMENT_DOOR, {}) == []


# --- the environment door: every declared variable, every kind of value ---------------------------------------

ENVIRONMENT_TEXTS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["2**64", "18446744073709551616", "-1", "0", "1", "8", "4096", "4097", "1e3", "3.0", "nan"]),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["", " ", "on", "off", "yes", "no", "TRUE", "False", "float32", "BFloat16", "fp8", "\udcff"]),
    st.text(max_size=80),
)


def accepted(variable, value) -> bool:
    """Whether ``value`` is what ``variable`` may read as."""
    if isinstance(variable, NumberVariable):
        return value == variable.default or variable.number.problem(value) is None
    if isinstance(variable, Switch):
        return value in (True, False, variable.default)
    if isinstance(variable, Choice):
        return value in (*variable.choices, variable.default)
    return isinstance(variable, Text) and (value is None or isinstance(value, str))


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(ENVIRONMENT)), text=ENVIRONMENT_TEXTS)
def test_a_value_is_read_within_its_declaration_or_refused_in_one_line(name, text):
    variable = ENVIRONMENT[name]
    try:
        value = environment_value(name, {name: text})
    except EnvironmentVariableError as error:
        message = str(error)
        assert "\n" not in message and len(message) < 300
        assert message.startswith(f"environment variable {name} must be {variable.accepts}, got ")
        message.encode("utf-8")  # printable, a surrogate escaped
        return
    assert accepted(variable, value), (name, text, value)


@given(text=st.text(max_size=20))
def test_a_switch_is_on_or_off_only_in_its_words(text):
    switch = ENVIRONMENT["FSPO_DRY_RUN"]
    word = text.strip().lower()
    expected = {"": False, "1": True, "true": True, "0": False, "false": False}.get(word)
    if expected is None:
        with pytest.raises(EnvironmentVariableError):
            environment_value("FSPO_DRY_RUN", {"FSPO_DRY_RUN": text})
    else:
        assert environment_value("FSPO_DRY_RUN", {"FSPO_DRY_RUN": text}) is expected
    assert switch.default is False


def test_the_hub_switches_read_as_huggingface_hub_reads_them():
    from huggingface_hub.constants import ENV_VARS_TRUE_VALUES  # huggingface_hub/constants.py:12

    on = ENVIRONMENT["HF_HUB_OFFLINE"].on
    assert {word.upper() for word in on} == ENV_VARS_TRUE_VALUES
    assert environment_value("HF_HUB_OFFLINE", {"HF_HUB_OFFLINE": "Yes"}) is True
    assert environment_value("HF_HUB_OFFLINE", {}) is None


def test_an_unset_or_empty_variable_is_its_default_and_an_empty_list_stays_empty():
    assert environment_value("FSPO_DECODE_ROWS", {}) == 8
    assert environment_value("FSPO_CPU_THREADS", {"FSPO_CPU_THREADS": " "}) is None
    assert environment_value("FSPO_GPU_WORKER_IMPORTS", {"FSPO_GPU_WORKER_IMPORTS": ""}) == ""
    check_environment({})


def test_fspo_refuses_a_bad_variable_before_its_command_writes(monkeypatch, tmp_path, capsys):
    from fspo.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FSPO_CPU_THREADS", str(2**64))
    assert main(["data", "synthetic", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        f"fspo data: environment variable FSPO_CPU_THREADS must be an integer in [1, 4096], got '{2**64}'\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_driver_refuses_a_dry_run_switch_it_cannot_read_before_hydra(monkeypatch, tmp_path, capsys):
    """Was: FSPO_DRY_RUN=on read as off, a real run started and Hydra left outputs/<date>/ in the folder."""
    from fspo.training.main import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FSPO_DRY_RUN", "on")
    assert main([]) == 2
    assert capsys.readouterr().err == (
        "fspo: environment variable FSPO_DRY_RUN must be 1/true (on) or 0/false (off), got 'on'\n"
    )
    assert list(tmp_path.iterdir()) == []


# --- the JSON reader: any depth, any bytes ------------------------------------------------------------------------


def nested(depth: int, kind: str) -> str:
    return "[" * depth + "]" * depth if kind == "list" else '{"a":' * depth + "1" + "}" * depth


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(min_value=1, max_value=200_000), kind=st.sampled_from(["list", "object"]))
def test_json_nested_to_any_depth_is_read_or_refused_in_one_line(depth, kind):
    text = nested(depth, kind)
    try:
        value = parse_json("deep.json", text, None)
    except InputFileError as error:
        assert str(error) == "deep.json: JSON nested too deeply to read"
        return
    assert depth_of(value) == depth


def depth_of(value) -> int:
    """How deep ``value`` nests, walked without recursion (json.dumps would recurse)."""
    depth = 0
    while isinstance(value, list | dict):
        depth += 1
        value = value[0] if isinstance(value, list) and value else value.get("a") if isinstance(value, dict) else None
    return depth


def _not_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return True
    return False


@given(data=st.binary(min_size=1, max_size=200).filter(_not_utf8))
def test_bytes_that_are_not_utf8_are_refused_naming_the_first_bad_one(data):
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError as bad:
        start = bad.start
    for refuse in (lambda: parse_json_bytes("in.json", data), lambda: read_stdin_text(io.BytesIO(data))):
        with pytest.raises(InputFileError) as caught:
            refuse()
        message = str(caught.value)
        assert "\n" not in message and f"is not UTF-8 text (byte {start} is " in message


def test_a_latin1_source_file_is_refused_not_replaced(tmp_path):
    """Was: read_source_file decoded with errors="replace": "Zürich" in Latin-1 became "Z\\ufffdrich", exit 0."""
    from fspo.data.io import SourceFileError, read_source_file
    from fspo.utils.field_text import clean_text

    source = tmp_path / "cities.jsonl"
    source.write_bytes('{"question": "Zürich?"}\n'.encode("latin-1"))
    with pytest.raises(SourceFileError, match=r"cities.jsonl is not UTF-8 text \(byte 15 is b'\\xfc'\)"):
        read_source_file(source)
    with pytest.raises(InputFileError, match="not UTF-8"):
        clean_text("Zürich".encode("latin-1"))


def test_an_option_value_nested_too_deeply_is_kept_as_text():
    """Was: `fspo verify --option k=[[[...` (a few thousand deep) ended in a RecursionError traceback."""
    from fspo.verifier_tools.verify import parse_option

    deep = nested(5000, "list")
    assert parse_option(f"k={deep}") == ("k", deep)
    assert parse_option("k=64") == ("k", 64)


def test_the_quickstart_scans_the_trainers_log_as_bytes(tmp_path, capsys):
    """The log is no user input and is never decoded (it was, with errors="replace"): a stray byte passes, and a
    mark cut mid-write is found once its line ends."""
    from fspo.quickstart.cli import RunProgress

    log = tmp_path / "train.log"
    progress = RunProgress("fspo", log, steps=2, questions=4, started=0.0)
    log.write_bytes(b"warning: caf\xe9\nfspo: validation beg")
    progress.poll()
    assert progress.validating_since is None
    with open(log, "ab") as handle:
        handle.write(b"ins (global step 0)\n")
    progress.poll()
    assert progress.validating_since is not None
    assert "validating on 4 held-out questions before training" in capsys.readouterr().out
