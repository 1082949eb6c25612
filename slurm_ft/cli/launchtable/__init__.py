"""slurm-ft-launch's option table (data): every option in ``--help`` order, by group.

The options are data (:data:`GROUPS`): each one says its spellings, what it takes and the
setting it lands in (:mod:`records`), so the parser (:mod:`slurm_ft.cli.launchoptions`),
the settings layer and the generated documentation read the same table. The groups live
by what they are about: :mod:`job`, :mod:`watching`, :mod:`nodes`, :mod:`torchrun`.
"""

from __future__ import annotations

from collections.abc import Mapping

from slurm_ft.cli.launchtable.job import LAUNCHER, LOG
from slurm_ft.cli.launchtable.nodes import PLACEMENT, SNAPSHOTS, SPARES
from slurm_ft.cli.launchtable.records import Option, OptionGroup, Takes, opt
from slurm_ft.cli.launchtable.torchrun import TORCHRUN, WHAT_TO_RUN
from slurm_ft.cli.launchtable.watching import HANG, HEALTH, PROGRESS

__all__ = [
    "GROUPS",
    "SETTING_OF",
    "Option",
    "OptionGroup",
    "Takes",
    "opt",
    "setting_defaults",
    "shown_default",
]

# In --help order: the launcher's own groups, torchrun's section, what to run.
GROUPS: tuple[OptionGroup, ...] = (
    LAUNCHER,
    LOG,
    PROGRESS,
    HEALTH,
    PLACEMENT,
    SPARES,
    SNAPSHOTS,
    HANG,
    TORCHRUN,
    WHAT_TO_RUN,
)

# option dest -> settings key (command-line layer); tee, shutdown_timeout and health_checks
# are read apart (see settings_overrides)
SETTING_OF: dict[str, str] = {o.dest: o.setting for g in GROUPS for o in g.options if o.setting}


def shown_default(option: Option, defaults: Mapping[str, object]) -> str | None:
    """An option's default as the README shows it (markdown), from the settings' defaults
    (``defaults``: dotted key -> value) unless the option says otherwise; None: it has
    none to show (a flag, or a torchrun flag read apart). ``--help`` shows the same."""
    if option.default is not None:
        return option.default
    if option.setting is None:
        return None
    value = defaults[option.setting]
    if value is None or value == []:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        shown = f"`{value:g}`"
        return f"{shown} (off)" if value == 0 and option.setting.startswith("hang.") else shown
    if isinstance(value, list):
        return f"`{','.join(map(str, value))}`"
    return f"`{value}`"


def setting_defaults() -> dict[str, object]:
    """Dotted settings key -> its default value (read off one default ``Settings``, no
    deep copy: this runs at every launch's start)."""
    from slurm_ft import config

    settings = config.Settings()
    out: dict[str, object] = {}
    for key in config.KEY_TYPES:
        section, _, name = key.rpartition(".")
        out[key] = getattr(getattr(settings, section) if section else settings, name)
    return out
