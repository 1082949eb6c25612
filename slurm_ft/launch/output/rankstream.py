"""One worker stream as the application log reads it, and what is kept of it: the rank's
own file (torchrun's ``--redirects``/``--tee``), the stream's tail (its last traceback), and
its counts, folded into the cycle's when the log closes."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from slurm_ft.launch.output.cyclefile import AppLogStats, os_error_text
from slurm_ft.launch.output.echo import Tee
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.output.framing import LineFramer
from slurm_ft.launch.output.scribed import ScribedFile
from slurm_ft.launch.output.tracebacks import StreamTail, last_traceback


class RankFile:
    """torchrun's per-rank file of one stream: raw bytes, appended; loud once on failure."""

    def __init__(self, path: Path, events: EventLog) -> None:
        self.path = path
        self.events = events
        self.lost_bytes = 0
        self._fd: int | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            self._report(f"cannot open per-rank log {path}: {os_error_text(exc, path)}")

    def _report(self, text: str) -> None:
        if not self.lost_bytes:
            self.events.event(
                f"ERROR: {text}; this stream's output is missing from that file (the cycle log has it)"
            )

    def write(self, data: bytes) -> None:
        if self._fd is None:
            self.lost_bytes += len(data)
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self._report(f"cannot write per-rank log {self.path}: {exc.strerror or exc}")
            self.lost_bytes += len(view)

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError as exc:
                self.events.event(f"ERROR: closing per-rank log {self.path}: {exc.strerror or exc}")
            self._fd = None


@dataclass
class RankStream:
    """One worker pipe being read: its framer, its tee and what it has held back."""

    global_rank: int
    local_rank: int
    fd: int
    framer: LineFramer
    tee: Tee | None
    rank_file: RankFile | ScribedFile | None = None
    peak_pending: int = 0
    abandoned: bool = False
    # The end of this stream, where a crash's traceback is (see tracebacks.py), complete
    # once ``ended`` is set: the reader has seen the end of the stream.
    tail: StreamTail = field(default_factory=StreamTail)
    ended: threading.Event = field(default_factory=threading.Event)


def rank_traceback(streams: Sequence[RankStream], global_rank: int, wait: float) -> str | None:
    """The last Python traceback ``global_rank`` wrote, or None. Call once the worker
    exited: waits up to ``wait`` seconds for its pipes to end (a crash's traceback is
    the last thing it writes, and its end of stream follows the exit at once)."""
    deadline = time.monotonic() + wait
    found = None
    for stream in streams:
        if stream.global_rank != global_rank:
            continue
        stream.ended.wait(max(0.0, deadline - time.monotonic()))
        found = last_traceback(stream.tail.data()) or found
    return found


def count_streams(streams: Sequence[RankStream], stats: AppLogStats) -> None:
    """Add the streams' own counts to the cycle's (once every reader has ended)."""
    for stream in streams:
        stats.split_lines += stream.framer.split_lines
        stats.abandoned_streams += stream.abandoned
        stats.peak_pending_bytes = max(stats.peak_pending_bytes, stream.peak_pending)
        if stream.rank_file is not None:
            stats.rank_file_lost_bytes += stream.rank_file.lost_bytes
