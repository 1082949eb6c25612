"""The node's snapshot area: one directory per job and node in shared memory, private to
the job's user, created by the launcher, swept when its launcher is gone.

The name carries the user id and the job's key (``slurm-ft-snap.<uid>.<key>``), and the
area holds the owner record of :mod:`slurm_ft.leftovers` (the creating launcher's pid and
start tick); the sweep is that module's, over this user's names of this pattern.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from slurm_ft import leftovers

DEFAULT_ROOT = Path("/dev/shm")
PREFIX = "slurm-ft-snap"
OWNER_FILE = leftovers.OWNER_FILE
_KEY = re.compile(r"[A-Za-z0-9_.-]{1,100}")
# An area without its launcher file is one whose launcher died between mkdir and the
# write; it is swept once it is this old (a live launcher writes it within milliseconds).
_UNCLAIMED_AGE_S = 60.0


class AreaError(Exception):
    """The area cannot be used; the message is the one line to show."""


def area_path(root: Path, uid: int, job_key: str) -> Path:
    if not _KEY.fullmatch(job_key):
        raise AreaError(f"snapshot area: job key {job_key!r} is not a plain name")
    return root / f"{PREFIX}.{uid}.{job_key}"


# Other live launchers of the same key on one host (two steps of one job, two standalone
# jobs of one user) each get their own area: ``<key>``, ``<key>.2``, ... up to this many.
_MAX_SHARERS = 16


def create(root: Path, uid: int, job_key: str, pid: int, start_ticks: int | None) -> Path:
    """Make (or adopt, when its launcher is gone) the area, private to ``uid``, and record
    its launcher. An area whose launcher still runs belongs to another launcher of the same
    key on this host (a second job step, a second standalone job): sharing it would let one
    restore the other's state and remove it at its end, so this one takes the next name.
    Raises :class:`AreaError`."""
    for sharer in range(1, _MAX_SHARERS + 1):
        path = area_path(root, uid, job_key if sharer == 1 else f"{job_key}.{sharer}")
        try:
            path.mkdir(mode=0o700)
            break
        except FileExistsError:
            problem = private_problem(path, uid)
            if problem:
                raise AreaError(problem) from None
            if not _owned_by_another_live_launcher(path, pid):
                break
        except OSError as exc:
            raise AreaError(f"snapshot area {path}: cannot create it: {exc.strerror}") from None
    else:
        raise AreaError(
            f"snapshot area {area_path(root, uid, job_key)}: {_MAX_SHARERS} live launchers "
            "of this job already hold an area on this host"
        )
    try:
        os.chmod(path, 0o700)
        leftovers.claim(path, pid, start_ticks)
    except OSError as exc:
        raise AreaError(f"snapshot area {path}: cannot write to it: {exc.strerror}") from None
    return path


def private_problem(path: Path, uid: int) -> str | None:
    """Why ``path`` is not an area that only ``uid`` can read and write (None: it is one).
    Snapshots hold the trainer's state, and a reader unpickles their skeletons: an area
    anyone else could write to is never used."""
    return leftovers.private_problem(path, uid, "snapshot area")


class Space(NamedTuple):  # not a dataclass: made on every launcher's start (see workers/env.py)
    total: int
    free: int


def space(root: Path) -> Space:
    """The file system's size and free bytes (what an unprivileged user may still write)."""
    st = os.statvfs(root)
    return Space(total=st.f_blocks * st.f_frsize, free=st.f_bavail * st.f_frsize)


def space_problem(root: Path, limit: int, held: int = 0) -> str | None:
    """The one line to say at start when ``root`` cannot hold ``limit`` bytes of
    snapshots (``held``: what this job's area holds already and may reuse), or None."""
    try:
        found = space(root)
    except OSError as exc:
        return f"snapshot memory: {root}: {exc.strerror}"
    if found.free + held < limit:
        return (
            f"snapshot memory: {root} has {human(found.free)} free of {human(found.total)}, "
            f"less than the {human(limit)} snapshots may use on this node"
        )
    return None


def held(area: Path) -> int:
    """Bytes the area's slot files hold (their reserved sizes)."""
    total = 0
    try:
        entries = [entry for entry in os.scandir(area) if entry.name != OWNER_FILE]
    except OSError:
        return 0
    if not entries:
        return 0  # a new area: the slots' layout is not imported on every launcher's start
    from slurm_ft.snapshot import layout

    for entry in entries:
        if layout.key_of(Path(entry.name)) is None:
            continue
        try:
            total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


def sweep(root: Path, uid: int, keep: Path | None = None, *, now: float | None = None) -> list[Path]:
    """Remove the areas of ``uid`` under ``root`` whose launcher is gone; ``keep`` (this
    launcher's own area) is never removed. Returns what was removed; never raises."""
    mine = f"{PREFIX}.{uid}."

    def ours(name: str) -> bool:
        return name.startswith(mine) and _KEY.fullmatch(name[len(mine) :]) is not None

    return leftovers.sweep(root, uid, ours, lambda path: _being_claimed(path, now), keep)


def _owned_by_another_live_launcher(area: Path, pid: int) -> bool:
    found = leftovers.owner(area)
    return leftovers.recorded_pid(area) != pid and (
        found is leftovers.Owner.LIVE or (found is leftovers.Owner.UNRECORDED and _being_claimed(area, None))
    )


def _being_claimed(area: str | os.PathLike[str], now: float | None) -> bool:
    return leftovers.changed_within(area, _UNCLAIMED_AGE_S, now)


def human(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"
