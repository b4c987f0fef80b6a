"""A config node as a typed dataclass, with one clear line naming the key when a value does not fit."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping

from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from fspo.config.vocabulary import ConfigError


def public_fields(cls: type) -> list[str]:
    """The keys a user sets in a config dataclass (verl's ``_target_`` left out)."""
    return [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]


def _dataclass_at(cls: type, path: list[str]) -> type:
    """The dataclass that holds the key at ``path`` (dotted parts below ``cls``)."""
    for part in path[:-1]:
        hints = typing.get_type_hints(cls)
        if part not in hints or not dataclasses.is_dataclass(hints[part]):
            break
        cls = hints[part]
    return cls


def to_dataclass(node, cls: type, prefix: str):
    """``node`` (a ``DictConfig`` or mapping) as dataclass ``cls``, through verl's ``omega_conf_to_dataclass``.

    verl merges the node onto ``OmegaConf.structured(cls)``, so every value is type-checked against the
    field's annotation and a key the dataclass lacks is refused; the dataclass's ``__post_init__`` then
    checks ranges. Each failure becomes a :class:`~fspo.config.vocabulary.ConfigError` of one line that names the
    full key under ``prefix`` (``fspo.flip: Value 'maybe' is not a valid bool (type str)``).
    """
    from verl.utils.config import omega_conf_to_dataclass

    if isinstance(node, cls):
        return node
    if node is not None and not isinstance(node, Mapping):
        raise ConfigError(f"{prefix} must be a mapping of options, got {type(node).__name__} {node!r:.80}")
    try:
        return omega_conf_to_dataclass(node or {}, cls)
    except ConfigKeyError as error:
        path = str(error.full_key).split(".")
        owner = _dataclass_at(cls, path)
        raise ConfigError(
            f"unknown key {prefix}.{error.full_key}; valid keys of {prefix}"
            f"{''.join('.' + p for p in path[:-1])}: {', '.join(public_fields(owner))}"
        ) from None
    except OmegaConfBaseException as error:
        reason = str(error).splitlines()[0]
        raise ConfigError(f"{prefix}.{error.full_key}: {reason}") from None
