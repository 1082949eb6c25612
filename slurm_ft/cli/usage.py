"""Bad input on a command line: one exception and a parser that raises it.

argparse prints its own usage block and exits 2 on an error; every command here instead
reports one line (``<prog>: error: <what>``) and exits with ``ExitCode.BAD_INPUT``, so the
parser raises and each front end prints.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from slurm_ft.config import ConfigError, did_you_mean
from slurm_ft.exitcodes import ExitCode


class UsageError(Exception):
    pass


class UsageParser(argparse.ArgumentParser):
    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        # Every command alike: an option is spelt out (a prefix that happens to be unique
        # today would change meaning when an option is added).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if kwargs.get("prog") and self.add_help:  # every command (not a shared parent's options)
            from slurm_ft import __version__

            self.add_argument("--version", action="version", version=f"{self.prog} {__version__}")

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """Options anywhere among the positional words (``JOBID --state-dir DIR FAULT``), as
        people type them: argparse's plain parse hands a ``*`` or ``?`` positional its share
        (nothing) before the first option and then refuses the words after it. A command
        with subcommands or a script's own arguments (``REMAINDER``) keeps the plain parse:
        there the order carries meaning."""
        if any(a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in self._actions):
            return super().parse_args(args, namespace)
        return self.parse_intermixed_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        parsers: list[argparse.ArgumentParser] = [self]
        for action in self._actions:  # argparse has no public list of its actions
            if not isinstance(action, argparse._SubParsersAction):
                continue
            if message.endswith(f"required: {action.dest}"):
                commands = ", ".join(action.choices)
                raise UsageError(f"a command is required: {commands} (see {self.prog} --help)")
            parsers += action.choices.values()
        unknown = "unrecognized arguments: "
        if message.startswith(unknown):
            # A misspelt option: name the nearest one (argparse's own hint needs Python 3.12+).
            known = {o for p in parsers for o in p._option_string_actions if o.startswith("--")}
            tokens = message[len(unknown) :].split()
            hints = [t + did_you_mean(t.split("=", 1)[0], known, "--") for t in tokens if t.startswith("--")]
            if any("did you mean" in h for h in hints):
                message = unknown + ", ".join(hints)
        raise UsageError(message)


class _Formatter(argparse.HelpFormatter):
    """argparse's formatter, told the width: left to find it, it imports ``shutil`` (and
    with it bz2, lzma, fnmatch) on every command's start, not only for ``--help``."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=terminal_columns() - 2)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        """torchrun's underscore spellings (``--nproc_per_node``) are accepted but not
        listed: one name per option in the help."""
        strings = action.option_strings
        shown = [o for o in strings if "_" not in o or o.replace("_", "-") not in strings]
        if len(shown) == len(strings):
            return super()._format_action_invocation(action)
        copy = argparse.Action(shown, action.dest, nargs=action.nargs, metavar=action.metavar)
        copy.choices = action.choices
        return super()._format_action_invocation(copy)


def terminal_columns() -> int:
    """``$COLUMNS``, else the terminal's width, else 80 (``shutil.get_terminal_size``'s rule)."""
    columns = _columns_set()
    if columns:
        return columns
    out = sys.__stdout__
    if out is None:
        return 80
    try:
        return os.get_terminal_size(out.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return 80


def table_width(stdout_is_tty: bool) -> int | None:
    """Width for a command's tables: ``$COLUMNS`` when set (also when piped: a user who
    sets it means it); on a terminal None (rich asks it); else 120, since off a terminal
    rich would squeeze a table into 80 columns and cut its cells short."""
    return _columns_set() or (None if stdout_is_tty else 120)


def _columns_set() -> int:
    """``$COLUMNS`` when it is a width (0: unset, or not one)."""
    try:
        return max(0, int(os.environ.get("COLUMNS", "0")))
    except ValueError:
        return 0


def run_command(prog: str, body: Callable[[], int]) -> int:
    """The common ending of a reporting command: bad input is one line and exit 2; a
    reader that went away (``| head``) is not an error; ^C is 130, not a traceback."""
    try:
        return body()
    except (UsageError, ConfigError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.SUCCESS)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
