"""Every model backend loads its checkpoint through :func:`from_pretrained_checked`, which refuses a checkpoint
of the wrong architecture: one whose weights do not fill the backend's model, so that transformers would
initialise part of it at random (a classification head on a causal LM or a T5 checkpoint) and the verifier
would score with noise.

Before transformers reads anything, what is cheap to check is: each ``*.safetensors`` file's header (a malformed
or truncated one is one line naming the file, not safetensors' ``HeaderTooLarge``), and a checkpoint transformers
cannot find or read (missing offline, no weights) is one line, not its several-line ``OSError``.
:func:`check_window` holds a backend's window to the model's position table.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from fspo.utils.input_files import InputFileError, parse_json_bytes


def from_pretrained_checked(model_class, model_path: str, **kwargs):
    """``model_class.from_pretrained(model_path, **kwargs)``; ValueError naming the checkpoint, its
    architecture and the weights it lacks where transformers reports any newly initialised (missing keys, or
    mismatched shapes), a malformed weights file, or a checkpoint that cannot be found or read."""
    if Path(model_path).is_dir():
        for weights in sorted(Path(model_path).glob("*.safetensors")):
            check_safetensors_header(weights)
    try:
        model, report = model_class.from_pretrained(model_path, output_loading_info=True, **kwargs)
    except OSError as error:  # transformers' several lines: missing offline, no weights, a gated repository
        reason = " ".join(str(error).split())[:300]
        raise ValueError(f"{model_path}: cannot load the checkpoint ({reason})") from None
    fresh = [*report.get("missing_keys", ()), *(_key(item) for item in report.get("mismatched_keys", ()))]
    if fresh:
        saved = ", ".join(getattr(model.config, "architectures", None) or [model.config.model_type])
        shown = ", ".join(sorted(fresh)[:3]) + (f" and {len(fresh) - 3} more" if len(fresh) > 3 else "")
        raise ValueError(
            f"{model_path} is a {saved} checkpoint, not a {type(model).__name__}: it lacks {shown}, which "
            "would be initialised at random; give a checkpoint of this verifier's architecture"
        )
    return model


def _key(item) -> str:
    return item[0] if isinstance(item, tuple | list) else str(item)


def check_safetensors_header(path: str | os.PathLike) -> None:
    """ValueError naming ``path`` unless it starts as a safetensors file does: an 8-byte little-endian length,
    then that many bytes of a JSON object whose tensors' ``data_offsets`` lie inside the file."""
    path = Path(path)
    size = path.stat().st_size
    problem = None
    with open(path, "rb") as handle:
        head = handle.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else None
        if length is None or length > size - 8:
            problem = f"its header says {length} bytes, the file holds {size}" if length else "it is too short"
        else:
            try:
                header = parse_json_bytes(path, handle.read(length))
            except InputFileError:
                header = None
            if not isinstance(header, dict):
                problem = "its header is not a JSON object"
            else:
                ends = [
                    entry.get("data_offsets", [0, 0])[-1]
                    for name, entry in header.items()
                    if name != "__metadata__" and isinstance(entry, dict)
                ]
                if len(ends) != len(header) - ("__metadata__" in header) or any(
                    not isinstance(end, int) or end > size - 8 - length for end in ends
                ):
                    problem = "its tensors lie beyond the end of the file (a cut-short download?)"
    if problem:
        raise ValueError(f"{path} is not a readable safetensors file ({problem}): download or save it again")


def check_window(model_path: str, key: str, window: int, limit: int) -> None:
    """ValueError unless a backend's ``window`` (option ``key``) fits the model's position ``limit``: a longer
    input indexes past the position table (a CUDA device-side assert, or an IndexError on a CPU)."""
    if window > limit:
        raise ValueError(
            f"fspo.verifier.{key}={window} exceeds {model_path}'s position limit of {limit} tokens "
            f"(max_position_embeddings): set {key} <= {limit} or leave it null"
        )
