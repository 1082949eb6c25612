"""Timestamps workers leave for the harness: one small file per event, written atomically.

Workers on one machine share ``time.time()``; a monotonic clock cannot be compared
across processes, so wall time it is (fine on one host over a few seconds).
"""

from __future__ import annotations

import os
from pathlib import Path


def write(directory: str, name: str, value: float) -> None:
    tmp = os.path.join(directory, f".{name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, repr(value).encode())
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(directory, name))


def read_all(directory: str | Path) -> dict[str, float]:
    out = {}
    for entry in os.scandir(directory):
        if not entry.name.startswith("."):
            out[entry.name] = float(Path(entry.path).read_text())
    return out


def count(directory: str | Path, prefix: str) -> int:
    return sum(1 for n in os.listdir(directory) if n.startswith(prefix))
