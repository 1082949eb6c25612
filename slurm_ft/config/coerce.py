"""A value from any layer (a YAML scalar, an environment string, an argparse string) turned
into its setting's declared type, or one ConfigError naming the key path."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from slurm_ft.config.checks import validate
from slurm_ft.config.sections import SECTIONS, YAML_ROOT, ConfigError, Settings


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _key_types() -> dict[str, Any]:
    """Every settable dotted key ('launch.max_restarts', 'state_dir') and its type."""
    out: dict[str, Any] = {}
    for name, tp in _field_types(Settings).items():
        if name in SECTIONS:
            for sub, subtp in _field_types(tp).items():
                out[f"{name}.{sub}"] = subtp
        else:
            out[name] = tp
    return out


KEY_TYPES: dict[str, Any] = _key_types()


def _coerce(path: str, tp: Any, value: Any) -> Any:
    """Turn a YAML scalar or a string into ``tp``; raise ConfigError with the key path."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        is_empty = value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null"))
        if is_empty and type(None) in args:
            return None
        return _coerce(path, non_none[0], value)
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{YAML_ROOT}.{path}: expected one of {', '.join(map(str, args))}, got {value!r}")
    if origin is list:
        (item_tp,) = args
        if isinstance(value, str):
            items: list[Any] = [p.strip() for p in value.split(",") if p.strip()]
        elif isinstance(value, list | tuple):
            items = list(value)
        else:
            raise ConfigError(f"{YAML_ROOT}.{path}: expected a list, got {value!r}")
        return [_coerce(path, item_tp, v) for v in items]
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{YAML_ROOT}.{path}: expected bool, got {value!r}")
    if tp is int or tp is float:
        return _number(path, tp, value)
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{YAML_ROOT}.{path}: expected string, got {value!r}")
    raise ConfigError(f"{YAML_ROOT}.{path}: unsupported setting type {tp!r}")


def _number(path: str, tp: type[int] | type[float], value: Any) -> int | float:
    """An int setting takes an int or its digits; a float one an int, a float or their
    text. A bool is neither, though Python calls it an int."""
    taken = (int,) if tp is int else (int, float)
    if isinstance(value, taken) and not isinstance(value, bool):
        return tp(value)
    if isinstance(value, str):
        try:
            return tp(value.strip())
        except ValueError:
            pass
    raise ConfigError(f"{YAML_ROOT}.{path}: expected {'int' if tp is int else 'number'}, got {value!r}")


def apply(settings: Settings, values: Mapping[str, Any]) -> Settings:
    """Return a copy of ``settings`` with dotted keys replaced (coerced to their types)."""
    new = dataclasses.replace(
        settings,
        **{s: dataclasses.replace(getattr(settings, s)) for s in SECTIONS},
    )
    for key, raw in values.items():
        if key not in KEY_TYPES:
            raise ConfigError(f"{YAML_ROOT}.{key}: unknown setting")
        value = _coerce(key, KEY_TYPES[key], raw)
        if "." in key:
            section, name = key.split(".", 1)
            setattr(getattr(new, section), name, value)
        else:
            setattr(new, key, value)
    validate(new)
    return new
