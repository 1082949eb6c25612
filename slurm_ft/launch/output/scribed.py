"""The cycle log and per-rank files on a mount that may stop answering, written by a scribe.

``cyclefile.CycleFile`` writes a file itself; that is right on a local disk, and wrong on an
NFS, Lustre or FUSE mount, where a write to a dead server never returns and the launcher
could then neither finish the cycle nor exit (see :mod:`slurm_ft.scribe`). For such a
path the reader threads hand whole lines to a scribe child instead: the same whole-line
``O_APPEND`` writes, made by the child. The hand-over never waits on the file system: when
the child's write in hand has not finished after ``stall_after`` seconds, the lines are
counted as lost exactly as a full disk's are (``AppLogStats.lost_*``), said once in the
launcher's log and on stderr, and the workers go on. When the mount answers again the
child goes on with the lines it still holds (those were counted as sent, not lost).

Counting: the launcher counts what it handed over; the child counts what reached the file
and what the file refused (in shared memory); what was handed over but never written
(left in the pipe of an abandoned child) is lost as well.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft import scribe_child as wire
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.output.framing import Part

if TYPE_CHECKING:
    from slurm_ft.scribe import Scribe


class ScribedFile:
    """One append-only file of the cycle (slot ``slot`` of the scribe): the cycle log
    (whole lines, counted) or a per-rank file (``raw`` bytes)."""

    def __init__(self, scribe: Scribe, slot: int, path: Path, events: EventLog, *, raw: bool) -> None:
        self.scribe = scribe
        self.slot = slot
        self.path = path
        self.events = events
        self.raw = raw
        self.sent_bytes = 0
        self.sent_lines = 0
        self.refused_bytes = 0  # not handed over: the child had stopped answering
        self.refused_lines = 0
        self._lock = threading.Lock()
        self._stall_said = False
        encoded = os.fsencode(path)
        if not scribe.send(wire.OP_OPEN, slot, 0, (encoded,), len(encoded)):
            self._said_stalled()

    def write_parts(self, parts: Sequence[Part], size: int, lines: int) -> None:
        if not size:
            return
        arg = wire.RAW if self.raw else lines
        with self._lock:
            if self.scribe.send(wire.OP_APPEND, self.slot, arg, parts, size):
                self.sent_bytes += size
                self.sent_lines += lines
                return
            self.refused_bytes += size
            self.refused_lines += lines
        self._said_stalled()

    def write(self, data: bytes, lines: int = 0) -> None:
        self.write_parts((data,), len(data), lines)

    def _said_stalled(self) -> None:
        with self._lock:
            if self._stall_said:
                return
            self._stall_said = True
        what = "per-rank log" if self.raw else "application log"
        self.events.event(
            f"ERROR: {what} {self.path}: its file system stopped answering (a write has not "
            f"finished for {self.scribe.stall_after:g} s); workers keep running; lost lines "
            "are counted and reported when the cycle ends"
        )

    def close(self) -> None:
        self.scribe.send(wire.OP_CLOSE, self.slot, 0, (), 0)

    def lost(self) -> tuple[int, int, int, int]:
        """(written bytes, written lines, lost bytes, lost lines); final once the scribe
        was closed or abandoned."""
        c = self.scribe.counts(self.slot)
        in_flight_bytes = max(0, self.sent_bytes - c.written_bytes - c.lost_bytes)
        in_flight_lines = max(0, self.sent_lines - c.written_lines - c.lost_lines)
        return (
            c.written_bytes,
            c.written_lines,
            c.lost_bytes + in_flight_bytes + self.refused_bytes,
            c.lost_lines + in_flight_lines + self.refused_lines,
        )

    @property
    def lost_bytes(self) -> int:
        return self.lost()[2]


def on_child_event(events: EventLog, files: dict[int, ScribedFile]) -> Callable[[int, str], None]:
    """The scribe's reports (a file it cannot open or write, one writable again) as events
    worded like the in-process writer's."""

    def report(slot: int, text: str) -> None:
        f = files.get(slot)
        what = "per-rank log" if f is not None and f.raw else "application log"
        if text.startswith("writable again"):
            events.event(f"{what} {text.partition(': ')[2]} is writable again")
        else:
            events.event(
                f"ERROR: {what}: {text}; workers keep running; lost lines are counted and "
                "reported when the cycle ends"
            )

    return report
