"""Every environment variable fspo reads for a number, a switch, a choice or an ``FSPO_*`` setting, declared once
(:data:`ENVIRONMENT`: what it holds, its default, what it is for) and read through :func:`environment_value`.

A bad value is one :class:`EnvironmentVariableError` naming the variable and what it accepts. ``fspo <command>``
and ``fspo-train`` check every declared variable (:func:`check_environment`) before they write anything, and refuse
a bad one as one line with exit status 2. An empty value is an unset one (``FSPO_CPU_THREADS= cmd`` unsets it for
one command), except where a declaration says otherwise. A switch takes exactly its words, in any case: ``FSPO_DRY_RUN=on`` is
refused, never read as on or as off. The Hugging Face switches take huggingface_hub's true words
(huggingface_hub/constants.py:12, ``ENV_VARS_TRUE_VALUES``) and their opposites, so fspo reads them as the hub does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fspo.config.numeric_options import Number


class EnvironmentVariableError(ValueError):
    """An environment variable whose value fspo cannot use, with its name and what it accepts."""


def shown(text: str, limit: int = 60) -> str:
    """``text`` as a message shows it: printable (a surrogate from a non-UTF-8 value escaped) and cut to ``limit``."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return repr(cut.encode("utf-8", "backslashreplace").decode("utf-8"))


@dataclass(frozen=True)
class NumberVariable:
    """A variable that holds one number of ``number``'s kind and range."""

    number: Number
    default: int | float | None
    help: str

    @property
    def accepts(self) -> str:
        return self.number.meaning

    def parse(self, text: str) -> int | float | None:
        """``text`` as this number; None when it is not one or is out of range."""
        try:
            value = self.number.kind(text.strip())
        except (ValueError, OverflowError):
            return None
        return None if self.number.problem(value) else value


@dataclass(frozen=True)
class Switch:
    """A variable that is on or off, in exactly the words ``on`` and ``off`` (any case)."""

    default: bool | None
    help: str
    on: tuple[str, ...] = ("1", "true")
    off: tuple[str, ...] = ("0", "false")

    @property
    def accepts(self) -> str:
        return f"{'/'.join(self.on)} (on) or {'/'.join(self.off)} (off)"

    def parse(self, text: str) -> bool | None:
        word = text.lower()  # not stripped: huggingface_hub and Ray read " 1" as off
        return True if word in self.on else False if word in self.off else None


@dataclass(frozen=True)
class Choice:
    """A variable that names one of ``choices`` (any case)."""

    choices: tuple[str, ...]
    default: str | None
    help: str

    @property
    def accepts(self) -> str:
        return " or ".join(self.choices)

    def parse(self, text: str) -> str | None:
        word = text.strip().lower()
        return word if word in self.choices else None


@dataclass(frozen=True)
class Text:
    """A variable that holds free text (a path, a list), taken as it is; ``empty_is_unset=False``: an empty value
    is a value (an empty list)."""

    default: str | None
    help: str
    empty_is_unset: bool = True
    accepts: str = "any text"

    def parse(self, text: str) -> str:
        return text


Variable = NumberVariable | Switch | Choice | Text

# Bounds that keep a typo (an extra digit) from asking torch for millions of threads or a rollout tensor of
# millions of rows: well above any CPU this backend runs on.
_MAX_CPU_WORKERS = 4096

ENVIRONMENT: dict[str, Variable] = {
    "FSPO_DRY_RUN": Switch(False, "resolve and validate the config, print it, start nothing"),
    "FSPO_PREFLIGHT": Switch(True, "check that every model the run loads can be had; 0 skips it"),
    "FSPO_CPU_THREADS": NumberVariable(
        Number(f"an integer in [1, {_MAX_CPU_WORKERS}]", int, 1, _MAX_CPU_WORKERS, dtype="int64"),
        None,
        "threads each CPU process computes with (default: every core the process may use)",
    ),
    "FSPO_CPU_DTYPE": Choice(
        ("float32", "bfloat16"), None, "the CPU backend's compute dtype (default: this CPU's choice)"
    ),
    "FSPO_DECODE_ROWS": NumberVariable(
        Number(f"an integer in [1, {_MAX_CPU_WORKERS}]", int, 1, _MAX_CPU_WORKERS, dtype="int64"),
        8,
        "rows in every decoding step of the CPU rollout",
    ),
    "FSPO_GPU_WORKER_IMPORTS": Text(
        None,
        "the flash-attention packages that import on the GPU nodes, comma-separated (empty: none); set by "
        "fspo-train when it launches from a GPU-less machine",
        empty_is_unset=False,
    ),
    "FSPO_CACHE": Text(None, "where converted models are kept between runs (default ~/.cache/fspo)"),
    "FSPO_RUN_LEDGER": Text(None, "a JSON Lines file CI appends each trainer run's time to"),
    "FSPO_OUTPUT_FOLDER_HELD": Text(None, "pid:folder, the output folder a parent command holds for this one"),
    # Set by torch's and verl's launchers in each worker process.
    "RANK": NumberVariable(
        Number("an integer >= 0", int, 0, dtype="int64"), 0, "this worker's rank (set by the launcher)"
    ),
    # Ray reads it with ray/_common/utils.py:58 env_bool: "1"/"true" on, anything else off.
    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": Switch(
        False, "Ray leaves CUDA_VISIBLE_DEVICES alone in its actors (set node-wide)"
    ),
    "HF_HUB_OFFLINE": Switch(
        None,
        "huggingface_hub makes no network call",
        on=("1", "on", "yes", "true"),
        off=("0", "off", "no", "false"),
    ),
    "TRANSFORMERS_OFFLINE": Switch(
        None,
        "transformers' older name of HF_HUB_OFFLINE (which wins when set)",
        on=("1", "on", "yes", "true"),
        off=("0", "off", "no", "false"),
    ),
}


def environment_value(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of declared variable ``name`` in ``environ`` (default: this process's), as its declaration reads
    it; its default when unset; one :class:`EnvironmentVariableError` when it cannot be read so."""
    variable = ENVIRONMENT[name]
    text = (os.environ if environ is None else environ).get(name)
    if text is None or (text.strip() == "" and not (isinstance(variable, Text) and not variable.empty_is_unset)):
        return variable.default
    value = variable.parse(text)
    if value is None:
        raise EnvironmentVariableError(f"environment variable {name} must be {variable.accepts}, got {shown(text)}")
    return value


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Every declared variable readable (:func:`environment_value`), else the first one's error."""
    for name in ENVIRONMENT:
        environment_value(name, environ)
