"""Timed readings of the job's newest snapshot step, for the report.

The report cuts each cycle into start-up, kept training and lost work at the moments the
job's progress moved. A checkpoint says so only every few minutes; a snapshot every step
or few, and the next cycle resumes from it, so the work up to it is kept. Without these
readings the report could only charge everything after the last checkpoint as lost (#43).
The step is read off the slot headers (no torch), and only a change is written.

Who reads: the launcher of node rank 0 in the cycle (the node that hosts global rank 0),
for that cycle only, not the launcher that hosts the store. With spares the store's host
may stand by (a suspect) or its node rank may move; its own memory then holds no new
snapshot, and a job that trained for twenty minutes read as one that kept nothing after
the last checkpoint (#44: goodput 57.5 % in the report against 69.5 % in the trainer's step
log). Every rank of the job takes its snapshot of the same step (the collectives keep them
in lockstep), so one node's memory times the job's; which step the job kept is the
report's to say from the next cycle's records (the lowest step its ranks resumed from).
The readings of one cycle end before its launcher joins the next, and node 0 waits for
that join before the next cycle's reader starts: one writer of the file at a time, whichever
host it runs on (a lost node's launcher writes no more: it is dead or fenced).

The no-progress guard on the store's host reads the job's newest snapshot step here too (the
last line, :func:`newest_of_job`), for the same reason: its own memory stood at step 868
while the active nodes were past 4,000, so cycles that trained counted as no progress and
``--max-no-progress-cycles`` could stop a job whose snapshots moved on (#44). A file read at
each cycle's end costs no store traffic; the holdings each launcher publishes before a join
would give the step only at the next join, after the guard has closed the cycle.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Protocol

from slurm_ft import readinglines, records

# As often as node 0 looks at the progress source (``hang.judge.READINGS_PERIOD_S``): a
# cycle's kept work is known to about this much.
PERIOD_S = 0.5
STOP_WAIT_S = 5.0
# The end of the file the guard reads: a line is about 50 bytes, and only the last counts.
TAIL_BYTES = 4096


class SnapshotReadings(threading.Thread):
    """Appends a ``records.ProgressReading`` each time the node's newest snapshot step
    changes. ``add_line`` is the launcher's bounded append (a state dir on a dead mount
    drops the line, never stalls the thread)."""

    def __init__(
        self,
        newest_step: Callable[[], int | None],
        path: Path,
        add_line: Callable[[Path, bytes], None] | None,
        clock: Callable[[], float] = time.time,
        period: float = PERIOD_S,
    ) -> None:
        super().__init__(name="slurm-ft-snapshot-readings", daemon=True)
        self._newest_step = newest_step
        self._path = path
        self._add_line = add_line
        self._clock = clock
        self._period = period
        self._stop_event = threading.Event()

    def run(self) -> None:
        last: int | None = None
        while not self._stop_event.is_set():
            step = self._newest_step()
            if step is not None and step != last:
                last = step
                with contextlib.suppress(OSError):
                    reading = records.ProgressReading(self._clock(), step, records.SNAPSHOT_MARK)
                    records.append_reading(self._path, reading, self._add_line)
            self._stop_event.wait(self._period)

    def stop(self, wait: float = STOP_WAIT_S) -> None:
        """Stop, and wait (bounded: an append is) for the last reading to be written: the
        next cycle's reader may run on another host."""
        self._stop_event.set()
        if self.is_alive():
            self.join(wait)


def watch(
    newest_step: Callable[[], int | None] | None,
    path: Path,
    add_line: Callable[[Path, bytes], None] | None,
    clock: Callable[[], float] = time.time,
) -> SnapshotReadings | None:
    """The readings' thread, started; None where this node keeps no snapshots."""
    if newest_step is None:
        return None
    thread = SnapshotReadings(newest_step, path, add_line, clock)
    thread.start()
    return thread


def for_cycle(
    slot: int | None,
    newest_step: Callable[[], int | None] | None,
    path: Path,
    add_line: Callable[[Path, bytes], None] | None,
    clock: Callable[[], float] = time.time,
) -> SnapshotReadings | None:
    """The cycle's readings' thread, started where this launcher runs node rank 0
    (``slot``: its node rank this cycle, None on a spare); else None."""
    return watch(newest_step, path, add_line, clock) if slot == 0 else None


class TailReader(Protocol):
    """The launcher's bounded state-dir reads (``launch.books.stateio.StateIO``)."""

    def read_bytes(self, path: Path, *, tail: int = 0) -> bytes | None: ...


def newest_of_job(path: Path, files: TailReader) -> int | None:
    """The job's newest snapshot step: the last reading of whichever launcher ran node rank
    0 (None: none yet, or the state dir did not answer in time)."""
    try:
        tail = files.read_bytes(path, tail=TAIL_BYTES)
    except OSError:
        return None
    reading = readinglines.last_reading(tail) if tail else None
    return reading.step if reading is not None else None


def for_guard(on: bool, path: Path, files: TailReader) -> Callable[[], int | None] | None:
    """The no-progress guard's look at the job's newest snapshot step; None without snapshots."""
    return partial(newest_of_job, path, files) if on else None
