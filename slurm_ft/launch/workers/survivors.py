"""Processes that outlive SIGKILL, as /proc describes them.

A process in uninterruptible sleep (state ``D``: a dead NFS or Lustre mount, a wedged GPU
driver) takes SIGKILL but does not die until the kernel call it waits in returns, which
may be never. The launcher cannot fix that; it can only stop waiting, name what is stuck
(``wchan`` says where in the kernel), and keep the node out of the next cycle.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection
from dataclasses import dataclass

from slurm_ft.records import JsonDict

PROC = "/proc"


@dataclass(frozen=True)
class Survivor:
    """A process still alive after the kill: what the kernel says it is waiting on."""

    pid: int
    state: str  # /proc/<pid>/stat's state letter: D, S, Z, ...
    wchan: str  # kernel function it sleeps in ("" when unknown)
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} state {self.state} wchan {self.wchan or '-'}: {self.command}"

    def to_json(self) -> JsonDict:
        return {"pid": self.pid, "state": self.state, "wchan": self.wchan, "command": self.command}


def _stat(pid: int, proc: str) -> tuple[str, int] | None:
    """(state, process group) of ``pid``, or None when it is gone."""
    try:
        with open(f"{proc}/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the command name may hold spaces and ')'
    return fields[0], int(fields[2])


def _group_exists(pgid: int) -> bool:
    """A live or zombie member of the group (the scan tells the two apart)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone's process, so the group is not empty
        return True
    return True


def describe(pid: int, proc: str = PROC) -> Survivor | None:
    """What /proc says of ``pid``; None once it is gone (a zombie is not a survivor)."""
    stat = _stat(pid, proc)
    if stat is None or stat[0] in ("Z", "X"):
        return None
    wchan = ""
    with contextlib.suppress(OSError):
        with open(f"{proc}/{pid}/wchan") as fh:
            wchan = fh.read().strip()
    command = ""
    with contextlib.suppress(OSError):
        with open(f"{proc}/{pid}/cmdline", "rb") as fh:
            command = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    return Survivor(pid, stat[0], "" if wchan == "0" else wchan, command or "?")


def in_groups(pgids: Collection[int], proc: str = PROC) -> list[Survivor]:
    """Every live process of the given process groups (a worker and whatever it forked).

    Asked after every stop, when the groups are nearly always empty: one ``killpg(g, 0)``
    per group says so, where the scan of /proc reads a file per process of the node
    (thousands of kernel threads on a large one), a few ms of every restart."""
    if not any(_group_exists(g) for g in pgids):
        return []
    found: list[Survivor] = []
    try:
        names = os.listdir(proc)
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        stat = _stat(int(name), proc)
        if stat is None or stat[1] not in pgids:
            continue
        survivor = describe(int(name), proc)
        if survivor is not None:
            found.append(survivor)
    return sorted(found, key=lambda s: s.pid)
