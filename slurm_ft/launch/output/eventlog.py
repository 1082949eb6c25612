"""The launcher's own event log: one timestamped line per event, file and stderr.

Several launchers (one per node) may share one launcher-log file, so each event is one
``os.write`` of one whole line on an ``O_APPEND`` descriptor: the kernel appends it in one
piece on local file systems. The log exists to explain failures, so it must never become
one: I/O errors are reported once on stderr (even with ``quiet``), counted, and swallowed.
"""

from __future__ import annotations

import datetime
import os
import threading
from pathlib import Path

PROGRAM = "slurm-ft-launch"


def format_event(when: datetime.datetime, node_name: str, message: str) -> bytes:
    """``2026-12-02T15:40:01.123Z node1 slurm-ft-launch: <message>`` plus ``\\n``."""
    utc = when.astimezone(datetime.timezone.utc)
    stamp = utc.strftime("%Y-%m-%dT%H:%M:%S") + f".{utc.microsecond // 1000:03d}Z"
    one_line = message.replace("\r", " ").replace("\n", " | ")
    return f"{stamp} {node_name} {PROGRAM}: {one_line}\n".encode(errors="backslashreplace")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class EventLog:
    def __init__(self, path: Path | None, node_name: str, *, quiet: bool, stderr_fd: int = 2) -> None:
        self.path = path
        self.node_name = node_name
        self.quiet = quiet
        self.stderr_fd = stderr_fd
        self.failed_writes = 0
        self._reported = False
        self._lock = threading.Lock()
        self._fd: int | None = None
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                self.failed_writes += 1
                self._report(
                    f"cannot open launcher log {path}: {exc.strerror or exc}; events go to stderr only"
                )

    def _report(self, problem: str) -> None:
        """Say once, on stderr regardless of ``quiet``, that events are being lost."""
        if self._reported:
            return
        self._reported = True
        line = format_event(datetime.datetime.now(datetime.timezone.utc), self.node_name, problem)
        try:
            _write_all(self.stderr_fd, line)
        except OSError:
            pass

    def event(self, message: str) -> None:
        line = format_event(datetime.datetime.now(datetime.timezone.utc), self.node_name, message)
        with self._lock:
            if self._fd is not None:
                try:
                    _write_all(self._fd, line)
                except OSError as exc:
                    self.failed_writes += 1
                    self._report(
                        f"cannot write launcher log {self.path}: {exc.strerror or exc}; "
                        "further launcher-log write failures are counted, not reported"
                    )
            if not self.quiet:
                try:
                    _write_all(self.stderr_fd, line)
                except OSError:
                    pass

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
