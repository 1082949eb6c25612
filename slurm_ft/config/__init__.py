"""Settings for every command: defaults < YAML file < SLURM_FT_* environment < command line.

One dataclass tree serves all three commands so that a YAML file written for the launcher
also configures the health check it runs and the progress guard a template calls. Values
arrive as strings from the environment and from argparse, and as YAML scalars from the
file; one coercion routine turns all of them into the declared field type, so a typo is
reported the same way whatever layer it came from: with its full key path.

Environment names mirror the YAML path: ``slurm_ft.launch.max_restarts`` is
``SLURM_FT_LAUNCH_MAX_RESTARTS``; top-level keys drop the section (``SLURM_FT_STATE_DIR``).
Variables that do not start with a known section prefix are left alone, because the
launcher itself exports ``SLURM_FT_CYCLE`` and friends to workers.

The rooms: :mod:`sections` (the dataclasses: what can be set, and the defaults),
:mod:`coerce` (a value of any layer into its type), :mod:`checks` (what a type cannot
express); here, the layers read and stacked.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from slurm_ft.config.checks import validate
from slurm_ft.config.coerce import KEY_TYPES, apply
from slurm_ft.config.sections import (
    CONFIG_ENV,
    ENV_PREFIX,
    SECTIONS,
    YAML_ROOT,
    AppLogSettings,
    ConfigError,
    HangSettings,
    HealthSettings,
    LaunchSettings,
    ProgressSettings,
    Settings,
)

__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "KEY_TYPES",
    "SECTIONS",
    "YAML_ROOT",
    "AppLogSettings",
    "ConfigError",
    "HangSettings",
    "HealthSettings",
    "LaunchSettings",
    "ProgressSettings",
    "Settings",
    "apply",
    "as_dict",
    "describe_keys",
    "did_you_mean",
    "env_name",
    "env_values",
    "load",
    "read_yaml",
    "validate",
]


def _flatten_yaml(doc: Any, source: str) -> dict[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, dict) or set(doc) != {YAML_ROOT}:
        raise ConfigError(f"{source}: expected a top-level '{YAML_ROOT}:' mapping and nothing else")
    root = doc[YAML_ROOT] or {}
    if not isinstance(root, dict):
        raise ConfigError(f"{source}: '{YAML_ROOT}' must be a mapping")
    flat: dict[str, Any] = {}
    for key, value in root.items():
        if key in SECTIONS:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"{YAML_ROOT}.{key}: expected a mapping, got {value!r}")
            for sub, subvalue in value.items():
                flat[f"{key}.{sub}"] = subvalue
        else:
            flat[str(key)] = value
    return flat


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Dotted keys of a config file; unreadable or malformed files are ConfigErrors."""
    import yaml  # lazily: the health check and progress guard start without a config file

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path}{where}: not valid YAML") from None
    return _flatten_yaml(doc, str(path))


def env_values(env: Mapping[str, str]) -> dict[str, str]:
    """Dotted keys from SLURM_FT_* variables; unknown names under a known section are errors."""
    out: dict[str, str] = {}
    by_env = {env_name(key): key for key in KEY_TYPES}
    section_prefixes = tuple(f"{ENV_PREFIX}{s.upper()}_" for s in SECTIONS)
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV:
            continue
        if name in by_env:
            out[by_env[name]] = value
        elif name.startswith(section_prefixes):
            section = next(p for p in section_prefixes if name.startswith(p))
            raise ConfigError(
                f"environment variable {name}: unknown setting{did_you_mean(name, by_env, section)}"
            )
    return out


def env_name(key: str) -> str:
    return ENV_PREFIX + key.replace(".", "_").upper()


def load(
    env: Mapping[str, str],
    config_file: str | None = None,
    cli: Mapping[str, Any] | None = None,
    cli_names: Mapping[str, str] | None = None,
) -> Settings:
    """Build the effective settings. ``cli`` holds only options the user actually gave.

    ``config_file`` defaults to ``$SLURM_FT_CONFIG`` when the command line names none.
    A value that cannot be used is reported with where it came from: the file and its key,
    the environment variable, or the option (``cli_names``: setting key -> option).
    """
    settings = Settings()
    path = config_file or env.get(CONFIG_ENV) or None
    if path:
        settings = _layer(settings, read_yaml(path), lambda key: f"config file {path}: {YAML_ROOT}.{key}")
    settings = _layer(settings, env_values(env), lambda key: f"environment variable {env_name(key)}")
    if cli:
        names = cli_names or {}
        settings = _layer(
            settings,
            {k: v for k, v in cli.items() if v is not None},
            lambda key: names.get(key, f"{YAML_ROOT}.{key}"),
        )
    return settings


def _layer(settings: Settings, values: Mapping[str, Any], source: Callable[[str], str]) -> Settings:
    """``apply`` one layer a key at a time, so that an error names the key's source."""
    for key, raw in values.items():
        if key not in KEY_TYPES:
            section = f"{YAML_ROOT}.{key.split('.', 1)[0]}." if "." in key else f"{YAML_ROOT}."
            near = did_you_mean(f"{YAML_ROOT}.{key}", [f"{YAML_ROOT}.{k}" for k in KEY_TYPES], section)
            raise ConfigError(f"{source(key)}: unknown setting{near}")
        try:
            settings = apply(settings, {key: raw})
        except ConfigError as exc:
            own, text, where = f"{YAML_ROOT}.{key}", str(exc), source(key)
            if where != own:
                text = (
                    f"{where}: {text[len(own) + 2 :]}"
                    if text.startswith(own + ": ")
                    else f"{text} (set by {where})"
                )
            raise ConfigError(text) from None
    return settings


def did_you_mean(word: str, known: Iterable[str], prefix: str = "") -> str:
    """`` (did you mean X?)`` for the nearest known spelling, or "" when none is near.
    Only what follows the shared ``prefix`` is compared (``SLURM_FT_HEALTH_COLOUR`` is not
    near ``SLURM_FT_HEALTH_SCONTROL`` for sharing a long start)."""
    import difflib  # only on this error path

    tails = {k[len(prefix) :]: k for k in known if k.startswith(prefix)}
    tail = word[len(prefix) :]
    longer = [t for t in tails if tail and t.startswith(tail)]  # an abbreviation
    close = longer if len(longer) == 1 else difflib.get_close_matches(tail, list(tails), n=1, cutoff=0.75)
    return f" (did you mean {tails[close[0]]}?)" if close else ""


def as_dict(settings: Settings) -> dict[str, Any]:
    return dataclasses.asdict(settings)


def describe_keys() -> list[tuple[str, str, str]]:
    """(yaml key, environment variable, default) for every setting; used for the README."""
    defaults = as_dict(Settings())
    rows = []
    for key in KEY_TYPES:
        value: Any = defaults
        for part in key.split("."):
            value = value[part]
        rows.append((f"{YAML_ROOT}.{key}", env_name(key), repr(value)))
    return rows
