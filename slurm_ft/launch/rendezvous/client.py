"""One connection to the store, speaking the protocol of :mod:`slurm_ft.launch.rendezvous.protocol`.

A client object is used by one thread only: the main thread owns one (join, decision,
failure, done, result), and each background thread (heart-beat, peer monitor, halt
waiter) opens its own with :meth:`Client.clone`. Every value the protocol marks sealed
goes through the client's :class:`~slurm_ft.launch.rendezvous.sealing.Sealer` here and nowhere else.
"""

from __future__ import annotations

import contextlib
import datetime
import socket
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TypeVar

from slurm_ft.launch.rendezvous import stores
from slurm_ft.launch.rendezvous.protocol import (
    Base,
    CycleResult,
    Decision,
    JoinInfo,
    Keys,
    Poll,
    decode,
    decode_failure,
    encode,
    encode_failure,
)
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.stores import Interrupted, LocalConnection, Store, StoreLost
from slurm_ft.records import Failure

WAIT_CHUNK_S = 0.2
PORT_SLICE_S = 1.0  # how long a peer looks for node 0 on one port of the sequence at a time
PROBE_S = 0.5  # a TCP connect to see whether anything listens on a port at all
PROBE_PAUSE_S = 0.05

T = TypeVar("T")
Abort = Callable[[], bool]
Sleep = Callable[[float], None]


NO_SILENCE = "-"  # an activity key before any report
FAILURE_SWAPS = 3  # forgeries in a failure key replaced before giving up on it


def _listening(address: str, port: int) -> bool:
    """Whether anything accepts connections on the port (a refused one costs nothing)."""
    try:
        with socket.create_connection((address, port), timeout=PROBE_S):
            return True
    except OSError:
        return False


