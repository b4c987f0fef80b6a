"""Every numeric option and record field, declared once: its kind (int or float), its range, and the dtype it
ends up in.

One :class:`Number` serves the CLI parsers (``type=SEED.parse``, refused by argparse as one line), the ``fspo:``
config blocks (:data:`FSPO_NUMBERS`, :data:`VERIFIER_NUMBERS`, checked by :func:`check_numbers` in the
dataclasses' ``__post_init__``) and the record schemas (:meth:`Number.schema`, a msgspec constraint). This module
imports no verl, so ``fspo verify`` (which starts in a tenth of a second) shares it. A value must be finite and fit its dtype as well as its range:
``fspo.fapo_penalty=1e39`` is a finite float64 but becomes -inf in verl's float32 reward tensor, and a seed of
2**64 passes Python's ``int`` but not numpy's ``uint32`` seed.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Annotated, Any

# The dtypes a value ends up in, and the closed range each holds.
FLOAT32_MAX = 3.4028234663852886e38
DTYPE_RANGES = {
    "float32": (-FLOAT32_MAX, FLOAT32_MAX),
    "float64": (-1.7976931348623157e308, 1.7976931348623157e308),
    "int64": (-(2**63), 2**63 - 1),
    "uint32": (0, 2**32 - 1),
}
WHY_DTYPE = {
    "float32": "float32, the dtype of the reward, advantage and loss tensors it enters",
    "float64": "a finite float64",
    "int64": "int64, the integer type torch and numpy count in",
    "uint32": "uint32, numpy's seed type",
}


class NumberError(ValueError):
    """A number outside its option's range or dtype, with the option's name and what it must be."""


@dataclass(frozen=True)
class Number:
    """A numeric option: ``kind`` (int or float), its range and the dtype it ends up in; ``meaning`` is what an
    error asks for (">= 1", "in [0, 1]")."""

    meaning: str
    kind: type = float
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    dtype: str = "float64"

    def problem(self, value: Any) -> str | None:
        """Why ``value`` cannot be this option (None: it can)."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"must be {self.meaning} (a {self.kind.__name__}), got {value!r}"
        if self.kind is int and isinstance(value, float):
            if not value.is_integer():
                return f"must be {self.meaning} (an integer), got {value!r}"
            value = int(value)
        if isinstance(value, float) and not math.isfinite(value):
            return f"must be {self.meaning}, got {value!r}"
        low, high = DTYPE_RANGES[self.dtype]
        if not low <= value <= high:
            return f"must be {self.meaning} and fit {WHY_DTYPE[self.dtype]}, got {value!r}"
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return f"must be {self.meaning}, got {value!r}"
        if self.high is not None and value > self.high:
            bound = "" if f"{self.high:g}" in self.meaning else f" (at most {self.high:g})"
            return f"must be {self.meaning}{bound}, got {value!r}"
        return None

    def check(self, name: str, value: Any) -> Any:
        """``value`` when it fits (None passes: an unset option); else :class:`NumberError` naming ``name``."""
        if value is not None:
            problem = self.problem(value)
            if problem:
                raise NumberError(f"{name} {problem}")
        return value

    def parse(self, text: str) -> int | float:
        """argparse's ``type=``: ``text`` as this option's number, or one :class:`argparse.ArgumentTypeError`."""
        try:
            value = self.kind(text.strip())
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"must be {self.meaning} (a {self.kind.__name__}), got {text!r}") from None
        problem = self.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        return value

    def schema(self) -> Any:
        """This number as a msgspec type: its range (and dtype range) as constraints, so NaN and inf fail too."""
        import msgspec  # here: set-up imports this module (through fspo.cli) before msgspec is installed

        low, high = DTYPE_RANGES[self.dtype]
        if self.low is not None:
            low = max(low, self.low)
        if self.high is not None:
            high = min(high, self.high)
        bounds = {"gt" if self.low_open and self.low is not None and low == self.low else "ge": low, "le": high}
        if self.kind is int:
            return Annotated[int, msgspec.Meta(**{k: int(v) for k, v in bounds.items()})]
        return Annotated[float, msgspec.Meta(**bounds)]


