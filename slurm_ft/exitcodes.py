"""The exit-code contract that batch scripts and templates rely on (DESIGN.md).

Kept in one place so that every command, template and test speaks the same numbers.
"""

from __future__ import annotations

import enum
import signal


class ExitCode(enum.IntEnum):
    SUCCESS = 0
    WORKERS_FAILED = 1
    BAD_INPUT = 2
    NO_PROGRESS = 93
    UNHEALTHY = 94


SIGNAL_BASE = 128


def for_signal(signum: int) -> int:
    """Shell convention: a command ended by signal N exits 128+N."""
    return SIGNAL_BASE + int(signum)


def signal_of(code: int) -> signal.Signals | None:
    """The signal an exit code stands for, if it is a 128+N code of a known signal."""
    if code <= SIGNAL_BASE:
        return None
    try:
        return signal.Signals(code - SIGNAL_BASE)
    except ValueError:
        return None


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15, as the launcher's messages and reasons name a signal; a number
    Python has no name for (a real-time signal) is ``signal 40``."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def signal_by_name(name: str | None) -> int | None:
    """The number of a signal as :func:`signal_name` wrote it (``SIGUSR1``), read back from
    a record; None for anything else (a record from the store is untrusted input)."""
    if not name or not name.startswith("SIG") or name.startswith("SIG_"):
        return None
    try:
        return int(signal.Signals[name])
    except KeyError:
        return None


def describe(code: int) -> str:
    """A short word for an exit code, as the outcome record and templates print it."""
    try:
        return {
            ExitCode.SUCCESS: "finished",
            ExitCode.WORKERS_FAILED: "restarts-exhausted",
            ExitCode.BAD_INPUT: "bad-input",
            ExitCode.NO_PROGRESS: "no-progress",
            ExitCode.UNHEALTHY: "unhealthy",
        }[ExitCode(code)]
    except ValueError:
        sig = signal_of(code)
        if sig is not None:
            return f"signal-{sig.name}"
        return f"exit-{code}"
