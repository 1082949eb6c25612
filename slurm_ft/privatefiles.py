"""New private files and directories under unguessable names, and their removal.

``tempfile`` and ``shutil`` would do all of this, but importing them (with ``random``,
``bz2``, ``lzma`` and ``fnmatch`` behind them) is a few milliseconds of every launcher
start, a measurable share of a trivial launch; these few system calls are all the
launcher needs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

_ATTEMPTS = 100


def create_file(directory: str | os.PathLike[str], prefix: str, suffix: str = "") -> tuple[int, str]:
    """A new file that no other process or thread can have opened: mode 0600, open for
    writing; the caller closes the descriptor (``FileExistsError`` after 100 clashes)."""
    for _ in range(_ATTEMPTS):
        path = os.path.join(directory, f"{prefix}{os.urandom(6).hex()}{suffix}")
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free name for {prefix}*{suffix} in {directory}")


def create_dir(parent: str | os.PathLike[str] | None, prefix: str) -> Path:
    """A new directory (mode 0700) in ``parent`` (the system's temporary directory when
    None: ``TMPDIR``, else /tmp)."""
    base = os.fspath(parent) if parent is not None else os.environ.get("TMPDIR") or "/tmp"
    for _ in range(_ATTEMPTS):
        path = Path(base, f"{prefix}{os.urandom(6).hex()}")
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free name for {prefix}* in {base}")


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove ``path`` and everything under it, as far as possible; never raises (what
    cannot be removed stays: a worker that outlived its group may still hold a file)."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            _quietly(os.unlink, os.path.join(root, name))
        for name in dirs:
            entry = os.path.join(root, name)
            _quietly(os.unlink if os.path.islink(entry) else os.rmdir, entry)
    _quietly(os.rmdir, path)


def find_program(name: str, search_path: str | None) -> str | None:
    """The first executable file ``name`` in the ``PATH``-style ``search_path`` (None:
    ``os.defpath``; empty: nowhere), like the shell finds it; None when there is none."""
    if search_path == "":
        return None
    for directory in (search_path if search_path is not None else os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _quietly(remove: Callable[[str | os.PathLike[str]], None], path: str | os.PathLike[str]) -> None:
    try:
        remove(path)
    except OSError:
        pass
