"""The node's snapshot area: one directory per job and node in shared memory, private to
the job's user, created by the launcher, swept when its launcher is gone.

The name carries the user id and the job's key (``slurm-ft-snap.<uid>.<key>``), and the
area holds a ``launcher`` file with the creating launcher's pid and start tick. A sweep
removes only directories of this user's name pattern, owned by this user, whose launcher
is no longer running (checked by pid *and* start tick, so a reused pid never keeps an
ended job's memory, and a live job's launcher is never swept) - shared memory outlives
every process, and nothing else would ever free it after a SIGKILLed launcher.
"""

from __future__ import annotations

import os
import re
import stat
import time
from pathlib import Path
from typing import NamedTuple

from slurm_ft import atomicfile, privatefiles, procident

DEFAULT_ROOT = Path("/dev/shm")
PREFIX = "slurm-ft-snap"
OWNER_FILE = "launcher"
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
        atomicfile.write_bytes(
            path / OWNER_FILE, f"{pid} {start_ticks if start_ticks is not None else -1}\n".encode()
        )
    except OSError as exc:
        raise AreaError(f"snapshot area {path}: cannot write to it: {exc.strerror}") from None
    return path


def private_problem(path: Path, uid: int) -> str | None:
    """Why ``path`` is not an area that only ``uid`` can read and write (None: it is one).
    Snapshots hold the trainer's state, and a reader unpickles their skeletons: an area
    anyone else could write to is never used."""
    try:
        st = path.lstat()
    except OSError as exc:
        return f"snapshot area {path}: {exc.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"snapshot area {path}: not a directory"
    if st.st_uid != uid:
        return f"snapshot area {path}: owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o077:
        return f"snapshot area {path}: open to others (mode {stat.S_IMODE(st.st_mode):o}, wanted 700)"
    return None


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
        if layout.key_of(Path(entry.name)) is None or not layout.is_turn_slot(Path(entry.name)):
            continue
        try:
            total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


def sweep(root: Path, uid: int, keep: Path | None = None, *, now: float | None = None) -> list[Path]:
    """Remove the areas of ``uid`` under ``root`` whose launcher is gone; ``keep`` (this
    launcher's own area) is never removed. Returns what was removed; never raises."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    mine = f"{PREFIX}.{uid}."
    for entry in entries:
        if not entry.name.startswith(mine) or not _KEY.fullmatch(entry.name[len(mine) :]):
            continue
        path = Path(entry.path)
        if keep is not None and path == keep:
            continue
        if private_problem(path, uid) is not None or _launcher_alive(path, now):
            continue
        privatefiles.remove_tree(path)
        removed.append(path)
    return removed


def _owned_by_another_live_launcher(area: Path, pid: int) -> bool:
    try:
        owner = int((area / OWNER_FILE).read_text(encoding="ascii").split()[0])
    except (OSError, UnicodeDecodeError, IndexError, ValueError):
        owner = None
    return owner != pid and _launcher_alive(area, None)


def _launcher_alive(area: Path, now: float | None) -> bool:
    try:
        text = (area / OWNER_FILE).read_text(encoding="ascii")
    except FileNotFoundError:
        try:
            age = (now if now is not None else time.time()) - area.stat().st_mtime
        except OSError:
            return False
        return age < _UNCLAIMED_AGE_S
    except (OSError, UnicodeDecodeError):
        return True  # unreadable: not provably ended, so not ours to remove
    parts = text.split()
    try:
        pid, ticks = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return True
    return procident.is_same(pid, ticks if ticks >= 0 else None)


def human(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value, unit = n / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.1f} {unit}"
