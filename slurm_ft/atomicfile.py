"""Crash-safe replacement of small files (ledger, records, metrics).

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
