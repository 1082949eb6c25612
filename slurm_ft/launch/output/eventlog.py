"""The launcher's own event log: one timestamped line per event, file and stderr.

Several launchers (one per node) may share one launcher-log file, so each event is one
``os.write`` of one whole line on an ``O_APPEND`` descriptor: the kernel appends it in one
piece on local file systems. The log exists to explain failures, so it must never become
one: I/O errors are reported once on stderr (even with ``quiet``), counted, and swallowed.

A launcher log off local disks (an NFS, Lustre or FUSE mount) is written by a scribe
child (``slurm_ft.scribe``): an event never waits on a mount that stopped answering. Once
the child's write has been stuck for ``stall_after`` seconds the events go to stderr only
(``quiet`` or not), which is said once.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurm_ft.scribe import Scribe

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


def _needs_scribe(path: Path, scribe: bool | None) -> bool:
    if scribe is not None:
        return scribe
    from slurm_ft.health.storage import off_local_disk

    return off_local_disk(path.parent)


class EventLog:
    def __init__(
        self,
        path: Path | None,
        node_name: str,
        *,
        quiet: bool,
        stderr_fd: int = 2,
        stall_after: float = 10.0,
        scribe: bool | None = None,
    ) -> None:
        """``scribe`` None: a scribe child when ``path`` is off local disks."""
        self.path = path
        self.node_name = node_name
        self.quiet = quiet
        self.stderr_fd = stderr_fd
        self.failed_writes = 0
        self._reported = False
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._scribe: Scribe | None = None
        if path is not None and _needs_scribe(path, scribe):
            from slurm_ft import scribe_child as wire
            from slurm_ft.scribe import Scribe

            self._scribe = Scribe("launcherlog", stall_after=stall_after, on_event=self._child_said)
            encoded = os.fsencode(path)
            self._scribe.send(wire.OP_OPEN, 0, 0, (encoded,), len(encoded))
        elif path is not None:
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

    def _child_said(self, _slot: int, text: str) -> None:
        if not text.startswith("writable again"):
            self.failed_writes += 1
            self._report(f"{text}; further launcher-log write failures are counted, not reported")

    def _to_scribe(self, line: bytes) -> bool:
        """Hand the line to the scribe; False when its mount stopped answering."""
        from slurm_ft import scribe_child as wire

        assert self._scribe is not None
        if self._scribe.send(wire.OP_APPEND, 0, 1, (line,), len(line)):
            return True
        self.failed_writes += 1
        self._report(
            f"launcher log {self.path}: its file system stopped answering (a write has not finished "
            f"for {self._scribe.stall_after:g} s); events go to stderr only"
        )
        return False

    def event(self, message: str) -> None:
        line = format_event(datetime.datetime.now(datetime.timezone.utc), self.node_name, message)
        with self._lock:
            if self._scribe is not None and not self._to_scribe(line) and self.quiet:
                with contextlib.suppress(OSError):
                    _write_all(self.stderr_fd, line)  # stalled: stderr is all there is
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
            if self._scribe is not None and not self._scribe.close(
                0.0 if self._scribe.stalled() else self._scribe.stall_after
            ):
                self._report(
                    f"launcher log {self.path}: its file system does not answer; "
                    "the last events may be missing from it"
                )
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
