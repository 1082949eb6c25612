"""The reference of every command, read off its parser: the option tables of the docs'
reference pages and the man pages come from here, so neither can drift from ``--help``.

Each command's parser (``build_parser`` of its ``slurm_ft.cli`` module) gives the options,
their spellings, what they take and their short help. This module adds what a parser does
not hold: the synopsis lines, a fuller meaning where the one-line help is not enough
(:data:`DETAILS`; slurm-ft-launch's are :data:`slurm_ft.cli.launchdocs.MEANING`), the
setting an option sets, and the exit codes, each command's in a module of its own here.
Loaded only to render or test the docs and the man pages, never by a command.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Iterator
from typing import NamedTuple

from slurm_ft.cli.refdocs import drill, healthcheck, launch, logs, progress, report, snapshot
from slurm_ft.cli.refdocs.command import Command

__all__ = ["COMMANDS", "DETAILS", "SETTINGS", "Command", "Entry", "Section"]

COMMANDS: tuple[Command, ...] = (
    launch.COMMAND,
    healthcheck.COMMAND,
    progress.COMMAND,
    report.COMMAND,
    drill.COMMAND,
    logs.COMMAND,
    snapshot.COMMAND,
)

# The setting each option of a command other than the launcher sets (the launcher's own
# option table names its settings), and a fuller meaning than the one-line --help where a
# reader needs it (keys: an option's first long spelling, or a positional's metavar).
SETTINGS: dict[str, dict[str, str]] = {
    "slurm-ft-healthcheck": healthcheck.SETTINGS,
    "slurm-ft-progress": progress.SETTINGS,
    "slurm-ft-report": report.SETTINGS,
    "slurm-ft-drill": drill.SETTINGS,
    "slurm-ft-logs": logs.SETTINGS,
}
DETAILS: dict[str, dict[str, str]] = {
    "slurm-ft-healthcheck": healthcheck.DETAILS,
    "slurm-ft-progress": progress.DETAILS,
    "slurm-ft-report": report.DETAILS,
    "slurm-ft-drill": drill.DETAILS,
    "slurm-ft-logs": logs.DETAILS,
}

HIDDEN = {"-h", "--help", "--version"}


class Entry(NamedTuple):
    """One option (or positional argument) of a command, as the reference shows it."""

    flags: tuple[str, ...]  # every spelling; empty for a positional argument
    takes: str  # what follows the option (metavar or choices), "" for none
    help: str  # argparse's help, expanded
    meaning: str  # markdown: the fuller meaning where there is one, else the help
    setting: str | None
    default: str | None = None  # markdown, where the meaning does not say it

    @property
    def name(self) -> str:
        """The first long spelling (the key of DETAILS), or the positional's metavar."""
        first = self.flags[0] if self.flags else self.takes.strip("[]")
        return next((f for f in self.flags if f.startswith("--")), first)

    @property
    def shown_flags(self) -> tuple[str, ...]:
        """The spellings --help lists: torchrun's underscore twins are accepted, not listed."""
        return tuple(f for f in self.flags if "_" not in f or f.replace("_", "-") not in self.flags)


class Section(NamedTuple):
    title: str
    entries: tuple[Entry, ...]


def command(prog: str) -> Command:
    for cmd in COMMANDS:
        if cmd.prog == prog:
            return cmd
    raise KeyError(prog)


def parser(prog: str) -> argparse.ArgumentParser:
    module = importlib.import_module(f"slurm_ft.cli.{command(prog).module}")
    built: argparse.ArgumentParser = module.build_parser()
    return built