# The options' kinds, shared by the CLI parsers and the config blocks.
PROBABILITY = Number("in [0, 1]", float, 0.0, 1.0, dtype="float32")
OPEN_PROBABILITY = Number("in (0, 1]", float, 0.0, 1.0, low_open=True, dtype="float32")
COUNT = Number(">= 1", int, 1, dtype="int64")
NON_NEGATIVE_COUNT = Number(">= 0", int, 0, dtype="int64")
SEED = Number("an integer in [0, 2**32 - 1]", int, 0, dtype="uint32")
# Seconds end in a timer or a lock's timeout, which refuse more than threading.TIMEOUT_MAX (about 9e9 s).
MAX_SECONDS = 1e9
SECONDS = Number("a finite number of seconds above 0", float, 0.0, MAX_SECONDS, low_open=True)
NON_NEGATIVE_SECONDS = Number("a number of seconds >= 0", float, 0.0, MAX_SECONDS)
# What becomes a reward, an advantage, a loss term or a sampling parameter: float32 in verl's, TRL's and
# vLLM's tensors.
REWARD_TERM = Number("a finite number >= 0", float, 0.0, dtype="float32")
POSITIVE_LOSS_TERM = Number("a finite number above 0", float, 0.0, low_open=True, dtype="float32")
LOSS_TERM = Number("a finite number >= 0", float, 0.0, dtype="float32")
SCORE = Number("a finite number", float, dtype="float32")
EPOCHS = Number("a finite number above 0", float, 0.0, low_open=True, dtype="float32")

# The ``fspo:`` block's numbers (fspo.config.fspo_config.FSPOConfig), by field.
FSPO_NUMBERS = {
    "step_reward_weight": REWARD_TERM,
    "knowrl_fact_weight": REWARD_TERM,
    "knowrl_length_gamma": REWARD_TERM,
    "fapo_penalty": REWARD_TERM,
    "scorer_timeout_s": Number("a number of seconds >= 0 (0 = no limit)", float, 0.0, MAX_SECONDS),
    "rollout_poll_s": SECONDS,
}
# The ``fspo.verifier`` block's numbers (fspo.config.verifier.VerifierConfig), by field; ``fspo verify``'s flags
# of the same name take them from here too.
_POSITIVE_INT = Number("a positive integer or null", int, 1, dtype="int64")
VERIFIER_NUMBERS = {
    "threshold": Number("a number in [0, 1]", float, 0.0, 1.0, dtype="float32"),
    "max_failed_share": Number("a number in [0, 1]", float, 0.0, 1.0),
    "evidence_top_k": Number("a positive integer or null (off)", int, 1, dtype="int64"),
    "cache_size": Number("a non-negative integer", int, 0, dtype="int64"),
    "coalesce_ms": Number("a non-negative number", float, 0.0, MAX_SECONDS),
    "num_gpus": Number("a non-negative number", float, 0.0, 1e6),
    "num_cpus": Number("a non-negative number", float, 0.0, 1e6),
    "start_timeout_s": Number("a positive number of seconds", float, 0.0, MAX_SECONDS, low_open=True),
    "request_timeout_s": Number("a positive number of seconds", float, 0.0, MAX_SECONDS, low_open=True),
    "request_deadline_s": Number(
        "a positive number of seconds or null (2 x request_timeout_s)", float, 0.0, MAX_SECONDS, low_open=True
    ),
    "max_failed_steps": Number("a non-negative integer (0 = never stop)", int, 0, dtype="int64"),
    "max_row_tokens": Number("a non-negative integer (0 = no limit) or null", int, 0, dtype="int64"),
    "max_tokens_per_batch": _POSITIVE_INT,
    "max_length": _POSITIVE_INT,
    "stride": Number("a non-negative integer or null", int, 0, dtype="int64"),
    "max_concurrency": _POSITIVE_INT,
    "timeout_s": Number("a positive number of seconds or null", float, 0.0, MAX_SECONDS, low_open=True),
    "max_retries": Number("a non-negative integer or null", int, 0, dtype="int64"),
    "backoff_s": Number("a non-negative number of seconds or null", float, 0.0, MAX_SECONDS),
    "max_tokens": _POSITIVE_INT,
    "temperature": Number("a non-negative number or null", float, 0.0, dtype="float32"),
}


def check_numbers(instance: Any, numbers: dict[str, Number], prefix: str, error: type[Exception]) -> None:
    """Check the fields of ``instance`` that ``numbers`` declares; ``error("prefix.field must be ...")``."""
    for name, number in numbers.items():
        try:
            number.check(f"{prefix}.{name}", getattr(instance, name))
        except NumberError as refused:
            raise error(str(refused)) from None
