"""Checks several commands make on their arguments before anything slow, each raising one :class:`UsageError`.

A command catches it and prints one line, ``<prog>: <message>``, on stderr and exits 2 (:func:`refuse`).
Each command keeps its own checks in its own module; what several share lives here.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

from fspo.utils.input_files import InputFileError, read_hf_config


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Every fspo command's help: the description as written, and each option's text ending in its default as the
    user would type it, unless the text already says it (or there is none worth saying: no value, off, an empty
    list)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or not action.option_strings or default_is_unset(action.default):
            return text
        return f"{text} (default {typed_default(action).replace('%', '%%')})"


def default_is_unset(default: object) -> bool:
    """No value, off (False, not 0: a seed of 0 is a value), an empty list, or argparse's SUPPRESS."""
    return default is None or default is False or default == [] or default == argparse.SUPPRESS


def typed_default(action: argparse.Action) -> str:
    """An option's default as typed on the command line: a list space-separated, an on-switch by its flag."""
    default = action.default
    if default is True:
        # --x/--no-x on by default: the flag that keeps it so; a store_false switch: off when given.
        return action.option_strings[0] if isinstance(action, argparse.BooleanOptionalAction) else "off when not given"
    if isinstance(default, (list, tuple)):
        return " ".join(str(item) for item in default)
    return str(default)


class UsageError(ValueError):
    """An argument or input file that cannot work, with what to fix."""


class SettingFailure(RuntimeError):
    """A command that cannot go on under its settings (a verifier whose model gives NaN in float16), with the
    setting to change: every ``fspo`` command prints it as one line and exits 2."""


def refuse(prog: str, error: Exception | str) -> int:
    """Print ``prog: error`` as one line on stderr; the exit status of a refused command (2)."""
    print(f"{prog}: {' '.join(str(error).split())}", file=sys.stderr)
    return 2


def check_count(flag: str, value: int | None, minimum: int = 1) -> None:
    """``value`` (when given) is an integer of at least ``minimum``."""
    if value is not None and value < minimum:
        raise UsageError(f"{flag} must be >= {minimum}, got {value}")


def check_probability(flag: str, value: float | None) -> None:
    """``value`` (when given) is in [0, 1]; NaN is not."""
    if value is not None and not 0.0 <= value <= 1.0:
        raise UsageError(f"{flag} must be in [0, 1], got {value}")


def check_positive_number(flag: str, value: float | None) -> None:
    """``value`` (when given) is finite and above 0."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UsageError(f"{flag} must be a finite number above 0, got {value}")


def check_model_dir(flag: str, path: str | os.PathLike) -> None:
    """``path`` is a Hugging Face model folder transformers can load: a readable config.json and weights.

    Reads no weights: a folder that passes may still hold a damaged weight file.
    """
    path = Path(os.path.expanduser(str(path)))
    if not path.is_dir():
        raise UsageError(f"{flag} {path} is not a folder: give a Hugging Face model folder")
    config = path / "config.json"
    if not config.is_file():
        raise UsageError(
            f"{flag} {path} has no config.json: give a Hugging Face model folder (for a training "
            "checkpoint, merge it first: scripts/merge_checkpoint.sh)"
        )
    try:
        read_hf_config(path)
    except InputFileError as error:
        raise UsageError(f"{flag} {error}") from None
    weights = [
        p
        for p in path.iterdir()
        if p.suffix in (".safetensors", ".bin", ".pt", ".gguf")
        or p.name.endswith((".safetensors.index.json", ".bin.index.json"))
    ]
    if not weights:
        raise UsageError(
            f"{flag} {path} holds no weights (*.safetensors or pytorch_model.bin): an unfinished download or merge?"
        )


def check_overrides(overrides: list[str]) -> None:
    """Each of ``overrides`` is a Hydra override (``key=value``, ``+key=value``, ``~key``) Hydra can parse.

    Hydra's own error for a malformed one is several lines; a command that hands overrides to the trainer
    checks them here first, as one line, before it starts anything.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    for override in overrides:
        shown = override.encode("utf-8", "backslashreplace").decode("utf-8")
        try:
            override.encode("utf-8")
            parser.parse_override(override)
        except UnicodeEncodeError:
            raise UsageError(f"override {shown!r} is not Unicode text (an unpaired surrogate)") from None
        except HydraException as error:
            reason = " ".join(str(error).split())[:160]
            raise UsageError(f"override {shown!r} is not a Hydra override key=value ({reason})") from None


def _config_keys(node, prefix: str = "") -> set[str]:
    from omegaconf import OmegaConf

    keys = set()
    if OmegaConf.is_dict(node):
        for key in node.keys():
            keys.add(f"{prefix}{key}")
            keys |= _config_keys(node._get_node(key), f"{prefix}{key}.")
    return keys


def known_config_keys(config_dir: Path) -> set[str]:
    """Every key of verl's PPO trainer config (its generated, flattened file), of the YAML files in
    ``config_dir`` (fspo_trainer.yaml and its platform presets), and of Hydra's own ``hydra.`` config."""
    from hydra.conf import HydraConf
    from omegaconf import OmegaConf
    from verl.trainer import config as verl_config

    files = [Path(verl_config.__file__).with_name("_generated_ppo_trainer.yaml"), *config_dir.rglob("*.yaml")]
    keys = _config_keys(OmegaConf.structured(HydraConf), "hydra.")
    for path in files:
        node = OmegaConf.load(path)
        keys |= _config_keys(node)
    return keys


def check_override_keys(overrides: list[str], config_dir: Path, config_name: str) -> None:
    """A plain ``key=value`` whose key the config does not have is one line naming the keys it resembles.

    Hydra refuses it too, in six lines that suggest ``+key`` (a new key), which is rarely what a typo wants.
    A key not found among :func:`known_config_keys` is confirmed by composing the config as Hydra will
    (about a second, paid only then), so a key this list misses is never refused here.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    dotted = [o for o in parsed if not (o.is_add() or o.is_delete() or o.is_force_add()) and "." in o.key_or_group]
    if not dotted:
        return
    known = known_config_keys(config_dir)
    unknown = [o.key_or_group for o in dotted if o.key_or_group not in known and "/" not in o.key_or_group]
    if not unknown or _composes(overrides, config_dir, config_name):
        return
    import difflib

    key = unknown[0]
    siblings = [name for name in known if name.count(".") == key.count(".")]  # a typo keeps the depth
    close = difflib.get_close_matches(key, siblings, n=3, cutoff=0.75)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise UsageError(f"{key}: no such config key; {hint}(a key of your own takes a +: +{key}=...)")


def _composes(overrides: list[str], config_dir: Path, config_name: str) -> bool:
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        try:
            compose(config_name=config_name, overrides=overrides)
        except ConfigCompositionException:
            return False
        except Exception:  # noqa: BLE001 - any other fault is Hydra's to report, as it will at launch
            return True
    return True
