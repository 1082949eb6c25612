"""What each of NVIDIA ft_launcher's options does to the settings: the values they take
(converted with messages that name the option as written) and the appliers that write
them into a :class:`Translation` (settings overrides plus health-check edits). The table
that names them is :mod:`slurm_ft.compat.fttable`; the reading of a command line and a
YAML section is :mod:`slurm_ft.compat.ftlauncher`."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurm_ft.compat.errors import CompatError

OFF_VALUES = ("", "none", "null", "false", "0", "no", "off")

Value = str | int | float | bool | dict[str, Any] | None


@dataclass
class Translation:
    """Settings overrides (dotted keys) plus health-check edits, from --ft-* and YAML."""

    overrides: dict[str, Any] = field(default_factory=dict)
    checks_on: set[str] = field(default_factory=set)
    checks_off: set[str] = field(default_factory=set)
    config_file: str | None = None
    notes: list[str] = field(default_factory=list)

    def check(self, name: str, on: bool) -> None:
        """Turn the health check ``name`` on or off; the later option wins."""
        (self.checks_on if on else self.checks_off).add(name)
        (self.checks_off if on else self.checks_on).discard(name)


Apply = Callable[[str, Value, Translation], None]


# -- value converters (messages name the option as written) ---------------------------


def as_text(what: str, v: Value) -> str:
    if isinstance(v, dict | bool) or v is None:
        raise CompatError(f"{what}: expected a value, got {v!r}")
    return str(v).strip()


def number(what: str, v: Value) -> float:
    try:
        return float(as_text(what, v))
    except ValueError:
        raise CompatError(f"{what}: expected a number of seconds, got {v!r}") from None


def opt_number(what: str, v: Value) -> float | None:
    if v is None or (isinstance(v, str) and v.strip().lower() in ("", "none", "null")):
        return None
    return number(what, v)


def integer(what: str, v: Value) -> int:
    text = as_text(what, v)
    if not re.fullmatch(r"-?[0-9]+", text):
        raise CompatError(f"{what}: expected an integer, got {v!r}")
    return int(text)


def boolean(what: str, v: Value) -> bool:
    if isinstance(v, bool):
        return v
    text = as_text(what, v).lower()
    if text in ("1", "true", "yes"):
        return True
    if text in ("0", "false", "no"):
        return False
    raise CompatError(f"{what}: expected true or false, got {v!r}")


def is_off(v: Value) -> bool:
    if v is None or v is False:
        return True
    if isinstance(v, dict):
        return not v
    return str(v).strip().lower() in OFF_VALUES


# -- appliers ------------------------------------------------------------------------


def sets(key: str, convert: Callable[[str, Value], Any] = as_text) -> Apply:
    def apply(what: str, v: Value, t: Translation) -> None:
        t.overrides[key] = convert(what, v)

    return apply


def no_progress_cycles(what: str, v: Value, t: Translation) -> None:
    # ft_launcher: 0 or -1 disables the progress guard; here 0 does.
    t.overrides["progress.max_no_progress_cycles"] = max(0, integer(what, v))


def tolerance_mb(what: str, v: Value, t: Translation) -> None:
    t.overrides["launch.gpu_release_tolerance_mib"] = round(number(what, v))


def nic_check(what: str, v: Value, t: Translation) -> None:
    on = boolean(what, v)
    t.check("nic", on)
    if on:
        # ft_launcher fails a port that went from ACTIVE to not ACTIVE: the transition mode.
        t.overrides["health.nic_mode"] = "transition"


def storage_paths(what: str, v: Value, t: Translation) -> None:
    paths = [p.strip() for p in as_text(what, v).split(",") if p.strip()]
    bad = [p for p in paths if not p.startswith("/")]
    if bad:
        raise CompatError(f"{what}: paths must be absolute, got {bad[0]!r}")
    t.overrides["health.paths"] = paths
    if paths:
        t.check("storage", True)


def dist_storage(what: str, v: Value, t: Translation) -> None:
    on = boolean(what, v)
    t.overrides["health.discover_mounts"] = on
    if on:
        t.check("storage", True)


def base_logfile(what: str, v: Value, t: Translation) -> None:
    path = as_text(what, v)
    t.overrides["applog.launcher_log"] = path
    t.overrides["applog.prefix"] = path


def health_interval(what: str, v: Value, t: Translation) -> None:
    # ft_launcher's off values (none, 0) are slurm-ft's 0: checks before each join only.
    seconds = 0.0 if is_off(v) else number(what, v)
    if seconds < 0:
        raise CompatError(f"{what}: expected a number of seconds >= 0, got {v!r}")
    t.overrides["health.check_interval"] = seconds


def restart_policy(what: str, v: Value, t: Translation) -> None:
    if as_text(what, v) != "any-failed":
        raise CompatError(
            f"{what} {v}: not supported; every failure anywhere restarts all workers (any-failed)"
        )


def log_server(what: str, v: Value, t: Translation) -> None:
    if boolean(what, v):
        raise CompatError(
            f"{what} {v}: not supported; each node appends to the cycle log itself "
            "(--applog-per-node for file systems without atomic append)"
        )


def section_timeouts(what: str, v: Value, t: Translation) -> None:
    """``setup:600,step:180`` (or a YAML mapping) -> hang's text form ``setup=600,step=180``;
    a section without a timeout (none) is not monitored, so it is left out."""
    pairs: list[tuple[str, Value]]
    if isinstance(v, dict):
        pairs = list(v.items())
    else:
        pairs = []
        for item in (p.strip() for p in as_text(what, v).split(",")):
            if not item:
                continue
            name, sep, seconds_text = item.partition(":")
            if not sep or not name.strip():
                raise CompatError(f"{what} {v!r}: expected NAME:SECONDS pairs separated by commas")
            pairs.append((name.strip(), seconds_text))
    parts = []
    for name, value in pairs:
        seconds = opt_number(f"{what} {name}", value)
        if seconds is not None:
            parts.append(f"{name}={seconds:g}")
    t.overrides["hang.rank_section_timeouts"] = ",".join(parts)


def hang_setting(key: str, convert: Callable[[str, Value], Any] = opt_number) -> Apply:
    return sets(key, convert)


def signal_value(what: str, v: Value) -> str:
    text = as_text(what, v)
    return text if not text.isdigit() else str(int(text))


def config_file(what: str, v: Value, t: Translation) -> None:
    t.config_file = as_text(what, v)


def ignore(what: str, v: Value, t: Translation) -> None:
    return None


def off_only(what: str, v: Value, t: Translation) -> None:
    """Options whose 'on' value asks for a feature slurm-ft does not have."""
    if not is_off(v):
        raise CompatError(f"{what}: not supported by slurm-ft-launch")
