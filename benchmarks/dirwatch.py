"""Counts the entries made and removed in every directory under a root while a job runs
(Linux inotify through ctypes; new directories are watched as they appear).

Why entries and not files: on a shared file system each create, rename and unlink in a
directory takes that directory's lock, so what matters at scale is how many of them land
in one directory at the same moment. An atomic write (temp file, rename) is a create and
a rename in; a ``mkdir`` is a create in its parent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import threading
from collections import Counter
from pathlib import Path

IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_Q_OVERFLOW = 0x4000
IN_ISDIR = 0x40000000
IN_CLOEXEC = 0o2000000
IN_NONBLOCK = 0o4000
MASK = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO
_EVENT = struct.Struct("iIII")
KINDS = {IN_CREATE: "created", IN_MOVED_TO: "renamed in", IN_DELETE: "removed", IN_MOVED_FROM: "renamed out"}


class DirWatch:
    """Per directory (relative to ``root``): how many entries were created, renamed in,
    removed and renamed out while it ran. An entry made in a new directory before its
    watch was set is counted from a look at the directory right after."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self._fd = self._libc.inotify_init1(IN_CLOEXEC | IN_NONBLOCK)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._dirs: dict[int, Path] = {}
        self._listed: dict[Path, set[str]] = {}  # names a look found before their event came
        self.counts: dict[str, Counter[str]] = {}
        self.names: Counter[tuple[str, str, str]] = Counter()  # (directory, kind, name)
        self.overflowed = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        for directory, _, _ in os.walk(root):
            self._add(Path(directory), count=False)

    def __enter__(self) -> DirWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._drain()
        os.close(self._fd)

    def _rel(self, path: Path) -> str:
        return os.path.relpath(path, self.root)

    def _add(self, directory: Path, *, count: bool) -> None:
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(directory), MASK)
        if wd < 0:
            return  # gone already
        self._dirs[wd] = directory
        if not count:
            return
        try:
            names = os.listdir(directory)
        except OSError:
            return
        self._listed[directory] = set(names)
        for name in names:
            self.counts.setdefault(self._rel(directory), Counter())["created"] += 1
            if (directory / name).is_dir() and not (directory / name).is_symlink():
                self._add(directory / name, count=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.05)
            if ready:
                self._drain()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._fd, 1 << 20)
            except BlockingIOError:
                return
            at = 0
            while at < len(data):
                wd, mask, _, size = _EVENT.unpack_from(data, at)
                name = data[at + _EVENT.size : at + _EVENT.size + size].rstrip(b"\0").decode()
                at += _EVENT.size + size
                self._event(wd, mask, name)

    def _event(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            self.overflowed = True
            return
        directory = self._dirs.get(wd)
        if directory is None:
            return
        kind = KINDS.get(mask & MASK)
        if kind is None:
            return
        listed = self._listed.get(directory)
        if kind == "created" and listed is not None and name in listed:
            listed.discard(name)  # counted by the look at the new directory
            return
        self.counts.setdefault(self._rel(directory), Counter())[kind] += 1
        self.names[(self._rel(directory), kind, name)] += 1
        if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
            self._add(directory / name, count=True)