def _takes(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None and not isinstance(action, argparse._SubParsersAction):
        words = "|".join(str(c) for c in action.choices)
        return f"[{words}]" if action.nargs == "?" else words
    metavar = action.metavar
    if isinstance(metavar, tuple):
        metavar = " ".join(metavar)
    text = metavar or action.dest.upper()
    return f"[{text}]" if action.nargs == "?" else text


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%" in text:
        text = text % {"default": action.default, "prog": "", "dest": action.dest}
    return " ".join(text.split())


def _entry(prog: str, action: argparse.Action) -> Entry:
    from slurm_ft.cli import launchdocs

    flags = tuple(action.option_strings)
    help_text = _help(action)
    name = next((f for f in flags if f.startswith("--")), flags[0] if flags else _takes(action).strip("[]"))
    if prog == "slurm-ft-launch":
        from slurm_ft.cli.launchtable import GROUPS, setting_defaults, shown_default

        option = next((o for g in GROUPS for o in g.options if name in o.flags), None)
        if option is None:
            return Entry(flags, _takes(action), help_text, help_text, None)
        meaning = launchdocs.MEANING.get(name, help_text)
        default = shown_default(option, setting_defaults())
        return Entry(flags, _takes(action), help_text, meaning, option.setting, default)
    meaning = DETAILS.get(prog, {}).get(name, help_text)
    return Entry(flags, _takes(action), help_text, meaning, SETTINGS.get(prog, {}).get(name))


def _sections_of(prog: str, p: argparse.ArgumentParser, prefix: str = "") -> Iterator[Section]:
    for group in p._action_groups:  # argparse has no public list of its groups
        entries = []
        for action in group._group_actions:
            if action.help == argparse.SUPPRESS or isinstance(action, argparse._SubParsersAction):
                continue
            if set(action.option_strings) & HIDDEN:
                continue
            entries.append(_entry(prog, action))
        if entries:
            title = group.title or "options"
            if title == "positional arguments":
                title = "arguments"
            yield Section(f"{prefix}{title}", tuple(entries))


def sections(prog: str) -> list[Section]:
    """Every option and argument of a command, in --help's groups; a command with
    subcommands has one section per subcommand (``status: options``)."""
    p = parser(prog)
    out = list(_sections_of(prog, p))
    for action in p._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        per_sub = {
            name: [e for s in _sections_of(prog, sub) for e in s.entries]
            for name, sub in action.choices.items()
        }
        # Options every subcommand takes (a shared parent parser) are listed once.
        common = [e for e in next(iter(per_sub.values())) if all(e in es for es in per_sub.values())]
        if common and len(per_sub) > 1:
            out.append(Section("options of every subcommand", tuple(common)))
        for name, entries in per_sub.items():
            own = tuple(e for e in entries if e not in common)
            if own:
                out.append(Section(f"{name}", own))
    return out


def option_strings(prog: str) -> set[str]:
    """Every option string the command's parser accepts, hidden ones too (for tests)."""
    p = parser(prog)
    found = {o for a in p._actions for o in a.option_strings}
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= {o for a in sub._actions for o in a.option_strings}
    return found


def subcommands(prog: str) -> dict[str, str]:
    """Subcommand -> its one-line help (empty for a command without subcommands)."""
    out: dict[str, str] = {}
    for action in parser(prog)._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                out[choice.dest] = choice.help or ""
    return out


# --- markdown -----------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _option_cell(entry: Entry) -> str:
    if not entry.flags:
        return f"`{_cell(entry.takes)}`"
    takes = f" {entry.takes}" if entry.takes else ""
    first, *rest = entry.shown_flags
    cells = [f"`{_cell(first + takes)}`", *(f"`{f}`" for f in rest)]
    return ", ".join(cells)


def _setting_cell(entry: Entry) -> str:
    from slurm_ft.config import env_name

    if entry.setting is None:
        return ""
    return f"`{entry.setting}` / `{env_name(entry.setting)}`"


def synopsis_block(prog: str) -> str:
    indent = " " * (len(prog) + 1)
    lines = [
        (indent + line.strip()) if line.startswith(" ") else f"{prog} {line}"
        for line in command(prog).synopsis
    ]
    return "```\n" + "\n".join(lines) + "\n```\n"


def options_block(prog: str) -> str:
    """The reference page's option tables (markdown): one per --help group (slurm-ft-launch's
    is :func:`slurm_ft.cli.launchdocs.readme_rows`, between markers of its own)."""
    parts = []
    subs = subcommands(prog)
    if subs:
        parts.append("| subcommand | what it does |\n|---|---|")
        parts.extend(f"| `{name}` | {_cell(text)} |" for name, text in subs.items())
        parts.append("")
    for section in sections(prog):
        parts.append(f"**{section.title}**\n")
        parts.append("| option | setting / environment | meaning |\n|---|---|---|")
        for entry in section.entries:
            parts.append(f"| {_option_cell(entry)} | {_setting_cell(entry)} | {_cell(entry.meaning)} |")
        parts.append("")
    return "\n".join(parts)


def exit_codes_block(prog: str) -> str:
    rows = ["| code | meaning |", "|---|---|"]
    rows.extend(f"| {code} | {_cell(text)} |" for code, text in command(prog).exit_codes)
    return "\n".join(rows) + "\n"


def marker(prog: str, part: str) -> tuple[str, str]:
    """The start and end markers of a generated block of a reference page."""
    tag = f"{part.upper()}:{prog}"
    return f"<!-- {tag}:START -->", f"<!-- {tag}:END -->"


BLOCKS = {"synopsis": synopsis_block, "options": options_block, "exit-codes": exit_codes_block}


def render_page(text: str, prog: str) -> str:
    """A reference page with each of its generated blocks rendered afresh; a page must hold
    every block (a missing marker is an error, so a page cannot silently lose its table)."""
    for part, render in BLOCKS.items():
        if part == "options" and prog == "slurm-ft-launch":
            continue  # launchdocs' own markers: the table predates these pages
        start, end = marker(prog, part)
        text = replace_between(text, start, end, render(prog))
    return text


def replace_between(text: str, start: str, end: str, block: str) -> str:
    i, j = text.find(start), text.find(end)
    if i < 0 or j < i or text.count(start) != 1 or text.count(end) != 1:
        raise ValueError(f"need exactly one {start} followed by one {end}")
    return text[: i + len(start)] + "\n" + block + text[j:]
