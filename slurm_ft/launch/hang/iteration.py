"""Node 0's watch over the progress source: when the checkpoint iteration last moved,
and the cycle's first progress past the step it resumed from."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from slurm_ft.launch.hang.verdicts import Detector, Hang


class IterationWatch(threading.Thread):
    """Node 0: looks at the progress source (``--progress-source`` or the iteration file)
    every few seconds on its own thread (a dead mount stalls this thread, never the
    launcher) and remembers when it last moved."""

    def __init__(
        self,
        read: Callable[[], tuple[int, str | None] | None],
        period: float,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[int, str | None], None] | None = None,
    ) -> None:
        super().__init__(name="slurm-ft-iteration-watch", daemon=True)
        self._read = read
        self._on_change = on_change  # the report's timed readings (``records.ProgressReading``)
        self._period = period
        self._clock = clock
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._value: tuple[int, str | None] | None = None
        self._changed = clock()
        # The cycle's first progress: a step past the first one read in the cycle (the step
        # it resumed from; a checkpoint the last cycle left just before its end may be read
        # only now, so the first reading sets the mark and never counts; nor does a source
        # that could not be read: a resumed step read after it is no progress).
        self._resumed_at: int | None = None
        self._progressed: float | None = None

    def restart(self) -> None:
        """A new cycle: the stall clock starts again, and its first progress is still to come."""
        with self._lock:
            self._changed = self._clock()
            self._resumed_at = None
            self._progressed = None

    def run(self) -> None:
        while not self._stop_event.is_set():
            value = self._read()
            moved = False
            with self._lock:
                if value is not None and value != self._value:
                    self._value = value
                    self._changed = self._clock()
                    moved = True
                if value is not None:  # None: not there yet, or unreadable: no mark to go past
                    if self._resumed_at is None:
                        self._resumed_at = value[0]
                    elif self._progressed is None and value[0] > self._resumed_at:
                        self._progressed = self._clock()
            if moved and value is not None and self._on_change is not None:
                self._on_change(*value)
            self._stop_event.wait(self._period)

    def progressed(self) -> float | None:
        """When the cycle first went past the step it resumed from (None: not yet)."""
        with self._lock:
            return self._progressed

    def still(self) -> float:
        """Seconds since the source last moved (or since the cycle began)."""
        with self._lock:
            return max(0.0, self._clock() - self._changed)

    def stalled(self, timeout: float, basis: str | None = None) -> Hang | None:
        with self._lock:
            still = self._clock() - self._changed
            value = self._value
        if still <= timeout:
            return None
        at = f"at {value[0]}" if value is not None else "never read"
        why = basis or f"hang.iteration_timeout {timeout:g}s"
        detail = f"checkpoint iteration {at} for {still:.1f}s ({why})"
        return Hang(Detector.ITERATION, (), still, detail)

    def stop(self) -> None:
        self._stop_event.set()
