"""A peer launcher's last resort when node 0 freezes instead of dying.

A dead store host resets its connections and the main thread notices at its next store
call. A frozen or unreachable one answers nothing, and a blocked store call cannot be
interrupted, so the main thread may never get to notice. The watchdog therefore lives on
its own thread and does no store I/O itself: it only reads the heart-beat's verdict.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from slurm_ft.launch import rendezvous as rdzv

GRACE_S = 1.0


class StoreWatchdog(threading.Thread):
    """Once the heart-beat has been failing for ``grace`` seconds more, call ``emergency``
    (which kills the worker groups and ends the launcher with exit 1)."""

    def __init__(self, heartbeat: rdzv.Heartbeat, emergency: Callable[[str], None], grace: float) -> None:
        super().__init__(name="slurm-ft-store-watchdog", daemon=True)
        self._heartbeat = heartbeat
        self._emergency = emergency
        self._grace = grace
        self._stop_event = threading.Event()

    def run(self) -> None:
        first_seen: float | None = None
        while not self._stop_event.wait(0.25):
            why = self._heartbeat.lost()
            if why is None:
                first_seen = None
                continue
            now = time.monotonic()
            if first_seen is None:
                first_seen = now
            elif now - first_seen >= self._grace:
                self._emergency(why)
                return

    def stop(self) -> None:
        self._stop_event.set()
