"""NVIDIA ft_launcher's ``--ft-*`` options and YAML ``fault_tolerance:`` section -> settings.

Each option ft_launcher documents is in :data:`slurm_ft.compat.fttable.FT_OPTIONS` with
what it does here (:mod:`slurm_ft.compat.ftvalues` applies it): an
alias of a slurm-ft setting, a hang setting (``hang.*``, in effect once the settings
have those keys), accepted without effect because it asks for nothing slurm-ft does
not do anyway, or not supported (one line, exit 2). An ``--ft-*`` option not in the
table is not supported either. An unsupported option set to an "off" value
(``none``, ``false``, ``0``) asks for nothing and is accepted.

Spellings: ft_launcher accepts ``--ft-rank-heartbeat-timeout``,
``--ft-rank_heartbeat_timeout``, ``--ft_rank_heartbeat_timeout`` and the older
``--ft-param-rank_heartbeat_timeout``; all of them are the same option here.
Precedence as in ft_launcher: the YAML file, then the ``--ft-*`` options.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slurm_ft.compat.errors import CompatError
from slurm_ft.compat.fttable import BY_NAME, BY_YAML, FtOption, Kind, canonical
from slurm_ft.compat.ftvalues import Translation, Value, is_off

YAML_SECTION = "fault_tolerance"


def takes_value(option: str) -> bool:
    known = BY_NAME.get(canonical(option))
    return known.takes_value if known is not None else True


def _apply(opt: FtOption, what: str, value: Value, t: Translation) -> None:
    if opt.kind is Kind.LATER and not is_off(value):
        raise CompatError(f"{what}: not supported yet ({opt.meaning})")
    if opt.kind is Kind.UNSUPPORTED and not is_off(value):
        raise CompatError(f"{what}: not supported by slurm-ft-launch ({opt.meaning})")
    if opt.apply is not None:
        opt.apply(what, value, t)


def find_section(doc: Any) -> dict[str, Any] | None:
    """The ``fault_tolerance`` mapping, at the top or nested in any mapping (as ft_launcher
    looks for it); breadth first, so the shallowest wins."""
    queue = [doc]
    while queue:
        node = queue.pop(0)
        if isinstance(node, dict):
            section = node.get(YAML_SECTION)
            if isinstance(section, dict):
                return section
            queue.extend(v for v in node.values() if isinstance(v, dict))
    return None


def translate(
    options: Sequence[tuple[str, str | None]],
    yaml_section: Mapping[str, Any] | None,
    source: str = "fault_tolerance",
) -> Translation:
    """``options``: (option as written, value) in command-line order; ``yaml_section``:
    the ``fault_tolerance`` mapping of ``--ft-cfg-path``, applied first."""
    t = Translation()
    for key, value in (yaml_section or {}).items():
        opt = BY_YAML.get(str(key))
        what = f"{source}.{key}"
        if opt is None:
            raise CompatError(f"{what}: not an ft_launcher setting slurm-ft-launch knows")
        _apply(opt, what, value, t)
    for written, value in options:
        opt = BY_NAME.get(canonical(written))
        if opt is None:
            raise CompatError(
                f"{written}: not supported by slurm-ft-launch (no such ft_launcher option here)"
            )
        if opt.kind is Kind.CONFIG:
            continue
        if opt.takes_value and value is None:
            raise CompatError(f"{written}: expected a value")
        _apply(opt, written, value, t)
    return t


def config_path(options: Sequence[tuple[str, str | None]]) -> str | None:
    """The last ``--ft-cfg-path`` given, if any."""
    paths = [v for w, v in options if canonical(w) == "cfg-path"]
    if paths and paths[-1] is None:
        raise CompatError("--ft-cfg-path: expected a file")
    return paths[-1] if paths else None


def merge_checks(checks: Sequence[str], t: Translation) -> list[str]:
    """``health.checks`` after the ft options' edits (order kept, additions at the end)."""
    kept = [c for c in checks if c not in t.checks_off]
    return kept + sorted(c for c in t.checks_on if c not in kept)
