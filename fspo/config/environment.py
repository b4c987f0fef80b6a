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
from pathlib import Path
from typing import Any

from fspo.config.numeric_options import COUNT, FSPO_NUMBERS, LOSS_TERM, OPEN_PROBABILITY, Number


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


class FolderProblem(ValueError):
    """Why a folder variable's value cannot be used, without the variable's name."""


@dataclass(frozen=True)
class Folder(Text):
    """A variable that names a folder: refused when it, or a folder above it, is a file. An empty value is refused,
    not read as unset: a program that takes it as given (``HF_HOME``, a Hydra override) would use the working
    folder. Whether fspo can write there is checked where it writes (:func:`fspo.utils.output_dir.output_folder`):
    a dry run's folder may be on the cluster, not here."""

    empty_is_unset: bool = False
    accepts: str = "a folder (not a file)"
    absolute: bool = False  # read as given in every process (a Ray worker's working folder is not this one's)

    def parse(self, text: str) -> str:
        if not text.strip():
            raise FolderProblem("empty names the working folder: unset it or name a folder")
        if self.absolute and not os.path.isabs(os.path.expanduser(text)):
            raise FolderProblem("a relative folder is each process's own working folder: give an absolute path")
        problem = folder_problem(text)
        if problem:
            raise FolderProblem(problem)
        return text


def folder_problem(text: str) -> str | None:
    """Why ``text`` cannot name a folder, here or once made: it, or a folder above it, is a file (None: it can)."""
    path = Path(os.path.abspath(os.path.expanduser(text.replace("\x00", ""))))
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.is_dir():
        return None
    if existing == path:
        return f"{path} is a file, not a folder"
    return f"{existing} is a file, so {path} cannot be a folder"


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
    "FSPO_CACHE": Folder(None, "where converted models are kept between runs (default ~/.cache/fspo)"),
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
    # huggingface_hub takes it as given (constants.py: os.getenv("HF_HOME", ...)): empty, its cache is ./hub.
    "HF_HOME": Folder(
        None,
        "Hugging Face's folder (its hub cache, token); read, and written by downloads",
        accepts="an absolute folder (not a file)",
        absolute=True,
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


# The launch scripts' own variables (recipes/*.sh, evaluate/run.sh), which only those scripts read: each script asks
# ``python -m fspo.config.environment <script>`` to check them once at its top, before bash arithmetic or a Hydra
# override uses one. Their defaults are the scripts' (their headers list them).
_FREQUENCY = Number("an integer >= -1 (-1 or 0: never)", int, -1, dtype="int64")
SCRIPT_ENVIRONMENT: dict[str, Variable] = {
    "NNODES": NumberVariable(
        Number(f"an integer in [1, {_MAX_CPU_WORKERS}]", int, 1, _MAX_CPU_WORKERS, dtype="int64"), None, "nodes"
    ),
    "N_GPUS_PER_NODE": NumberVariable(Number("an integer in [1, 64]", int, 1, 64, dtype="int64"), None, "GPUs a node"),
    "CPU_WORKERS": NumberVariable(
        Number(f"an integer in [1, {_MAX_CPU_WORKERS}]", int, 1, _MAX_CPU_WORKERS, dtype="int64"),
        None,
        "run_cpu.sh's FSDP workers",
    ),
    "TOTAL_EPOCHS": NumberVariable(COUNT, None, "trainer.total_epochs"),
    "SAVE_FREQ": NumberVariable(_FREQUENCY, None, "trainer.save_freq"),
    "TEST_FREQ": NumberVariable(_FREQUENCY, None, "trainer.test_freq"),
    "CKPT_KEEP": NumberVariable(COUNT, None, "checkpoints verl keeps (actor, critic)"),
    "STEPS": NumberVariable(COUNT, None, "run_cpu.sh's trainer.total_training_steps"),
    "STEP_REWARD_WEIGHT": NumberVariable(FSPO_NUMBERS["step_reward_weight"], None, "fspo.step_reward_weight"),
    "KNOWRL_FACT_WEIGHT": NumberVariable(FSPO_NUMBERS["knowrl_fact_weight"], None, "fspo.knowrl_fact_weight"),
    "FAPO_PENALTY": NumberVariable(FSPO_NUMBERS["fapo_penalty"], None, "fspo.fapo_penalty"),
    "CKPT_DIR": Folder(None, "trainer.default_local_dir, where the run's checkpoints go"),
    # evaluate/run.sh (TOP_K goes to fspo evaluate's --top-k only, which checks it)
    "DATA_DIR": Folder(None, "the folder of <benchmark>/test.parquet"),
    "OUTPUT_DIR": Folder(None, "where fspo evaluate writes"),
    "TEMPERATURE": NumberVariable(LOSS_TERM, None, "--temperature"),
    "TOP_P": NumberVariable(OPEN_PROBABILITY, None, "--top-p"),
    "SAMPLES": NumberVariable(COUNT, None, "--samples"),
    "AIME_SAMPLES": NumberVariable(COUNT, None, "--samples on AIME"),
    "MAX_NEW_TOKENS": NumberVariable(COUNT, None, "--max-new-tokens"),
    "BATCH_SIZE": NumberVariable(COUNT, None, "--batch-size"),
}
# Which of them each script reads (and, with them, every variable of ENVIRONMENT).
SCRIPT_VARIABLES = {
    "recipes": (
        "NNODES", "N_GPUS_PER_NODE", "CPU_WORKERS", "TOTAL_EPOCHS", "SAVE_FREQ", "TEST_FREQ", "CKPT_KEEP", "STEPS",
        "STEP_REWARD_WEIGHT", "KNOWRL_FACT_WEIGHT", "FAPO_PENALTY", "CKPT_DIR",
    ),
    "evaluate": ("DATA_DIR", "OUTPUT_DIR", "TEMPERATURE", "TOP_P", "SAMPLES", "AIME_SAMPLES", "MAX_NEW_TOKENS", "BATCH_SIZE"),
}  # fmt: skip


def environment_value(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The value of declared variable ``name`` in ``environ`` (default: this process's), as its declaration reads
    it; its default when unset; one :class:`EnvironmentVariableError` when it cannot be read so."""
    variable = ENVIRONMENT[name] if name in ENVIRONMENT else SCRIPT_ENVIRONMENT[name]
    text = (os.environ if environ is None else environ).get(name)
    if text is None or (text.strip() == "" and not (isinstance(variable, Text) and not variable.empty_is_unset)):
        return variable.default
    try:
        value = variable.parse(text)
    except FolderProblem as problem:
        reason = shown(str(problem), 160)[1:-1]
        raise EnvironmentVariableError(
            f"environment variable {name} must be {variable.accepts}, got {shown(text)}: {reason}"
        ) from None
    if value is None:
        raise EnvironmentVariableError(f"environment variable {name} must be {variable.accepts}, got {shown(text)}")
    return value


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Every declared variable readable (:func:`environment_value`), else the first one's error."""
    for name in ENVIRONMENT:
        environment_value(name, environ)


def main(argv: list[str] | None = None) -> int:
    """``python -m fspo.config.environment recipes|evaluate``: check every variable of :data:`ENVIRONMENT` and the
    script's own (:data:`SCRIPT_VARIABLES`); exit 2 with one line naming the first bad one."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in SCRIPT_VARIABLES:
        print(f"usage: python -m fspo.config.environment {'|'.join(SCRIPT_VARIABLES)}", file=sys.stderr)
        return 2
    try:
        check_environment()
        for name in SCRIPT_VARIABLES[args[0]]:
            environment_value(name)
    except EnvironmentVariableError as error:
        print(error, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
