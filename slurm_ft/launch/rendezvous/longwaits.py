"""A connection's long store waits, taken on another thread (a kept one) so that a signal
ends them at once (issue 45).

A store wait cannot be interrupted: torch blocks in ``recv``, and a Python signal handler
runs only once it returns. Waits were once taken in 0.2 s slices to notice a signal; each
waiting launcher then cost node 0 five requests a second, 20,000 a second at 4,096 nodes,
and a restart at that size never finished. So a long wait runs on another thread for its
whole timeout, the store's business alone, and the caller's thread watches. That thread
used to be started for each wait: 0.38 ms of a launcher's CPU per wait against 0.03 ms for
the wait itself, and 0.11 ms with one thread kept for the connection (64 launchers of one
process, each waiting on a key already set; ``benchmarks.restart_cost`` for a whole
restart); now the process's kept threads (``keptthreads``) take every connection's waits.
A big job's restart is one such wait per launcher, which the scale harness's 4,095
launchers pay on two cores.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Callable

from slurm_ft.launch.rendezvous import keptthreads, stores
from slurm_ft.launch.rendezvous.stores import Interrupted, Store

# How often a caller blocked in :meth:`LongWaits.wait` looks at its abort predicate when
# nothing woke it: a local look (the heart-beat's clock, the background threads), no
# request to the store. A signal does not wait for it where the caller names the signal
# box's wake-up fd, as the launcher does. Not shorter: the scale harness's 4,095 launchers
# on one 2-core machine, each looking every 0.2 s, ran it at a load of 1,500.
ABORT_LOOK_S = 1.0


class _Request:
    """One wait handed to the thread. Whoever of the two sides comes second closes
    ``done``: the caller when the wait ended first, else the thread (the caller gave up
    on it and is gone)."""

    def __init__(self, store: Store, keys: list[str], timeout: float) -> None:
        self._store: Store | None = store
        self._keys = keys
        self._timeout = timeout
        self._done = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        self._outcome: list[bool | BaseException] = []
        self._lock = threading.Lock()
        self._ended = False
        self._given_up = False

    def run(self) -> None:
        """On the thread."""
        store, self._store = self._store, None  # an idle thread holds no connection alive
        assert store is not None
        try:
            self._outcome.append(stores.wait(store, self._keys, self._timeout))
        except BaseException as exc:  # handed to the caller's thread
            self._outcome.append(exc)
        with self._lock:
            self._ended = True
            if self._given_up:
                os.close(self._done)
            else:
                os.eventfd_write(self._done, 1)

    def watch(self, abort: Callable[[], bool], signal_fd: int | None) -> bool:
        """On the caller's thread: the wait's answer, or :class:`Interrupted` as soon as
        ``abort`` turns true. poll, not select: select takes no descriptor past 1,023, and a
        process may hold thousands (the scale harness's peer process hosting a successor's
        store did)."""
        poller = select.poll()
        for fd in (self._done,) if signal_fd is None else (self._done, signal_fd):
            poller.register(fd, select.POLLIN)
        try:
            while True:
                ready = {fd for fd, _ in poller.poll(ABORT_LOOK_S * 1000)}
                if self._done in ready:
                    break
                if abort():
                    raise Interrupted()
                if signal_fd in ready:  # a signal the predicate does not count: not again
                    with contextlib.suppress(OSError):
                        while os.read(signal_fd, 512):
                            pass
        finally:
            with self._lock:
                if self._ended:
                    os.close(self._done)
                else:
                    self._given_up = True
        result = self._outcome[0]
        if isinstance(result, BaseException):
            raise result
        return result


class LongWaits:
    """The long waits of one store connection, each on a kept thread (``keptthreads``: one
    started per wait cost a launcher 0.38 ms of CPU per wait, one kept per connection 0.11
    ms, and a new connection, a store succession's, started its own)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def wait(
        self, keys: list[str], timeout: float, abort: Callable[[], bool], signal_fd: int | None = None
    ) -> bool:
        """``stores.wait``, during which ``abort`` is looked at: :class:`Interrupted` as soon
        as it turns true (a signal arrived; it may also raise, the store host being lost),
        at once when ``signal_fd`` (``signal.set_wakeup_fd``'s, which the kernel's signal
        makes readable even while a thread is blocked) turns readable, else every
        :data:`ABORT_LOOK_S`. A wait given up on stays on its thread until it ends; the
        connection's next call waits for it (torch serialises a connection's calls), which
        bounds that call's delay by the wait's ``timeout``. A wait no longer than
        :data:`ABORT_LOOK_S` is taken on the caller's thread: a hand-over between two
        threads is all the thread would add (jobs of up to 513 nodes wait in such slices:
        ``reads.when_set``)."""
        if timeout <= ABORT_LOOK_S:
            return stores.wait(self._store, keys, timeout)
        request = _Request(self._store, keys, timeout)
        keptthreads.run(request.run)
        return request.watch(abort, signal_fd)
