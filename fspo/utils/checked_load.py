"""The one door through which fspo loads a model, a tokenizer or a model config (tests/test_model_door.py keeps
it the only one): a checkpoint that cannot serve is refused in one line naming it, before transformers reads
it or fails in the middle of a run.

What is checked before transformers reads anything: each ``*.safetensors`` file's header (a malformed or truncated
one, or a dtype safetensors does not know, is one line naming the file, not safetensors' ``HeaderTooLarge``), and
the position table against the lengths the caller will use (a longer input indexes past it: a CUDA device-side
assert, or an IndexError on a CPU). A checkpoint transformers cannot find or read (missing offline, no weights) is
one line, not its several-line ``OSError``. After loading: a model whose weights do not fill it (transformers
initialised part of it at random: a classification head on a causal LM, a T5 checkpoint) is refused unless the
caller adds that part on purpose (a new head to train).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

from fspo.utils.input_files import InputFileError, parse_json, parse_json_bytes, read_text

# The dtypes safetensors' torch loader reads (safetensors 0.8.0, safetensors/torch.py:428-450): any other is a file
# written wrong or for another framework.
ADAPTER_CONFIG = "adapter_config.json"  # a PEFT adapter's settings, beside or instead of a model's weights
FLOAT32_TINY, FLOAT32_MAX = 2.0**-126, (2 - 2.0**-23) * 2.0**127  # float32's normal range (torch.finfo)
SAFETENSORS_DTYPES = frozenset(
    "F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E4M3FNUZ F8_E5M2 F8_E5M2FNUZ C64 U64 U32 U16".split()
)


def from_pretrained_checked(
    model_class,
    model_path: str,
    *,
    positions_needed: int | None = None,
    needed_for: str = "",
    missing_ok: bool = False,
    **kwargs,
):
    """``model_class.from_pretrained(model_path, **kwargs)`` after :func:`check_model_files`; ValueError naming the
    checkpoint, its architecture and the weights it lacks where transformers reports any newly initialised (missing
    keys, or mismatched shapes), unless ``missing_ok``: the caller fills or trains what is missing (a base model
    given a fresh head to train, HHEM's t5 weights re-read from its file)."""
    check_model_files(model_path, positions_needed, needed_for, **_config_options(kwargs))
    model, report = _read(model_path, model_class.from_pretrained, output_loading_info=True, **kwargs)
    fresh = [*report.get("missing_keys", ()), *(_key(item) for item in report.get("mismatched_keys", ()))]
    if fresh and not missing_ok:
        saved = ", ".join(getattr(model.config, "architectures", None) or [model.config.model_type])
        shown = ", ".join(sorted(fresh)[:3]) + (f" and {len(fresh) - 3} more" if len(fresh) > 3 else "")
        raise ValueError(
            f"{model_path} is a {saved} checkpoint, not a {type(model).__name__}: it lacks {shown}, which "
            "would be initialised at random; give a checkpoint of this verifier's architecture"
        )
    return model


def load_tokenizer(model_path: str, **kwargs):
    """``AutoTokenizer.from_pretrained(model_path, **kwargs)``; ValueError in one line where it cannot load."""
    from transformers import AutoTokenizer

    return _read(model_path, AutoTokenizer.from_pretrained, what="tokenizer", **kwargs)


def load_config(model_path: str, **kwargs):
    """``AutoConfig.from_pretrained(model_path, **kwargs)``; ValueError in one line where it cannot load."""
    from transformers import AutoConfig

    return _read(model_path, AutoConfig.from_pretrained, what="config", **kwargs)


def _read(model_path: str, loader, what: str = "checkpoint", **kwargs):
    try:
        return loader(str(model_path), **kwargs)
    except (OSError, ValueError, KeyError) as error:  # transformers' several lines: missing offline, no weights
        reason = " ".join(str(error).split())[:300]
        raise ValueError(f"{model_path}: cannot load the {what} ({reason})") from None


def _config_options(kwargs: dict) -> dict:
    return {key: kwargs[key] for key in ("trust_remote_code", "revision") if key in kwargs}


def check_model_files(model_path: str, positions_needed: int | None = None, needed_for: str = "", **config_options):
    """ValueError naming the file unless every ``*.safetensors`` header of a model folder reads
    (:func:`check_safetensors_header`) and, where ``positions_needed`` is given, the model's position table
    holds that many tokens (``needed_for`` says which setting needs them, e.g. ``--max-length 64``)."""
    if Path(model_path).is_dir():
        for weights in sorted(Path(model_path).glob("*.safetensors")):
            check_safetensors_header(weights)
        if (Path(model_path) / ADAPTER_CONFIG).is_file():  # transformers loads it through peft
            check_adapter_config(Path(model_path) / ADAPTER_CONFIG)
    if positions_needed is not None:
        limit = position_limit(model_path, **config_options)
        if limit is not None and positions_needed > limit:
            raise ValueError(
                f"{model_path} has {limit} positions (max_position_embeddings) but {needed_for} needs "
                f"{positions_needed}: lower it to <= {limit} or use a model with a longer position table"
            )


def adapter_scale_problem(alpha: object, rank: object) -> str | None:
    """Why a LoRA adapter's scale ``lora_alpha / r`` cannot serve, or None: each must be a positive finite number
    (``r`` an integer), and the scale must be a normal float32 (the dtype the fold computes in, and the widest a
    float32 model adds it in): beyond it ``scale * B A`` is inf, below it the adapter vanishes."""
    import math

    for key, value in (("r", rank), ("lora_alpha", alpha)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            return f"{key} must be a positive number, got {value!r}"
    if not isinstance(rank, int):
        return f"r must be an integer, got {rank!r}"
    scale = alpha / rank
    if not FLOAT32_TINY <= scale <= FLOAT32_MAX:
        return (
            f"lora_alpha={alpha!r} / r={rank} is {scale!r}, outside float32's normal range (the adapter would add "
            "inf or nothing): use a lora_alpha / r within it"
        )
    return None


def _json_object(path: Path, what: str, fix: str) -> dict:
    """A JSON file that must hold an object, read through the JSON door; ValueError naming it and ``fix``."""
    try:
        value = parse_json(path, read_text(path, what), expect=None)
    except InputFileError as error:
        raise ValueError(f"{error}: {fix}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path} is not a JSON object: {fix}")
    return value


def check_adapter_config(path: Path) -> None:
    """ValueError naming ``path`` unless a PEFT adapter's config is a JSON object whose LoRA scale can serve
    (:func:`adapter_scale_problem`; an adapter of another kind, without ``r``, is peft's to read)."""
    config = _json_object(path, "adapter config", "save the adapter again")
    if "r" in config or "lora_alpha" in config:
        problem = adapter_scale_problem(config.get("lora_alpha"), config.get("r"))
        if problem:
            raise ValueError(f"{path}: {problem}")


def position_limit(model_path: str, **config_options) -> int | None:
    """The longest input a model's position table holds, or None where it has none (T5's relative positions).
    A folder's config.json is read as JSON: no transformers, and no remote code for a custom architecture."""
    config_file = Path(model_path) / "config.json"
    if config_file.is_file():
        config = _json_object(config_file, "model config", "save the model again")
    else:
        config = load_config(model_path, **config_options).to_dict()
    for scope in (config, config.get("text_config") or {}):  # a multimodal model's language model
        for name in ("max_position_embeddings", "n_positions"):
            if isinstance(scope.get(name), int):
                return scope[name]
    return None


def _key(item) -> str:
    return item[0] if isinstance(item, tuple | list) else str(item)


def check_safetensors_header(path: str | os.PathLike) -> None:
    """ValueError naming ``path`` unless it starts as a safetensors file does: an 8-byte little-endian length,
    then that many bytes of a JSON object whose tensors' ``data_offsets`` lie inside the file and whose dtypes
    are safetensors' own."""
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
                tensors = {name: entry for name, entry in header.items() if name != "__metadata__"}
                unknown = sorted(
                    str(entry.get("dtype"))
                    for entry in tensors.values()
                    if isinstance(entry, dict) and entry.get("dtype") not in SAFETENSORS_DTYPES
                )
                ends = [
                    entry.get("data_offsets", [0, 0])[-1]
                    for name, entry in header.items()
                    if name != "__metadata__" and isinstance(entry, dict)
                ]
                if len(ends) != len(header) - ("__metadata__" in header) or any(
                    not isinstance(end, int) or end > size - 8 - length for end in ends
                ):
                    problem = "its tensors lie beyond the end of the file (a cut-short download?)"
                elif unknown:
                    problem = f"its tensors have dtype {unknown[0]}, which safetensors does not know"
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
