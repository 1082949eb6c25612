"""Crash-safe writes of small files: replacement (ledger, records, metrics) and whole-line
appends (timed readings).

A reader on another node must see either the old file or the new one, never a torn mix,
and a power loss must not leave an empty ledger: temp file in the same directory, fsync,
rename, fsync of the directory.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from slurm_ft import privatefiles


def write_bytes(path: str | os.PathLike[str], data: bytes, *, keep_backup: bool = False) -> None:
    """Atomically replace ``path`` with ``data``; optionally keep the old version as ``.bak``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = privatefiles.create_file(target.parent, f".{target.name}.", ".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if keep_backup and target.exists():
            _link_backup(target)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_dir(target.parent)


def write_json(path: str | os.PathLike[str], obj: Any, *, keep_backup: bool = False) -> None:
    data = (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()
    write_bytes(path, data, keep_backup=keep_backup)


def append_line(path: Path, line: bytes) -> None:
    """Append one whole line in one ``O_APPEND`` write, the file made private: a reader
    sees complete lines, and at worst a torn last line after a crash, which it skips."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _link_backup(target: Path) -> None:
    """Keep the current version as ``.bak`` without a moment where ``target`` is missing."""
    backup = target.with_name(target.name + ".bak")
    staging = target.with_name(f".{target.name}.bak.{os.getpid()}")
    try:
        os.unlink(staging)
    except FileNotFoundError:
        pass
    os.link(target, staging)
    os.replace(staging, backup)


def _fsync_dir(directory: Path) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)
