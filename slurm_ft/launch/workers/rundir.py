"""The launcher's private run dir: its workers' heart-beat slots and stack files, in shared
memory where there is one (``slurm-ft-<12 hex>``, mode 700), with the owner record of
:mod:`slurm_ft.leftovers`; at its start a launcher sweeps the run dirs of this user's
ended launchers beside its own, by that module's rule.

Run dirs made before the owner record (hundreds lie on a machine that ran many tests)
have none, and their launcher cannot be named: one is taken for ended only when neither
it nor any file in it has changed for :data:`UNRECORDED_AGE_S` (a day) and no process maps
a file in it (a running worker maps its heart-beat slot, and so does its launcher while
it watches; between two cycles nothing maps them, but the next cycle's start rewrites
them, so the dir is young again).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from slurm_ft import leftovers, privatefiles, procident

PREFIX = "slurm-ft-"
_NAME = re.compile(r"slurm-ft-[0-9a-f]{12}")  # privatefiles.create_dir's six random bytes
UNRECORDED_AGE_S = 24 * 3600.0
_PROC = Path("/proc")


def create(parent: Path | None) -> Path:
    """This launcher's run dir, claimed: in ``parent`` (None: the temporary directory)."""
    path = privatefiles.create_dir(parent, PREFIX)
    pid = os.getpid()
    leftovers.claim(path, pid, procident.start_ticks(pid))
    return path


def sweep(
    parent: Path, uid: int, keep: Path | None, *, now: float | None = None, proc: Path = _PROC
) -> list[Path]:
    """Remove the run dirs of ``uid`` in ``parent`` whose launcher is gone (``keep`` never);
    returns what was removed, never raises."""
    return leftovers.sweep(parent, uid, _ours, _UnrecordedRule(now, proc), keep)


def _ours(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


class _UnrecordedRule:
    """Whether a run dir without a record may still be a live launcher's; the processes'
    maps are read at most once a sweep, and only when a dir is old enough to ask."""

    def __init__(self, now: float | None, proc: Path) -> None:
        self._now = now
        self._proc = proc
        self._mapped: set[str] | None = None

    def __call__(self, path: str) -> bool:
        if leftovers.changed_within(path, UNRECORDED_AGE_S, self._now):
            return True
        if self._mapped is None:
            self._mapped = mapped_dirs(self._proc, Path(path).parent)
        return path in self._mapped


def mapped_dirs(proc: Path, parent: Path) -> set[str]:
    """The directories directly in ``parent`` that hold a file some process maps (as far as
    ``proc`` lets this user read the processes' maps)."""
    prefix = f"{parent}/"
    found: set[str] = set()
    try:
        pids = [entry.name for entry in os.scandir(proc) if entry.name.isdigit()]
    except OSError:
        return found
    for pid in pids:
        try:
            with open(proc / pid / "maps", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    at = line.find(prefix)
                    if at >= 0 and "/" in (rest := line[at + len(prefix) :]):
                        found.add(prefix + rest.split("/", 1)[0])
        except OSError:
            continue
    return found
