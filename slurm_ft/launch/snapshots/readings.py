"""Node 0's timed readings of its node's newest snapshot step, for the report.

The report cuts each cycle into start-up, kept training and lost work at the moments the
job's progress moved. A checkpoint says so only every few minutes; a snapshot every step
or few, and the next cycle resumes from it, so the work up to it is kept. Without these
readings the report could only charge everything after the last checkpoint as lost (#43).
The step is read off the slot headers (no torch), and only a change is written.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

from slurm_ft import records

# As often as node 0 looks at the progress source (``hang.judge.READINGS_PERIOD_S``): a
# cycle's kept work is known to about this much.
PERIOD_S = 0.5


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

    def stop(self) -> None:
        self._stop_event.set()


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
