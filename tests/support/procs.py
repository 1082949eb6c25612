"""Process inspection through /proc.

PID 1 on these machines reaps zombies late, so ``kill -0`` says "alive" for processes that
have already exited; liveness is read from the state field of /proc/PID/stat instead.
Tests tag every process tree they start with a unique environment variable and then ask
/proc whether anything carrying the tag is still running: that catches orphans that were
re-parented away from the launcher, which a walk of the process tree would miss.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

MARKER_VAR = "SLURM_FT_TEST_MARKER"


def new_marker() -> str:
    return uuid.uuid4().hex


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    rest = raw[raw.rfind(")") + 2 :].split()
    return rest


def is_alive(pid: int) -> bool:
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def parent_of(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def live_descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in all_pids():
        ppid = parent_of(p)
        if ppid is not None:
            children.setdefault(ppid, []).append(p)
    out: list[int] = []
    stack = list(children.get(pid, []))
    while stack:
        p = stack.pop()
        if is_alive(p):
            out.append(p)
        stack.extend(children.get(p, []))
    return out


def pids_with_marker(marker: str) -> list[int]:
    """Live processes whose environment carries ``SLURM_FT_TEST_MARKER=<marker>``."""
    needle = f"{MARKER_VAR}={marker}".encode()
    found = []
    for p in all_pids():
        if p == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{p}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and is_alive(p):
            found.append(p)
    return found


def describe(pids: list[int]) -> str:
    parts = []
    for p in pids:
        try:
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            cmd = "?"
        parts.append(f"{p}: {cmd.strip()}")
    return "; ".join(parts) or "none"
