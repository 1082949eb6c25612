"""The launcher's background threads: heart-beat, peer monitor, halt waiter, watchdog.

Each runs on its own store connection, because a store call blocks its thread and the
main thread must stay free to watch the workers. None of them is allowed to die
silently: a thread that ends for any reason other than :meth:`stop` records why
(:meth:`BackgroundThread.died`) and wakes the main loop, which then ends the attempt as
it would on a lost store. Staleness of a heart-beat is judged on node 0's own monotonic
clock (when did the counter last change), never by comparing clocks of two machines.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence

from slurm_ft.launch.rendezvous.beatperiod import beat_period, next_beat_in
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.stores import StoreLost

Clock = Callable[[], float]
WATCHDOG_GRACE_S = 1.0
# Connections each launcher holds to the store host: its main one, and one for each of the
# heart-beat (on node 0: the peer monitor) and the halt waiter (see BackgroundSet.start).
STORE_CONNECTIONS = 3
WATCHDOG_TICK_S = 0.25
UNREADABLE_FACTOR = 3.0


class BackgroundThread(threading.Thread):
    """A daemon thread whose unexpected end is recorded and announced on ``wake_fd``."""

    def __init__(self, name: str, wake_fd: int | None) -> None:
        super().__init__(name=name, daemon=True)
        self._wake_fd = wake_fd
        self._stop_event = threading.Event()
        self._death: str | None = None
        self._death_lock = threading.Lock()
        self._death_hooks: list[Callable[[], None]] = []
        self.lost_store = False  # it died because the store went away

    def body(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        try:
            self.body()
        except StoreLost as exc:
            self.lost_store = True
            self._die(str(exc))
        except Exception as exc:  # a bug must not leave the launcher blind
            self._die(f"{type(exc).__name__}: {exc}")
        else:
            if not self._stop_event.is_set():
                self._die("ended unexpectedly")

    def _die(self, why: str) -> None:
        if self._stop_event.is_set():
            return
        with self._death_lock:
            self._death = f"{self.name} stopped: {why}"
        self._wake()
        for hook in self._death_hooks:
            hook()

    def on_death(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` (from this thread) when it dies; set up before :meth:`start`."""
        self._death_hooks.append(hook)

    def died(self) -> str | None:
        with self._death_lock:
            return self._death

    def _wake(self) -> None:
        """Tell the main loop that something it must act on happened."""
        if self._wake_fd is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake_fd, b"w")

    def stop(self) -> None:
        self._stop_event.set()


class Heartbeat(BackgroundThread):
    """A peer's heart-beat. The store host being lost shows up here as an error or as no
    successful beat for ``timeout`` seconds (a frozen host answers nothing, and a blocked
    store call cannot be interrupted): see :meth:`lost`."""

    def __init__(
        self,
        client: Client,
        node: int,
        interval: float,
        timeout: float,
        *,
        wake_fd: int | None = None,
        clock: Clock = time.monotonic,
        phase: float = 0.0,
        wall: Clock = time.time,
    ) -> None:
        """``phase``: where in each period this launcher beats (:func:`next_beat_in`)."""
        super().__init__("slurm-ft-heartbeat", wake_fd)
        self.client = client
        self._node = node
        self._interval = interval
        self._timeout = timeout
        self._clock = clock
        self._phase = phase
        self._wall = wall
        self._lock = threading.Lock()
        self._last_ok = clock()

    def body(self) -> None:
        while not self._stop_event.is_set():
            self.client.beat(self._node)
            with self._lock:
                self._last_ok = self._clock()
            self._stop_event.wait(self.next_in())

    def next_in(self) -> float:
        """Seconds to this launcher's next beat: its first comes at once, the others on its
        slot of each period."""
        return next_beat_in(self._wall(), self._interval, self._phase)

    def lost(self) -> str | None:
        """Why the store host counts as lost, or None."""
        died = self.died()
        if died is not None:
            return died
        with self._lock:
            silent = self._clock() - self._last_ok
        if silent > self._timeout:
            return f"rendezvous store silent for {silent:.1f}s"
        return None

    def silent(self) -> bool:
        """Lost by silence (the host neither answers nor closes: frozen, or gone without a
        word), not by a refused or broken connection (its launcher died, its node answers)."""
        if self.died() is not None:
            return False
        with self._lock:
            return self._clock() - self._last_ok > self._timeout

    def lost_in(self) -> float:
        """Seconds until :meth:`lost` turns true if no beat succeeds meanwhile (0: now)."""
        if self.died() is not None:
            return 0.0
        with self._lock:
            silent = self._clock() - self._last_ok
        return max(0.0, self._timeout - silent)


