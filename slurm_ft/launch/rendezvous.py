"""The store protocol between the launchers of one job: every key family lives here.

Node 0 hosts a ``torch.distributed.TCPStore``; every launcher (node 0 included) talks to it
through its own client connections. A client object is used by one thread only: the main
thread owns one (join, decision, failure, done, result), the heart-beat thread of a peer
owns another, and node 0's peer monitor a third.

Keys are ``slurm_ft/<run id>/...`` where the run id names the job and the Slurm attempt, and
per-cycle keys carry the cycle's index within the attempt. Counters a loop polls are
created by node 0 (value ``0``) before any peer can touch them, so one ``multi_get`` reads a
whole set of them without ever blocking on a missing key:

* ``base``                  node 0 -> all: first global cycle number, run uuid
* ``hb/<node>``             peer heart-beat counter (node 0 watches it change)
* ``c<i>/join/<node>``      a launcher's join record (name, host, pid, unhealthy detail)
* ``c<i>/joined``           how many launchers joined cycle i
* ``c<i>/unhealthy``        how many of them are unhealthy
* ``c<i>/decision``         node 0's one decision: run (with MASTER_PORT) or stop
* ``c<i>/failure``          the first failure (``compare_set`` from "": first writer wins)
* ``c<i>/halt``             set when cycle i is over (failure or success); blocking
                            ``wait`` on it wakes every launcher at once (:class:`HaltWaiter`)
* ``c<i>/done``             launchers whose workers all exited 0
* ``c<i>/result``           node 0's summary of the cycle (outcome, end time)
* ``acks``                  launchers that read the final answer (node 0 then shuts down)

Staleness of a heart-beat is judged on node 0's own monotonic clock (when did the counter
last change), never by comparing wall clocks of different machines.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import queue
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_ft.launch.records import Failure

KEY_ROOT = "slurm_ft"
CONNECT_ATTEMPT_S = 2.0
FAST_POLL_S = 0.005
FAST_POLL_PERIOD_S = 2.0
WAIT_CHUNK_S = 0.2


class StoreLost(Exception):
    """The store (node 0) cannot be reached any more."""


class StoreBindError(Exception):
    """Node 0 could not listen on the rendezvous port."""


class Interrupted(Exception):
    """A wait ended because the caller's abort predicate became true (a signal arrived)."""


def _c10d() -> Any:
    """torch.distributed, imported on first use: --dry-run and bad input must not pay for it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch.distributed as dist
    return dist


def _is_store_error(exc: BaseException) -> bool:
    return isinstance(exc, RuntimeError)


@dataclass(frozen=True)
class Keys:
    run_id: str

    def _k(self, *parts: object) -> str:
        return "/".join([KEY_ROOT, self.run_id, *map(str, parts)])

    @property
    def base(self) -> str:
        return self._k("base")

    @property
    def acks(self) -> str:
        return self._k("acks")

    def heartbeat(self, node: int) -> str:
        return self._k("hb", node)

    def join(self, i: int, node: int) -> str:
        return self._k(f"c{i}", "join", node)

    def joined(self, i: int) -> str:
        return self._k(f"c{i}", "joined")

    def unhealthy(self, i: int) -> str:
        return self._k(f"c{i}", "unhealthy")

    def decision(self, i: int) -> str:
        return self._k(f"c{i}", "decision")

    def failure(self, i: int) -> str:
        return self._k(f"c{i}", "failure")

    def halt(self, i: int) -> str:
        return self._k(f"c{i}", "halt")

    def done(self, i: int) -> str:
        return self._k(f"c{i}", "done")

    def result(self, i: int) -> str:
        return self._k(f"c{i}", "result")

    def cycle_counters(self, i: int) -> list[str]:
        return [self.joined(i), self.unhealthy(i), self.done(i)]


@dataclass(frozen=True)
class Base:
    first_cycle: int
    run_uuid: str


@dataclass(frozen=True)
class JoinInfo:
    node_rank: int
    node_name: str
    host: str
    pid: int
    unhealthy: str | None = None


@dataclass(frozen=True)
class Decision:
    """Node 0's answer for cycle i; ``exit_code`` matters only for ``stop``."""

    action: str  # "run" | "stop"
    cycle: int
    reason: str = ""
    exit_code: int = 0
    master_port: int = 0
    start_time: float = 0.0
    nodes: tuple[str, ...] = ()
    unhealthy_nodes: tuple[str, ...] = ()
    first_failure: dict[str, Any] | None = None

    @property
    def run(self) -> bool:
        return self.action == "run"