class Client:
    def __init__(
        self, store: Store, keys: Keys, address: str = "127.0.0.1", sealer: Sealer | None = None
    ) -> None:
        self._store = store
        self.keys = keys
        self._address = address
        self.sealer = sealer or Sealer(None)
        self._beats = 0
        self._last_beat = ""  # the sealed value of this connection's last beat

    # ----------------------------------------------------------------- construction

    @classmethod
    def host(cls, port: int, keys: Keys, op_timeout: float, sealer: Sealer | None = None) -> Client:
        return cls(stores.host(port, op_timeout), keys, sealer=sealer)

    @classmethod
    def connect(
        cls,
        address: str,
        port: int,
        keys: Keys,
        *,
        deadline: float,
        op_timeout: float,
        abort: Abort,
        sleep: Sleep,
        sealer: Sealer | None = None,
    ) -> Client:
        store = stores.connect(
            address, port, deadline=deadline, op_timeout=op_timeout, abort=abort, sleep=sleep
        )
        return cls(store, keys, address, sealer)

    @classmethod
    def local(cls, keys: Keys) -> Client:
        """A single-node run: the store in this process (see :class:`stores.LocalStore`)."""
        return cls(stores.LocalStore().connect(), keys)

    def rekeyed(self, keys: Keys, sealer: Sealer) -> Client:
        """The same connection, speaking with other keys and seals."""
        return Client(self._store, keys, self._address, sealer)

    @property
    def port(self) -> int:
        return int(getattr(self._store, "port", 0))

    def clone(self, op_timeout: float) -> Client:
        """A second connection to the same store, for another thread."""
        if isinstance(self._store, LocalConnection):
            return Client(self._store.reconnect(), self.keys, self._address, self.sealer)
        store = stores.reconnect(self._address, self.port, op_timeout)
        return Client(store, self.keys, self._address, self.sealer)

    # ----------------------------------------------------------------- raw ops

    def _op(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except RuntimeError as exc:
            raise stores.lost(exc) from None

    def _check(self, key: str) -> bool:
        return bool(self._op(lambda: self._store.check([key])))

    def _get_when_set(self, key: str, *, deadline: float, abort: Abort) -> bytes | None:
        """The value of ``key`` once someone sets it; None on deadline.

        With many launchers, all of them polling node 0's store for the same key is what
        makes a cycle slow (the store host answers thousands of requests while node 0
        itself is trying to read the join records). A blocking ``wait`` costs the store
        nothing until the key appears and wakes every waiter at once. It is taken in
        short chunks so that a signal (``abort``) is noticed within one chunk.
        """
        while True:
            if abort():
                raise Interrupted()
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if self._wait([key], min(WAIT_CHUNK_S, left)):
                return self._op(lambda: self._store.get(key))

    def _get_sealed_when_set(self, key: str, *, deadline: float, abort: Abort) -> bytes | None:
        """As :meth:`_get_when_set`, for a sealed value: a forgery there counts as not set
        (until its real writer overwrites it)."""
        while True:
            raw = self._get_when_set(key, deadline=deadline, abort=abort)
            if raw is None:
                return None
            value = self.sealer.open(key, raw)
            if value is not None:
                return value
            time.sleep(max(0.0, min(WAIT_CHUNK_S, deadline - time.monotonic())))

    def _set_sealed(self, key: str, value: str) -> None:
        sealed = self.sealer.seal(key, value)
        self._op(lambda: self._store.set(key, sealed))

    def _wait(self, keys: list[str], timeout: float) -> bool:
        """Block until every key is set (True) or ``timeout`` passes (False)."""
        try:
            self._store.wait(keys, datetime.timedelta(seconds=timeout))
        except RuntimeError as exc:
            if stores.is_timeout(exc):
                return False
            raise stores.lost(exc) from None
        return True

    # ----------------------------------------------------------------- node 0 writes

    def prepare(self, num_nodes: int, base: Base) -> None:
        """Create the counters of cycle 0 and the heart-beat keys, then publish ``base``."""
        keys = self.keys
        beats = [keys.heartbeat(n) for n in range(num_nodes)]
        quiet = [keys.activity(n) for n in range(num_nodes)]
        counters = [*keys.cycle_counters(0), keys.acks]
        init = [self.sealer.seal(k, "0") for k in beats] + ["0"] * len(counters)
        init += [self.sealer.seal(k, NO_SILENCE) for k in quiet]
        self._op(lambda: self._store.multi_set(beats + counters + quiet, init))
        self._op(lambda: self._store.set(keys.failure(0), ""))
        self._set_sealed(keys.base, encode(base))

    def publish_decision(self, i: int, decision: Decision) -> None:
        """Also creates the next cycle's counters: no peer can join i+1 before reading this."""
        nxt = self.keys.cycle_counters(i + 1)
        self._op(lambda: self._store.multi_set(nxt, ["0"] * len(nxt)))
        self._op(lambda: self._store.set(self.keys.failure(i + 1), ""))
        self._set_sealed(self.keys.decision(i), encode(decision))

    def publish_result(self, i: int, result: CycleResult) -> None:
        self._set_sealed(self.keys.result(i), encode(result))

    def join_counts(self, i: int) -> tuple[int, int]:
        """(joined, unhealthy) of cycle i in one round trip."""
        joined, unhealthy = self._op(
            lambda: self._store.multi_get([self.keys.joined(i), self.keys.unhealthy(i)])
        )
        return int(joined), int(unhealthy)

    def join_records(self, i: int, num_nodes: int) -> list[JoinInfo | None]:
        """Each launcher's join record; None where there is none (or only a forgery)."""
        keys = [self.keys.join(i, n) for n in range(num_nodes)]
        if self._op(lambda: self._store.check(keys)):  # the usual case: one round trip each
            raws: list[bytes | None] = list(self._op(lambda: self._store.multi_get(keys)))
        else:
            present = [self._check(k) for k in keys]
            have = [k for k, p in zip(keys, present, strict=True) if p]
            found = iter(self._op(lambda: self._store.multi_get(have)) if have else [])
            raws = [next(found) if p else None for p in present]
        opened = [None if r is None else self.sealer.open(k, r) for k, r in zip(keys, raws, strict=True)]
        return [None if v is None else decode(JoinInfo, v) for v in opened]

    def acks(self) -> int:
        return int(self._op(lambda: self._store.add(self.keys.acks, 0)))

    def beats(self, nodes: Sequence[int]) -> list[int | None]:
        """Each node's heart-beat number; None where the value is a forgery."""
        keys = [self.keys.heartbeat(n) for n in nodes]
        raws = self._op(lambda: self._store.multi_get(keys))
        values = [self.sealer.open(k, raw) for k, raw in zip(keys, raws, strict=True)]
        return [None if v is None else int(v) for v in values]

    def silences(self, nodes: Sequence[int]) -> list[str]:
        """The peers' silence reports (see :meth:`report_silence`), in one round trip; a
        forged one reads as no report."""
        keys = [self.keys.activity(n) for n in nodes]
        raws = self._op(lambda: self._store.multi_get(keys))
        opened = [self.sealer.open(k, raw) for k, raw in zip(keys, raws, strict=True)]
        return [NO_SILENCE if v is None else v.decode() for v in opened]

    # ----------------------------------------------------------------- everyone

    def wait_base(self, *, deadline: float, abort: Abort) -> Base | None:
        raw = self._get_sealed_when_set(self.keys.base, deadline=deadline, abort=abort)
        return None if raw is None else decode(Base, raw)

    def join(self, i: int, info: JoinInfo) -> None:
        self._set_sealed(self.keys.join(i, info.node_rank), encode(info))
        if info.unhealthy is not None:
            self._op(lambda: self._store.add(self.keys.unhealthy(i), 1))
        self._op(lambda: self._store.add(self.keys.joined(i), 1))

    def wait_decision(self, i: int, *, deadline: float, abort: Abort) -> Decision | None:
        raw = self._get_sealed_when_set(self.keys.decision(i), deadline=deadline, abort=abort)
        return None if raw is None else decode(Decision, raw)

    def publish_failure(self, i: int, failure: Failure) -> Failure:
        """First writer wins; returns the failure that did. A forgery found there is
        replaced (a few times at most: then this failure is the answer here)."""
        key = self.keys.failure(i)
        mine = self.sealer.seal(key, encode_failure(failure))
        expected: str | bytes = ""
        won: Failure | None = None
        for _ in range(FAILURE_SWAPS):
            raw = self._op(partial(self._store.compare_set, key, expected, mine))
            value = self.sealer.open(key, raw)
            if value is not None:
                won = decode_failure(value)
                break
            expected = raw
        self.halt(i)
        return won or failure

    def halt(self, i: int) -> None:
        """Cycle i is over: wakes every launcher's halt waiter."""
        self._op(lambda: self._store.set(self.keys.halt(i), "1"))

    def wait_halt(self, i: int, timeout: float) -> bool:
        """Block until cycle i is halted (True) or ``timeout`` passes (False)."""
        return self._wait([self.keys.halt(i)], timeout)

    def mark_done(self, i: int, node: int) -> None:
        self._set_sealed(self.keys.done_by(i, node), "1")
        self._op(lambda: self._store.add(self.keys.done(i), 1))

    def all_done(self, i: int, launchers: Sequence[int]) -> bool:
        """Every active launcher's sealed word that its workers finished (the ``done``
        counter only says when to look)."""
        keys = [self.keys.done_by(i, n) for n in launchers]
        if not self._op(lambda: self._store.check(keys)):
            return False
        raws = self._op(lambda: self._store.multi_get(keys))
        return all(self.sealer.open(k, raw) == b"1" for k, raw in zip(keys, raws, strict=True))

    def poll(self, i: int) -> Poll:
        key = self.keys.failure(i)
        raw_failure, raw_done = self._op(lambda: self._store.multi_get([key, self.keys.done(i)]))
        value = self.sealer.open(key, raw_failure) if raw_failure else b""
        return Poll(decode_failure(value) if value else None, int(raw_done))

    def wait_result(self, i: int, *, deadline: float, abort: Abort) -> CycleResult | None:
        raw = self._get_sealed_when_set(self.keys.result(i), deadline=deadline, abort=abort)
        return None if raw is None else decode(CycleResult, raw)

    def result(self, i: int) -> CycleResult | None:
        key = self.keys.result(i)
        if not self._check(key):
            return None
        value = self.sealer.open(key, self._op(lambda: self._store.get(key)))
        return None if value is None else decode(CycleResult, value)

    def ack(self) -> None:
        self._op(lambda: self._store.add(self.keys.acks, 1))

    def beat(self, node: int) -> None:
        """A number this connection sets ever higher (sealed, unlike an increment), in one
        answered round trip: ``compare_set`` from the value it wrote last. The answer is
        what proves the host alive (a TCPStore ``set`` is not answered: a frozen host
        would take it silently). When the key holds anything else (the first beat, or a
        value someone else wrote), the answer says so and the beat falls back to
        ``set`` + ``check``. Half the requests of set + check: the idle cost of node 0,
        which serves every peer's beat each second."""
        self._beats += 1
        key = self.keys.heartbeat(node)
        sealed = self.sealer.seal(key, str(self._beats))
        previous = self._last_beat
        answer = self._op(lambda: self._store.compare_set(key, previous, sealed))
        if answer != sealed.encode():
            self._op(lambda: self._store.set(key, sealed))
            self._check(key)
        self._last_beat = sealed

    def report_silence(self, node: int, report: str) -> None:
        self._set_sealed(self.keys.activity(node), report)


def find_run(
    address: str,
    ports: Sequence[int],
    keys: Keys,
    sealer: Sealer,
    *,
    deadline: float,
    op_timeout: float,
    abort: Abort,
    sleep: Sleep,
) -> tuple[Client, Base]:
    """A peer: node 0's store and the run it published. Node 0 listens on the first
    port of ``ports`` that was free, so each is tried in turn, a short slice at a time,
    until one holds this run's ``base``: a store without it (not up yet, or another
    job's on a clashing port) is left for the next. StoreLost at ``deadline``."""
    while True:
        if abort():
            raise Interrupted()
        listening = [p for p in ports if _listening(address, p)]  # not yet: no slice spent
        if not listening:
            sleep(min(PROBE_PAUSE_S, max(0.0, deadline - time.monotonic())))
        for port in listening:
            until = min(deadline, time.monotonic() + PORT_SLICE_S)
            try:
                client = Client.connect(
                    address,
                    port,
                    keys,
                    deadline=until,
                    op_timeout=op_timeout,
                    abort=abort,
                    sleep=sleep,
                    sealer=sealer,
                )
            except StoreLost:
                continue
            until = min(deadline, time.monotonic() + PORT_SLICE_S)
            with contextlib.suppress(StoreLost):
                base = client.wait_base(deadline=until, abort=abort)
                if base is not None:
                    return client, base
        if time.monotonic() >= deadline:
            raise StoreLost(
                f"node 0 did not publish the run at {address} on port(s) "
                f"{', '.join(map(str, ports))} within the join timeout"
            )