class PeerMonitor(BackgroundThread):
    """Node 0: notices peers whose heart-beat counter stopped changing.

    A peer counts only once its counter moved above 0 (it connected); one that never
    connects is the join timeout's business. A value that is missing, forged or malformed
    is no sign of life, and no proof of death either: while the last look found one, the
    peer counts as lost only after ``UNREADABLE_FACTOR`` times the timeout (someone who
    overwrites a live peer's key over and over must not get it declared lost; a live peer
    sets its key again at every beat, so its real value shows between the overwrites). A
    sealed beat lower than one seen before is an old one replayed: it counts as unreadable.
    """

    def __init__(
        self,
        client: Client,
        peers: Sequence[int],
        interval: float,
        timeout: float,
        wake_fd: int | None,
        *,
        clock: Clock = time.monotonic,
        look_every: int = 1,
    ) -> None:
        """``look_every``: read the beats at one wake in this many (a big job's,
        ``beatperiod``); it wakes every ``interval``."""
        super().__init__("slurm-ft-peer-monitor", wake_fd)
        self._look_every = look_every
        self.client = client
        self._peers = list(peers)
        self.interval = interval
        # Called after each look: node 0's hang learning samples its own workers at this
        # wake, which the launcher makes anyway (see :meth:`BackgroundSet.sample_with`).
        self.after_look: Callable[[], None] | None = None
        self._timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._lost: dict[int, float] = {}
        self._last_change: dict[int, float] = {}

    def body(self) -> None:
        last_value: dict[int, int] = {}
        for wakes in itertools.count():
            if self._stop_event.is_set():
                return
            if wakes % self._look_every == 0:
                self._look(last_value)
            after = self.after_look
            if after is not None:
                after()
            self._stop_event.wait(self.interval)

    def _look(self, last_value: dict[int, int]) -> None:
        values = self.client.beats(self._peers)
        now = self._clock()
        with self._lock:
            for node, beat in zip(self._peers, values, strict=True):
                seen = last_value.get(node)
                if beat is not None and seen is not None and beat < seen:
                    beat = None  # an older beat of its own, replayed: no sign of life either
                if beat is not None and beat != seen:
                    last_value[node] = beat
                    self._last_change[node] = now
                    continue
                if node not in self._last_change:  # the first look found nothing readable
                    self._last_change[node] = now
                    continue
                limit = self._timeout if beat is not None else self._timeout * UNREADABLE_FACTOR
                silent = now - self._last_change[node]
                if (seen or 0) > 0 and silent > limit and node not in self._lost:
                    self._lost[node] = silent
                    self._wake()

    def ages(self) -> dict[int, float]:
        """Seconds since each peer's heart-beat last moved (for the metrics)."""
        now = self._clock()
        with self._lock:
            return {node: now - seen for node, seen in self._last_change.items()}

    def lost(self) -> dict[int, float]:
        """Lost peers and how long they had been silent when noticed."""
        with self._lock:
            return dict(self._lost)


class HaltWaiter(BackgroundThread):
    """Wakes the launcher's main loop the moment any launcher halts the current cycle.

    The main loop sleeps until something happens; this thread is what wakes it when
    another launcher ends the cycle (the store is also polled every ``monitor_interval``
    as a fallback). It blocks in the store (no CPU) and signals through the wake pipe.
    """

    WAIT_S = 3600.0

    def __init__(self, client: Client, wake_fd: int) -> None:
        super().__init__("slurm-ft-halt-waiter", wake_fd)
        self.client = client
        self._cycles: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._current = -1
        self._lock = threading.Lock()

    def watch(self, i: int) -> None:
        """Start waiting for cycle i's halt (after the one before was halted)."""
        with self._lock:
            self._current = i
        self._cycles.put(i)

    def _is_current(self, i: int) -> bool:
        with self._lock:
            return self._current == i

    def body(self) -> None:
        while True:
            i = self._cycles.get()
            if i is None:
                return
            while not self.client.wait_halt(i, self.WAIT_S):
                if not self._is_current(i):
                    break
            if self._is_current(i):
                self._wake()

    def stop(self) -> None:
        super().stop()
        self._cycles.put(None)