@dataclass(frozen=True)
class CycleResult:
    outcome: str
    end_time: float
    first_failure: dict[str, Any] | None = None


def _dump(obj: Any) -> str:
    return json.dumps(dataclasses.asdict(obj), sort_keys=True)


def _load(cls: type, raw: bytes) -> Any:
    doc = json.loads(raw.decode())
    names = {f.name for f in dataclasses.fields(cls)}
    kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in doc.items() if k in names}
    return cls(**kw)


@dataclass
class Poll:
    """What a launcher sees of the cycle at one watch tick."""

    failure: Failure | None
    done: int


class LocalStore:
    """The store of a single-node run, in the launcher's own memory.

    With one node there is no peer to reach the store, so opening a port and importing
    torch (seconds of start-up on every launch) would buy nothing. This object offers the
    subset of TCPStore operations :class:`Client` uses, with the same semantics: values
    are bytes, ``add`` creates a missing key, ``compare_set`` with ``expected=""`` sets a
    missing key, ``get`` of a missing key is an error (callers ``check`` first).
    """

    port = 0

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _b(value: str | bytes) -> bytes:
        return value.encode() if isinstance(value, str) else bytes(value)

    def set(self, key: str, value: str | bytes) -> None:
        with self._lock:
            self._data[key] = self._b(value)

    def get(self, key: str) -> bytes:
        with self._lock:
            if key not in self._data:
                raise RuntimeError(f"key not found: {key}")
            return self._data[key]

    def check(self, keys: Sequence[str]) -> bool:
        with self._lock:
            return all(k in self._data for k in keys)

    def add(self, key: str, amount: int) -> int:
        with self._lock:
            value = int(self._data.get(key, b"0")) + amount
            self._data[key] = str(value).encode()
            return value

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        with self._lock:
            missing = [k for k in keys if k not in self._data]
            if missing:
                raise RuntimeError(f"key not found: {missing[0]}")
            return [self._data[k] for k in keys]

    def multi_set(self, keys: Sequence[str], values: Sequence[str | bytes]) -> None:
        with self._lock:
            for k, v in zip(keys, values, strict=True):
                self._data[k] = self._b(v)

    def compare_set(self, key: str, expected: str | bytes, desired: str | bytes) -> bytes:
        exp, want = self._b(expected), self._b(desired)
        with self._lock:
            current = self._data.get(key)
            if (current is None and exp == b"") or current == exp:
                self._data[key] = want
                return want
            return current if current is not None else exp


