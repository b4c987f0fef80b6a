"""Token labels as a string, for their trip through verl's ``reward_extra_info``.

verl carries ``reward_extra_info`` values as one scalar or string per rollout, so the reward manager
(:mod:`fspo.reward`) sends each response's labels run-length encoded and the trainer (:mod:`fspo.trainer`)
decodes them against the response length it sees.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

LABEL_VALUES = (-1, 0, 1)
_RUN = re.compile(r"(-1|0|1)x([1-9][0-9]*)")


def encode_labels(labels: Sequence[int]) -> str:
    """Run-length encode labels as a string, e.g. `[0, 0, 1, -1]` -> `"0x2,1x1,-1x1"`; `[]` -> `""`."""
    runs: list[str] = []
    previous, count = None, 0
    for label in labels:
        label = int(label)
        if label not in LABEL_VALUES:
            raise ValueError(f"labels must be -1, 0 or 1, got {label}")
        if label == previous:
            count += 1
            continue
        if previous is not None:
            runs.append(f"{previous}x{count}")
        previous, count = label, 1
    if previous is not None:
        runs.append(f"{previous}x{count}")
    return ",".join(runs)


def decode_labels(encoded: str, length: int | None = None) -> list[int]:
    """Inverse of `encode_labels`.

    Args:
        encoded: A string made by `encode_labels`.
        length: If given, the number of labels expected; a different number raises (no padding or cutting:
            a mismatch means labels and tokens got out of step).

    Raises:
        ValueError: On a malformed run (naming it) or a length mismatch.
        TypeError: If `encoded` is not a str.
    """
    if not isinstance(encoded, str):
        raise TypeError(f"encoded labels must be a str, got {type(encoded).__name__}")
    labels: list[int] = []
    if encoded:
        for position, run in enumerate(encoded.split(",")):
            match = _RUN.fullmatch(run)
            if match is None:
                raise ValueError(
                    f"malformed label run {run!r} at position {position} in {encoded[:80]!r}: "
                    "expected '<label>x<count>' with label -1, 0 or 1 and a positive count"
                )
            count = int(match.group(2))
            # Check before allocating: a corrupt run such as "1x99999999999" must not exhaust memory.
            if length is not None and len(labels) + count > length:
                raise ValueError(f"encoded labels hold more than {len(labels) + count - 1} labels, expected {length}")
            labels.extend([int(match.group(1))] * count)
    if length is not None and len(labels) != length:
        raise ValueError(f"encoded labels hold {len(labels)} labels, expected {length}")
    return labels
