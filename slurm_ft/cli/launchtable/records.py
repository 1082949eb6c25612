"""An option of slurm-ft-launch as data: its spellings, what it takes and the setting it
lands in, so the parser, the settings layer and the generated docs read the same record."""

from __future__ import annotations

from typing import Literal, NamedTuple

# What an option takes from the command line:
#   value     --opt VALUE
#   switch    --opt: the setting is true; absent, the lower layers decide
#   flag      --opt: true, else false (not a setting)
#   optional  --opt [VALUE]: without the value, ""
Takes = Literal["value", "switch", "flag", "optional"]


# The table's records are NamedTuples, not dataclasses: they are defined on every launch's
# start, where two frozen dataclasses cost ~9 M instructions (2% of a trivial launch) and
# these ~4 M.
class Option(NamedTuple):
    flags: tuple[str, ...]
    dest: str
    help: str | None = None
    metavar: str | None = None
    setting: str | None = None  # the settings key it sets (command-line layer); None: read apart
    takes: Takes = "value"
    choices: tuple[str, ...] | None = None
    # The default as the README shows it (markdown), where the setting's value is not what
    # a user sees (derived at run time); None: from the setting (:func:`shown_default`).
    default: str | None = None


class OptionGroup(NamedTuple):
    title: str
    options: tuple[Option, ...]
    section: bool = False  # a section of its own in --help (else among "options")
    exclusive: bool = False  # at most one of the options


def opt(
    *flags: str,
    dest: str,
    help: str | None = None,
    metavar: str | None = None,
    setting: str | None = None,
    takes: Takes = "value",
    choices: tuple[str, ...] | None = None,
    default: str | None = None,
) -> Option:
    return Option(flags, dest, help, metavar, setting, takes, choices, default)
