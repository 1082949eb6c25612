"""Which process a pid is: its start time in clock ticks since boot, from ``/proc``.

A pid written in a record can be reused by an unrelated process once the recorded one has
exited. Anything that signals a recorded pid later (``slurm-ft-drill``) first checks that
the process now holding it started at the recorded tick, so it never hits a stranger. The
launcher records the tick beside every pid; this module is the one place that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/PID/stat`` a signaller needs: state letter, process group, start tick."""

    state: str
    pgrp: int
    start_ticks: int


def stat(pid: int, proc: Path = _PROC) -> ProcStat | None:
    """The process's stat fields, or None when there is no such process (or no /proc)."""
    try:
        raw = (proc / str(pid) / "stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    _, sep, rest = raw.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) < 20:
        return None
    try:
        # After the name: state(3) ppid(4) pgrp(5) ... starttime(22) -> indexes 0, 2, 19.
        return ProcStat(state=fields[0], pgrp=int(fields[2]), start_ticks=int(fields[19]))
    except ValueError:
        return None


def start_ticks(pid: int, proc: Path = _PROC) -> int | None:
    found = stat(pid, proc)
    return found.start_ticks if found is not None else None


def is_same(pid: int, ticks: int | None, proc: Path = _PROC) -> bool:
    """True when ``pid`` is alive (not a zombie) and, if ``ticks`` is known, started then."""
    found = stat(pid, proc)
    if found is None or found.state in ("Z", "X"):
        return False
    return ticks is None or found.start_ticks == ticks
