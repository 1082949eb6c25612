"""The directories a launcher keeps in shared memory, and the sweep of those whose launcher
is gone: the one rule for the snapshot areas and the private run dirs.

Shared memory outlives every process: a SIGKILLed launcher's directories would stay until
the node reboots, and nothing but the next launcher of the same user is there to free
them. So each directory holds an owner record (``launcher``: the creating launcher's pid
and start tick), and a sweep removes a directory only when all of these hold: its name is
one of ours (the caller's pattern), it is a real directory owned by this user and closed to
everyone else, and its launcher is provably gone - checked by pid *and* start tick, so a
reused pid never keeps an ended launcher's memory and a live launcher is never swept. A
record that cannot be read or parsed is not proof of an end: that directory stays. A
directory without a record is the caller's judgement (``unrecorded_alive``): a launcher
writes its record right after the mkdir, but older launchers wrote none.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path

from slurm_ft import atomicfile, privatefiles, procident

OWNER_FILE = "launcher"


class Owner(Enum):
    LIVE = "live"  # running, or not provably ended (an unreadable record)
    ENDED = "ended"
    UNRECORDED = "unrecorded"


def claim(directory: Path, pid: int, start_ticks: int | None) -> None:
    """Record ``pid`` (started at ``start_ticks``) as the directory's launcher. Raises OSError."""
    atomicfile.write_bytes(
        directory / OWNER_FILE, f"{pid} {start_ticks if start_ticks is not None else -1}\n".encode()
    )


def recorded_pid(directory: str | os.PathLike[str]) -> int | None:
    """The pid the owner record names, or None when there is no readable record."""
    try:
        return int(_record(directory).split()[0])
    except (OSError, UnicodeDecodeError, IndexError, ValueError):
        return None


def owner(directory: str | os.PathLike[str]) -> Owner:
    try:
        text = _record(directory)
    except FileNotFoundError:
        return Owner.UNRECORDED
    except (OSError, UnicodeDecodeError):
        return Owner.LIVE
    parts = text.split()
    try:
        pid, ticks = int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return Owner.LIVE
    return Owner.LIVE if procident.is_same(pid, ticks if ticks >= 0 else None) else Owner.ENDED


def changed_within(directory: str | os.PathLike[str], seconds: float, now: float | None = None) -> bool:
    """Whether the directory or any file directly in it changed in the last ``seconds``
    (True when it cannot be read: not provably old). The files are read only when the
    directory itself is older."""
    since = (now if now is not None else time.time()) - seconds
    try:
        if os.stat(directory).st_mtime > since:
            return True
        return any(entry.stat(follow_symlinks=False).st_mtime > since for entry in os.scandir(directory))
    except OSError:
        return True


def private_problem(path: Path, uid: int, what: str) -> str | None:
    """Why ``path`` is not a directory that only ``uid`` can read and write (None: it is
    one), as one line about ``what``. Such a directory holds what workers trust (snapshots
    a reader unpickles, heart-beat slots): one anyone else could write to is never used,
    and one that is not ours is never removed."""
    try:
        st = path.lstat()
    except OSError as exc:
        return f"{what} {path}: {exc.strerror}"
    problem = _not_private(st, uid)
    return f"{what} {path}: {problem}" if problem else None


def sweep(
    root: Path,
    uid: int,
    ours: Callable[[str], bool],
    unrecorded_alive: Callable[[str], bool],
    keep: Path | None = None,
) -> list[Path]:
    """Remove the directories under ``root`` whose names are ``ours``, private to ``uid``,
    whose launcher is gone (``keep``, the caller's own, never). Returns what was removed;
    never raises. (Strings and the directory entries' own stat, not pathlib: a launcher
    starts beside hundreds of such directories on a busy host.)"""
    removed: list[Path] = []
    kept = os.fspath(keep) if keep is not None else None
    try:
        entries = list(os.scandir(root))
    except OSError:
        return removed
    for entry in entries:
        if not ours(entry.name) or entry.path == kept:
            continue
        try:
            if _not_private(entry.stat(follow_symlinks=False), uid):
                continue
        except OSError:
            continue
        found = owner(entry.path)
        if found is Owner.LIVE or (found is Owner.UNRECORDED and unrecorded_alive(entry.path)):
            continue
        privatefiles.remove_tree(entry.path)
        removed.append(Path(entry.path))
    return removed


def _record(directory: str | os.PathLike[str]) -> str:
    with open(os.path.join(directory, OWNER_FILE), encoding="ascii") as fh:
        return fh.read()


def _not_private(st: os.stat_result, uid: int) -> str | None:
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not {uid}"
    if st.st_mode & 0o077:
        return f"open to others (mode {stat.S_IMODE(st.st_mode):o}, wanted 700)"
    return None