class Client:
    """One connection to the store, for one thread."""

    def __init__(self, store: Any, keys: Keys) -> None:
        self._store = store
        self.keys = keys

    # ----------------------------------------------------------------- construction

    @classmethod
    def host(cls, port: int, keys: Keys, op_timeout: float) -> Client:
        """Node 0: listen on all interfaces; ``port`` 0 picks a free one (single node)."""
        dist = _c10d()
        try:
            store = dist.TCPStore(
                "0.0.0.0",
                port,
                None,
                True,
                datetime.timedelta(seconds=op_timeout),
                wait_for_workers=False,
                use_libuv=True,
            )
        except RuntimeError as exc:
            raise StoreBindError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
        return cls(store, keys)

    @classmethod
    def local(cls, keys: Keys) -> Client:
        """A single-node run: the store in this process (see :class:`LocalStore`)."""
        return cls(LocalStore(), keys)

    @classmethod
    def connect(
        cls,
        host: str,
        port: int,
        keys: Keys,
        *,
        deadline: float,
        op_timeout: float,
        abort: Callable[[], bool],
        sleep: Callable[[float], None],
    ) -> Client:
        """Retry until ``deadline`` (monotonic): node 0 may start a little later than us."""
        dist = _c10d()
        while True:
            if abort():
                raise Interrupted()
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreLost(f"could not reach the rendezvous store at {host}:{port}")
            try:
                store = dist.TCPStore(
                    host,
                    port,
                    None,
                    False,
                    datetime.timedelta(seconds=max(0.1, min(CONNECT_ATTEMPT_S, left))),
                    use_libuv=True,
                )
            except RuntimeError:
                sleep(min(0.2, max(0.0, deadline - time.monotonic())))
                continue
            store.set_timeout(datetime.timedelta(seconds=op_timeout))
            return cls(store, keys)

    @property
    def port(self) -> int:
        return int(self._store.port)

    def clone(self, host: str, op_timeout: float) -> Client:
        """A second connection to the same store, for another thread."""
        dist = _c10d()
        store = dist.TCPStore(
            host,
            self.port,
            None,
            False,
            datetime.timedelta(seconds=op_timeout),
            use_libuv=True,
        )
        return Client(store, self.keys)

    # ----------------------------------------------------------------- raw ops

    def _op(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except RuntimeError as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise StoreLost(f"rendezvous store unreachable: {first}") from None

    def _poll_until(
        self,
        ready: Callable[[], Any],
        *,
        deadline: float,
        abort: Callable[[], bool],
        sleep: Callable[[float], None],
        max_interval: float,
    ) -> Any:
        """Poll every 5 ms for the first seconds (a restart waits here: every millisecond
        counts), then with a growing interval up to ``max_interval`` (cheap for the store
        when the answer is minutes away). None on deadline."""
        interval = FAST_POLL_S
        fast_until = time.monotonic() + FAST_POLL_PERIOD_S
        while True:
            value = ready()
            if value is not None:
                return value
            if abort():
                raise Interrupted()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            sleep(min(interval, left))
            if time.monotonic() > fast_until:
                interval = min(interval * 1.5, max_interval)

    def _get_when_set(
        self,
        key: str,
        *,
        deadline: float,
        abort: Callable[[], bool],
        sleep: Callable[[float], None],
        max_interval: float,
    ) -> bytes | None:
        """The value of ``key`` once someone sets it; None on deadline.

        With many launchers, all of them polling node 0's store for the same key is what
        makes a cycle slow (the store host answers thousands of requests while node 0
        itself is trying to read the join records). A blocking ``wait`` costs the store
        nothing until the key appears and wakes every waiter at once. It is taken in
        short chunks so that a signal (``abort``) is noticed within one chunk.
        """
        if not hasattr(self._store, "wait"):  # the in-memory store of a single node
            return self._poll_until(
                lambda: self._op(lambda: self._store.get(key)) if self._check(key) else None,
                deadline=deadline,
                abort=abort,
                sleep=sleep,
                max_interval=max_interval,
            )
        while True:
            if abort():
                raise Interrupted()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if self._wait([key], min(WAIT_CHUNK_S, left)):
                return self._op(lambda: self._store.get(key))

    def _wait(self, keys: list[str], timeout: float) -> bool:
        """Block until every key is set (True) or ``timeout`` passes (False)."""
        try:
            self._store.wait(keys, datetime.timedelta(seconds=timeout))
        except RuntimeError as exc:
            if "timeout" in str(exc).lower():
                return False
            raise StoreLost(f"rendezvous store unreachable: {str(exc).splitlines()[0]}") from None
        return True

    # ----------------------------------------------------------------- node 0 writes

    def prepare(self, num_nodes: int, base: Base) -> None:
        """Create the counters of cycle 0 and the heart-beat keys, then publish ``base``."""
        keys = self.keys
        init = [keys.heartbeat(n) for n in range(num_nodes)] + keys.cycle_counters(0) + [keys.acks]
        self._op(lambda: self._store.multi_set(init, ["0"] * len(init)))
        self._op(lambda: self._store.set(keys.failure(0), ""))
        self._op(lambda: self._store.set(keys.base, _dump(base)))

    def publish_decision(self, i: int, decision: Decision) -> None:
        """Also creates the next cycle's counters: no peer can join i+1 before reading this."""
        nxt = self.keys.cycle_counters(i + 1)
        self._op(lambda: self._store.multi_set(nxt, ["0"] * len(nxt)))
        self._op(lambda: self._store.set(self.keys.failure(i + 1), ""))
        self._op(lambda: self._store.set(self.keys.decision(i), _dump(decision)))

    def publish_result(self, i: int, result: CycleResult) -> None:
        self._op(lambda: self._store.set(self.keys.result(i), _dump(result)))

    # ----------------------------------------------------------------- everyone

    def wait_base(
        self, *, deadline: float, abort: Callable[[], bool], sleep: Callable[[float], None]
    ) -> Base | None:
        raw = self._get_when_set(
            self.keys.base,
            deadline=deadline,
            abort=abort,
            sleep=sleep,
            max_interval=0.5,
        )
        return None if raw is None else _load(Base, raw)

    def _check(self, key: str) -> bool:
        return bool(self._op(lambda: self._store.check([key])))

    def join(self, i: int, info: JoinInfo) -> None:
        self._op(lambda: self._store.set(self.keys.join(i, info.node_rank), _dump(info)))
        if info.unhealthy is not None:
            self._op(lambda: self._store.add(self.keys.unhealthy(i), 1))
        self._op(lambda: self._store.add(self.keys.joined(i), 1))

    def join_counts(self, i: int) -> tuple[int, int]:
        """(joined, unhealthy) of cycle i in one round trip."""
        joined, unhealthy = self._op(
            lambda: self._store.multi_get([self.keys.joined(i), self.keys.unhealthy(i)])
        )
        return int(joined), int(unhealthy)

    def join_records(self, i: int, num_nodes: int) -> list[JoinInfo | None]:
        keys = [self.keys.join(i, n) for n in range(num_nodes)]
        if self._op(lambda: self._store.check(keys)):  # the usual case: one round trip each
            return [_load(JoinInfo, raw) for raw in self._op(lambda: self._store.multi_get(keys))]
        present = [self._check(k) for k in keys]
        have = [k for k, p in zip(keys, present, strict=True) if p]
        raws = iter(self._op(lambda: self._store.multi_get(have)) if have else [])
        return [_load(JoinInfo, next(raws)) if p else None for p in present]

    def wait_decision(
        self,
        i: int,
        *,
        deadline: float,
        abort: Callable[[], bool],
        sleep: Callable[[float], None],
        max_interval: float,
    ) -> Decision | None:
        raw = self._get_when_set(
            self.keys.decision(i),
            deadline=deadline,
            abort=abort,
            sleep=sleep,
            max_interval=max_interval,
        )
        return None if raw is None else _load(Decision, raw)

    def publish_failure(self, i: int, failure: Failure) -> Failure:
        """First writer wins; returns the failure that did."""
        payload = json.dumps(failure.to_json(), sort_keys=True)
        won = self._op(lambda: self._store.compare_set(self.keys.failure(i), "", payload))
        self.halt(i)
        return Failure.from_json(json.loads(won.decode()))

    def halt(self, i: int) -> None:
        """Cycle i is over: wakes every launcher's :class:`HaltWaiter`."""
        self._op(lambda: self._store.set(self.keys.halt(i), "1"))

    def wait_halt(self, i: int, timeout: float) -> bool:
        """Block until cycle i is halted (True) or ``timeout`` passes (False)."""
        return self._wait([self.keys.halt(i)], timeout)

    def mark_done(self, i: int) -> None:
        self._op(lambda: self._store.add(self.keys.done(i), 1))

    def poll(self, i: int) -> Poll:
        raw_failure, raw_done = self._op(
            lambda: self._store.multi_get([self.keys.failure(i), self.keys.done(i)])
        )
        failure = Failure.from_json(json.loads(raw_failure.decode())) if raw_failure else None
        return Poll(failure, int(raw_done))

    def wait_result(
        self,
        i: int,
        *,
        deadline: float,
        abort: Callable[[], bool],
        sleep: Callable[[float], None],
    ) -> CycleResult | None:
        raw = self._get_when_set(
            self.keys.result(i),
            deadline=deadline,
            abort=abort,
            sleep=sleep,
            max_interval=0.1,
        )
        return None if raw is None else _load(CycleResult, raw)

    def result(self, i: int) -> CycleResult | None:
        key = self.keys.result(i)
        return _load(CycleResult, self._op(lambda: self._store.get(key))) if self._check(key) else None

    def ack(self) -> None:
        self._op(lambda: self._store.add(self.keys.acks, 1))

    def acks(self) -> int:
        return int(self._op(lambda: self._store.add(self.keys.acks, 0)))

    # ----------------------------------------------------------------- heart-beats

    def beat(self, node: int) -> None:
        self._op(lambda: self._store.add(self.keys.heartbeat(node), 1))

    def beats(self, nodes: Sequence[int]) -> list[int]:
        keys = [self.keys.heartbeat(n) for n in nodes]
        return [int(v) for v in self._op(lambda: self._store.multi_get(keys))]


class HaltWaiter(threading.Thread):
    """Wakes the launcher's main loop the moment any launcher halts the current cycle.

    The main loop also polls the store every ``monitor_interval``, so nothing depends on
    this thread; it only takes the polling delay off the restart's critical path. It
    blocks in the store (no CPU) on its own connection and signals through a pipe that
    the main loop includes in its ``poll``.
    """

    WAIT_S = 3600.0

    def __init__(self, client: Client, wake_fd: int) -> None:
        super().__init__(name="slurm-ft-halt-waiter", daemon=True)
        self._client = client
        self._wake_fd = wake_fd
        self._cycles: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._current = -1
        self._lock = threading.Lock()

    def watch(self, i: int) -> None:
        """Start waiting for cycle i's halt (after the one before was halted)."""
        with self._lock:
            self._current = i
        self._cycles.put(i)

    def run(self) -> None:
        while True:
            i = self._cycles.get()
            if i is None:
                return
            try:
                while not self._client.wait_halt(i, self.WAIT_S):
                    with self._lock:
                        if self._current != i:
                            break
            except StoreLost:
                return
            with self._lock:
                if self._current != i:
                    continue
            try:
                os.write(self._wake_fd, b"h")
            except OSError:
                return

    def stop(self) -> None:
        self._cycles.put(None)


@dataclass
class HeartbeatState:
    last_ok: float = field(default_factory=time.monotonic)
    error: str | None = None


class Heartbeat(threading.Thread):
    """A peer's heart-beat, on its own connection. The store host being lost shows up here
    as an error or as no successful beat for ``timeout`` seconds (a frozen host answers
    nothing, and a blocked store call cannot be interrupted): see :meth:`lost`."""

    def __init__(self, client: Client, node: int, interval: float, timeout: float) -> None:
        super().__init__(name="slurm-ft-heartbeat", daemon=True)
        self._client = client
        self._node = node
        self._interval = interval
        self._timeout = timeout
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._state = HeartbeatState()

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self._client.beat(self._node)
            except StoreLost as exc:
                with self._lock:
                    self._state.error = str(exc)
                return
            with self._lock:
                self._state.last_ok = time.monotonic()
            self._stop_event.wait(self._interval)

    def lost(self) -> str | None:
        """Why the store host counts as lost, or None."""
        with self._lock:
            if self._state.error is not None:
                return self._state.error
            silent = time.monotonic() - self._state.last_ok
        if silent > self._timeout:
            return f"rendezvous store silent for {silent:.1f}s"
        return None

    def stop(self) -> None:
        self._stop_event.set()


class PeerMonitor(threading.Thread):
    """Node 0: notices peers whose heart-beat counter stopped changing.

    A peer counts only once its counter moved above 0 (it connected); one that never
    connects is the join timeout's business.
    """

    def __init__(self, client: Client, num_nodes: int, interval: float, timeout: float) -> None:
        super().__init__(name="slurm-ft-peer-monitor", daemon=True)
        self._client = client
        self._peers = list(range(1, num_nodes))
        self._interval = interval
        self._timeout = timeout
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._lost: dict[int, float] = {}
        self._retired: set[int] = set()
        self.error: str | None = None

    def run(self) -> None:
        last_value: dict[int, int] = {}
        last_change: dict[int, float] = {}
        while not self._stop_event.is_set() and self._peers:
            try:
                values = self._client.beats(self._peers)
            except StoreLost as exc:
                self.error = str(exc)
                return
            now = time.monotonic()
            for node, value in zip(self._peers, values, strict=True):
                if value != last_value.get(node):
                    last_value[node] = value
                    last_change[node] = now
                    continue
                if value > 0 and now - last_change[node] > self._timeout:
                    with self._lock:
                        if node not in self._retired and node not in self._lost:
                            self._lost[node] = now - last_change[node]
            self._stop_event.wait(self._interval)

    def lost(self) -> dict[int, float]:
        """Lost peers and how long they have been silent (only peers not retired)."""
        with self._lock:
            return {n: s for n, s in self._lost.items() if n not in self._retired}

    def retire(self, node: int) -> None:
        """A peer that left on purpose (acknowledged the final answer) is not 'lost'."""
        with self._lock:
            self._retired.add(node)

    def stop(self) -> None:
        self._stop_event.set()
