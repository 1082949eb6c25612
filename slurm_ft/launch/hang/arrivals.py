"""When the workers' output reaches the launcher: exact signs of life for the hang watch.

The log pipeline's reader threads wake for every chunk a worker writes anyway (one thread
per pipe, ``output/applog.py``). A clock read there, under a lock nobody else holds for
long, times every line to the microsecond at no extra wake. Sampling the workers' byte
counts instead reads a gap only to the sampling period, so node 0 had to sample every 2 s
while it learned a fast trainer's rhythm, and each such wake costs a sleeping launcher
about as much as its whole fixed-period watch (``docs/guides/hangs.md``, "Measured:
launcher CPU"). Output the launcher does not capture (no cycle log, no echo: the workers inherit
its streams) is not seen here; sampling stays the watch's way for it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Heard:
    """What the pipes carried since the last look: the longest gap that ended in that time
    between two chunks of any of the node's workers (it may have begun before the look;
    ``gap`` 0 when the cycle's first chunk came in it), and the latest chunk's time."""

    gap_began: float
    gap: float
    last: float


class ArrivalClock:
    """The node's workers' output as it arrives in the current cycle (any pipe, any rank).

    :meth:`heard` runs once per chunk read on the log pipeline's hot path: floats under a
    lock, no allocation (a busy pipe is read in 64 KiB chunks, tens of thousands a second)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._last = -math.inf  # the latest chunk of the cycle (-inf: none yet)
        self._began = 0.0  # the window's longest gap: its start and length
        self._gap = -1.0  # -1: nothing arrived since the last look

    def heard(self) -> None:
        """A reader thread read a chunk of a worker's output just now."""
        now = self._clock()
        with self._lock:
            gap = now - self._last
            if gap > self._gap:
                if gap == math.inf:  # the cycle's first chunk ends no gap
                    self._began, self._gap = now, 0.0
                else:
                    self._began, self._gap = self._last, gap
            self._last = now

    def take(self) -> Heard | None:
        """What arrived since the last call (None: nothing)."""
        with self._lock:
            if self._gap < 0:
                return None
            window = Heard(self._began, self._gap, self._last)
            self._gap = -1.0
        return window

    def restart(self) -> None:
        """A new cycle: its first chunk ends no gap (the one since the last cycle's output
        spans the restart)."""
        with self._lock:
            self._last = -math.inf
            self._gap = -1.0
