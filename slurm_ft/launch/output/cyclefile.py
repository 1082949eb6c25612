"""The cycle file's writing side: whole-line appends, loss accounting, and the counts.

Line integrity in the shared cycle file: every write is one ``writev`` of whole lines on
an ``O_APPEND`` descriptor. On local file systems (ext4, xfs, tmpfs) Linux appends a single
write or writev under the inode lock, so another node's (another process's) write lands
before or after it, never inside. A short write only happens when the disk fills up, the
file size limit is hit or a signal interrupts: the rest is then written by a second write,
which may land after another node's write; the line stays in the file but may be torn,
which is the price of not losing it, and it happens only together with the loud disk-full
report. NFS clients do not append atomically at all, hence ``--applog-per-node``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.output.framing import Part

# Linux accepts 1024 pieces per writev; more (many long-line pieces) are joined first.
MAX_WRITE_PARTS = 1024


def os_error_text(exc: OSError, path: Path) -> str:
    """The error, naming the path it concerns when that is not the log file itself."""
    text = exc.strerror or str(exc)
    if exc.filename is not None and str(exc.filename) != str(path):
        text += f" ({exc.filename})"
    return text


@dataclass
class AppLogStats:
    """Counts for one cycle file. ``lines``/``bytes`` are what reached the file (the
    console when there is no file), prefixes included; ``lost_*`` could not be written."""

    lines: int = 0
    bytes: int = 0
    lost_lines: int = 0
    lost_bytes: int = 0
    split_lines: int = 0
    abandoned_streams: int = 0
    tee_dropped_lines: int = 0
    peak_pending_bytes: int = 0
    rank_file_lost_bytes: int = 0


class CycleFile:
    """The cycle file's writing side: whole-line appends, loss accounting, one report of
    a failure and one of the recovery. Shared by every reader thread of the cycle."""

    def __init__(self, path: Path | None, stats: AppLogStats, events: EventLog) -> None:
        self.path = path
        self.stats = stats
        self.events = events
        self._fd: int | None = None
        # Guards the file descriptor, the failure state and the counters. Held across
        # os.write (which releases the GIL), so other readers keep framing meanwhile.
        self._write_lock = threading.Lock()
        self._write_failed = False
        self._loss_reported = False
        self._torn = False
        if path is not None:
            self._open(path)

    def _open(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            self._write_failed = True
            self._loss_reported = True
            self.events.event(
                f"ERROR: cannot open application log {path}: {os_error_text(exc, path)}; "
                "workers keep running, their output is NOT logged (lost lines are counted)"
            )

    def write(self, data: bytes, lines: int) -> None:
        """Append whole lines in one write; on failure count the loss and keep going."""
        self.write_parts((data,), len(data), lines)

    def write_parts(self, parts: Sequence[Part], size: int, lines: int) -> None:
        """Append ``parts`` (whole lines, ``size`` bytes in all) with one ``writev``; the
        rest of a short write follows in plain writes. On failure count the loss and keep
        going."""
        if not size:
            return
        with self._write_lock:
            if self._fd is None:
                if self.path is None:
                    self.stats.bytes += size
                    self.stats.lines += lines
                else:
                    self.stats.lost_bytes += size
                    self.stats.lost_lines += lines
                return
            # After a failed write left a partial line at the end of the file, end it first
            # so that the next record starts on a line of its own.
            lead = b"\n" if self._torn else b""
            pieces = [lead, *parts] if lead else parts
            if len(pieces) > MAX_WRITE_PARTS:
                pieces = [b"".join(pieces)]
            total = len(lead) + size
            done = 0
            try:
                done = os.writev(self._fd, pieces)
                if done < total:
                    buf = b"".join(pieces)
                    view = memoryview(buf)
                    while done < total:
                        done += os.write(self._fd, view[done:])
            except OSError as exc:
                self._count_failure(b"".join(parts), lead, done, exc)
                return
            self._torn = False
            self.stats.bytes += size
            self.stats.lines += lines
            if self._write_failed:
                self._write_failed = False
                self.events.event(
                    f"application log {self.path} is writable again; "
                    f"{self.stats.lost_lines} lines ({self.stats.lost_bytes} bytes) were lost so far"
                )

    def _count_failure(self, data: bytes, lead: bytes, done: int, exc: OSError) -> None:
        if done:
            self._torn = (lead + data)[done - 1] != 0x0A
        kept = max(0, done - len(lead))
        self.stats.bytes += kept
        self.stats.lines += data.count(b"\n", 0, kept)
        self.stats.lost_bytes += len(data) - kept
        self.stats.lost_lines += data.count(b"\n", kept)
        if not self._loss_reported:
            self._loss_reported = True
            self.events.event(
                f"ERROR: cannot write application log {self.path}: {exc.strerror or exc}; "
                "workers keep running; lost lines are counted and reported when the cycle ends"
            )
        self._write_failed = True

    def close(self) -> None:
        with self._write_lock:
            if self._fd is not None:
                try:
                    os.close(self._fd)
                except OSError as exc:
                    self.events.event(f"ERROR: closing application log {self.path}: {exc.strerror or exc}")
                self._fd = None
