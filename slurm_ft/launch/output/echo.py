"""The console echo (``tee``): its own thread behind a bounded queue, so a console that
does not read (a stopped terminal, a stalled srun) costs echo lines, never log lines."""

from __future__ import annotations

import collections
import os
import threading

from slurm_ft.launch.output.eventlog import EventLog

DEFAULT_TEE_QUEUE_BYTES = 16 * 1024 * 1024


class Tee:
    """Console echo behind a bounded queue; drops (and counts) rather than block the log."""

    def __init__(self, fd: int, limit: int, events: EventLog) -> None:
        self.fd = fd
        self.limit = limit
        self.events = events
        self.dropped_lines = 0
        self._unreported_drops = 0
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._closing = False
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="applog-tee", daemon=True)
        self._thread.start()

    def put(self, data: bytes, lines: int) -> None:
        with self._cond:
            if self._failed:
                return
            if self._queued + len(data) > self.limit:
                if not self.dropped_lines:
                    self.events.event(
                        "console echo cannot keep up; skipping echo lines (the cycle log has them)"
                    )
                self.dropped_lines += lines
                self._unreported_drops += lines
                return
            if self._unreported_drops:
                note = (
                    f"slurm-ft-launch: console echo skipped {self._unreported_drops} lines "
                    "(console too slow); the cycle log has them\n"
                ).encode()
                self._queue.append(note)
                self._queued += len(note)
                self._unreported_drops = 0
            self._queue.append(data)
            self._queued += len(data)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                data = self._queue.popleft()
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self.fd, view) :]
            except OSError as exc:
                with self._cond:
                    self._failed = True
                    self._queue.clear()
                    self._queued = 0
                self.events.event(f"console echo stopped: {exc.strerror or exc}")
                return
            with self._cond:
                self._queued -= len(data)

    def close(self, timeout: float) -> None:
        """Flush what is queued within ``timeout``; a console that does not read loses it."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)
        with self._cond:
            if self._thread.is_alive():
                left = sum(chunk.count(b"\n") for chunk in self._queue)
                self.dropped_lines += left
                self._queue.clear()
                self._queued = 0
            if self._unreported_drops and not self._thread.is_alive():
                note = f"slurm-ft-launch: console echo skipped {self._unreported_drops} lines\n".encode()
                try:
                    os.write(self.fd, note)
                except OSError:
                    pass
                self._unreported_drops = 0


class Echoes:
    """The console echoes of one cycle: one :class:`Tee` per console stream, made when a
    worker's stream first echoes to it (``kind`` "stderr" to stderr, the rest to stdout)."""

    def __init__(self, stdout_fd: int, stderr_fd: int, limit: int, events: EventLog) -> None:
        self._fds = {"stdout": stdout_fd, "stderr": stderr_fd}
        self._limit = limit
        self._events = events
        self._tees: dict[int, Tee] = {}

    def to(self, kind: str) -> Tee:
        fd = self._fds["stderr" if kind == "stderr" else "stdout"]
        if fd not in self._tees:
            self._tees[fd] = Tee(fd, self._limit, self._events)
        return self._tees[fd]

    def close(self, timeout: float) -> int:
        """Flush every echo (each within ``timeout``); the lines they dropped in all."""
        dropped = 0
        for tee in self._tees.values():
            tee.close(timeout)
            dropped += tee.dropped_lines
        return dropped