class StoreWatchdog(BackgroundThread):
    """A peer's last resort when node 0 freezes instead of dying.

    A dead store host resets its connections and the main thread notices at its next
    store call. A frozen or unreachable one answers nothing, and a blocked store call
    cannot be interrupted, so the main thread may never get to notice. The watchdog does
    no store I/O. It sleeps until the heart-beat could first count as lost (or dies), then
    wakes the main loop, which ends the attempt the ordinary way if it can; once the
    heart-beat has been failing for ``grace`` seconds more it calls ``emergency`` (which
    kills the worker groups and ends the launcher with exit 1: the one documented exit
    that does not go through the launcher's single ending path). Sleeping that long
    instead of ticking is what keeps an idle peer's CPU near zero.
    """

    def __init__(
        self,
        heartbeat: Heartbeat,
        emergency: Callable[[str], None],
        grace: float = WATCHDOG_GRACE_S,
        *,
        wake_fd: int | None = None,
        clock: Clock = time.monotonic,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        """``on_lost``: called (on this thread) the moment the host counts as lost, before
        the main loop is woken (a succession frees the main thread from a stuck call)."""
        super().__init__("slurm-ft-store-watchdog", wake_fd)
        self._on_lost = on_lost
        self._heartbeat = heartbeat
        self._emergency = emergency
        self._grace = grace
        self._clock = clock
        self._alarm = threading.Event()  # stop, or the heart-beat died
        heartbeat.on_death(self._alarm.set)

    def body(self) -> None:
        first_seen: float | None = None
        while True:
            pause = WATCHDOG_TICK_S if first_seen is not None else self._heartbeat.lost_in()
            self._alarm.wait(max(WATCHDOG_TICK_S, pause))
            self._alarm.clear()
            if self._stop_event.is_set():
                return
            why = self._heartbeat.lost()
            if why is None:
                first_seen = None
                continue
            now = self._clock()
            if first_seen is None:
                first_seen = now
                if self._on_lost is not None:
                    self._on_lost(why)
                self._wake()
            elif now - first_seen >= self._grace:
                self._emergency(why)
                self._stop_event.set()  # handled: the launcher hands over (a succession)
                return

    def stop(self) -> None:
        super().stop()
        self._alarm.set()


class WakePipe:
    """How the background threads wake the main loop: they write to ``write_fd``; the loop
    polls ``fd`` and drains it."""

    def __init__(self) -> None:
        self.fd, self.write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.read(self.fd, 64)

    def close(self) -> None:
        for fd in (self.fd, self.write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class BackgroundDied(Exception):
    """A background thread died while the main thread waited on the store."""


class BackgroundSet:
    """The threads one launcher runs, by role: node 0 monitors its peers; a peer beats
    and guards against a frozen node 0; with more than one node, everyone runs a halt
    waiter. A single node runs none."""

    def __init__(self) -> None:
        self.heartbeat: Heartbeat | None = None
        self.monitor: PeerMonitor | None = None
        self.waiter: HaltWaiter | None = None
        self.watchdog: StoreWatchdog | None = None

    @classmethod
    def start(
        cls,
        client: Client,
        *,
        node_rank: int,
        num_nodes: int,
        interval: float,
        timeout: float,
        wake_fd: int,
        emergency: Callable[[str], None],
        clock: Clock = time.monotonic,
        host: int = 0,
        on_lost: Callable[[str], None] | None = None,
    ) -> BackgroundSet:
        """``interval``, ``timeout``: the configured heart-beat, stretched for big jobs
        (:func:`beat_period`); ``host``: the launcher that hosts the store (node 0, or its
        successor)."""
        threads = cls()
        if num_nodes <= 1:
            return threads
        period = beat_period(num_nodes, interval, timeout)
        if node_rank == host:
            peers = [k for k in range(num_nodes) if k != host]
            threads.monitor = PeerMonitor(
                client.clone(period.timeout),
                peers,
                interval,
                period.timeout,
                wake_fd,
                clock=clock,
                look_every=period.look_every,
            )
        else:
            threads.heartbeat = Heartbeat(
                client.clone(period.timeout),
                node_rank,
                period.interval,
                period.timeout,
                wake_fd=wake_fd,
                clock=clock,
                phase=node_rank / num_nodes,
            )
            threads.watchdog = StoreWatchdog(
                threads.heartbeat, emergency, wake_fd=wake_fd, clock=clock, on_lost=on_lost
            )
        threads.waiter = HaltWaiter(client.clone(period.timeout), wake_fd)
        for t in threads._all():
            t.start()
        return threads

    def _all(self) -> list[BackgroundThread]:
        return [t for t in (self.monitor, self.heartbeat, self.watchdog, self.waiter) if t is not None]

    def sample_with(self, hook: Callable[[], None]) -> float | None:
        """Node 0: call ``hook`` after each of the peer monitor's looks, from its thread; the
        period of those looks, or None where there is no monitor (one node, a peer)."""
        if self.monitor is None:
            return None
        self.monitor.after_look = hook
        return self.monitor.interval

    def watch_halt(self, i: int) -> None:
        if self.waiter is not None:
            self.waiter.watch(i)

    def lost_peers(self) -> dict[int, float]:
        return self.monitor.lost() if self.monitor is not None else {}

    def store_lost(self) -> str | None:
        """Why the store host counts as lost (a peer's heart-beat failing, or its halt
        waiter's connection broken: whichever is first), or None."""
        if self.heartbeat is None:
            return None
        waiter = self.waiter
        if waiter is not None and waiter.lost_store:
            return waiter.died()
        return self.heartbeat.lost()

    def store_silent(self) -> bool:
        """The store host is lost by silence: nothing ends its launcher's job step for us."""
        return self.heartbeat is not None and self.heartbeat.silent()

    def died(self) -> str | None:
        """The first thread (other than the heart-beat, see :meth:`store_lost`) that died."""
        for t in (self.monitor, self.waiter, self.watchdog):
            if t is None or (t is self.waiter and t.lost_store and self.heartbeat is not None):
                continue
            if t.died() is not None:
                return t.died()
        return None

    def abort_check(self, received: Callable[[], bool]) -> Callable[[], bool]:
        """For the store waits of the main thread: True once a signal arrived; raises
        :class:`StoreLost` when the store host is lost, :class:`BackgroundDied` when a
        thread died meanwhile."""

        def check() -> bool:
            lost = self.store_lost()
            if lost is not None:
                raise StoreLost(lost)
            died = self.died()
            if died is not None:
                raise BackgroundDied(died)
            return received()

        return check

    def stop(self) -> None:
        for t in self._all():
            t.stop()
