"""Terminating signals received by the launcher, turned into something the loop can wait on.

The handler only records the signal; a wake-up pipe (``signal.set_wakeup_fd``) makes every
``poll`` in the loop return at once, so a SIGTERM during a 300 s join wait or while workers
train is acted on within milliseconds without the loop ever spinning.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable, Iterable
from types import FrameType

from slurm_ft.exitcodes import signal_name

# What signal.signal installs and returns: a function, SIG_DFL/SIG_IGN, or None (a handler
# not installed from Python).
Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class SignalBox:
    """Installs handlers for ``signals`` (main thread only) and remembers the first one.

    With ``install=False`` nothing is installed and signals arrive only through
    :meth:`deliver`: several launchers can then run in one process (the cycle's unit
    tests), each with its own box.
    """

    def __init__(self, signals: Iterable[signal.Signals | int], *, install: bool = True) -> None:
        self.signals = [signal.Signals(s) for s in signals]
        self.received: signal.Signals | None = None
        self.received_at: float | None = None  # time.monotonic() of its arrival
        # The first signal arrived again (a second Ctrl-C: the user will not wait).
        self.repeated = False
        self._read_fd, self._write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._old_wakeup: int | None = None
        self._old_handlers: dict[signal.Signals, Handler] = {}
        if install:
            self._old_wakeup = signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
            self._old_handlers = {s: signal.signal(s, self._handle) for s in self.signals}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signal.Signals(signum)
            self.received_at = time.monotonic()
        elif signum == self.received:
            self.repeated = True

    def deliver(self, signum: int) -> None:
        """As if ``signum`` had arrived (what the handler and the wake-up fd do)."""
        self._handle(signum, None)
        with contextlib.suppress(OSError):
            os.write(self._write_fd, bytes([int(signum) & 0xFF]))

    def arrived(self) -> bool:
        """Whether a signal arrived (a check for the store waits: they end early then)."""
        return self.received is not None

    @property
    def fd(self) -> int:
        """Readable whenever a signal has arrived; include it in every poll."""
        return self._read_fd

    def sleep(self, seconds: float) -> None:
        """Sleep, but return early when a signal arrives."""
        if self.received is not None:
            return
        poller = select.poll()
        poller.register(self._read_fd, select.POLLIN)
        poller.poll(max(0, int(seconds * 1000)))
        self.drain()

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._read_fd, 512):
                pass

    def close(self) -> None:
        for sig, old in self._old_handlers.items():
            with contextlib.suppress(ValueError, TypeError):
                signal.signal(sig, old)
        if self._old_wakeup is not None:
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(self._old_wakeup)
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


def forwarding_note(signum: int, term_timeout: float | None) -> str:
    """The event line of a signal received during a cycle; ``term_timeout`` None: this
    launcher has no workers to forward it to (a spare). Ctrl-C at a terminal: say how long
    the wait is, and that a second one cuts it short; Slurm's signals (a checkpoint on
    USR1, TERM) keep their whole grace."""
    name = signal_name(signum)
    if term_timeout is None:
        return f"received {name}"
    again = "; Ctrl-C again kills them now" if signum == signal.SIGINT else ""
    return f"received {name}: forwarding to workers; waiting up to {term_timeout:g} s for them to exit{again}"
