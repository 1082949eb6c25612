"""One connection to the store, speaking the protocol of :mod:`slurm_ft.launch.protocol`.

A client object is used by one thread only: the main thread owns one (join, decision,
failure, done, result), and each background thread (heart-beat, peer monitor, halt
waiter) opens its own with :meth:`Client.clone`.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from slurm_ft.launch import stores
from slurm_ft.launch.protocol import (
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
from slurm_ft.launch.records import Failure
from slurm_ft.launch.stores import Interrupted, LocalConnection, Store, StoreLost

WAIT_CHUNK_S = 0.2
PORT_SLICE_S = 1.0  # how long a peer looks for node 0 on one port of the sequence at a time

T = TypeVar("T")
Abort = Callable[[], bool]
Sleep = Callable[[float], None]


class Client:
    def __init__(self, store: Store, keys: Keys, address: str = "127.0.0.1") -> None:
        self._store = store
        self.keys = keys
        self._address = address

    # ----------------------------------------------------------------- construction

    @classmethod
    def host(cls, port: int, keys: Keys, op_timeout: float) -> Client:
        return cls(stores.host(port, op_timeout), keys)

    @classmethod
    def local(cls, keys: Keys) -> Client:
        """A single-node run: the store in this process (see :class:`stores.LocalStore`)."""
        return cls(stores.LocalStore().connect(), keys)

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
    ) -> Client:
        store = stores.connect(
            address, port, deadline=deadline, op_timeout=op_timeout, abort=abort, sleep=sleep
        )
        return cls(store, keys, address)

    @classmethod
    def find(
        cls,
        address: str,
        ports: Sequence[int],
        keys: Keys,
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
            for port in ports:
                if time.monotonic() >= deadline:
                    raise StoreLost(
                        f"node 0 did not publish the run at {address} on port(s) "
                        f"{', '.join(map(str, ports))} within the join timeout"
                    )
                until = min(deadline, time.monotonic() + PORT_SLICE_S)
                try:
                    store = stores.connect(
                        address, port, deadline=until, op_timeout=op_timeout, abort=abort, sleep=sleep
                    )
                except StoreLost:
                    continue
                client = cls(store, keys, address)
                until = min(deadline, time.monotonic() + PORT_SLICE_S)
                with contextlib.suppress(StoreLost):
                    base = client.wait_base(deadline=until, abort=abort)
                    if base is not None:
                        return client, base

    @property
    def port(self) -> int:
        return int(getattr(self._store, "port", 0))

    def clone(self, op_timeout: float) -> Client:
        """A second connection to the same store, for another thread."""
        if isinstance(self._store, LocalConnection):
            return Client(self._store.reconnect(), self.keys, self._address)
        return Client(stores.reconnect(self._address, self.port, op_timeout), self.keys, self._address)

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
        init = [keys.heartbeat(n) for n in range(num_nodes)] + keys.cycle_counters(0) + [keys.acks]
        self._op(lambda: self._store.multi_set(init, ["0"] * len(init)))
        self._op(lambda: self._store.set(keys.failure(0), ""))
        self._op(lambda: self._store.set(keys.base, encode(base)))

    def publish_decision(self, i: int, decision: Decision) -> None:
        """Also creates the next cycle's counters: no peer can join i+1 before reading this."""
        nxt = self.keys.cycle_counters(i + 1)
        self._op(lambda: self._store.multi_set(nxt, ["0"] * len(nxt)))
        self._op(lambda: self._store.set(self.keys.failure(i + 1), ""))
        self._op(lambda: self._store.set(self.keys.decision(i), encode(decision)))

    def publish_result(self, i: int, result: CycleResult) -> None:
        self._op(lambda: self._store.set(self.keys.result(i), encode(result)))

    def join_counts(self, i: int) -> tuple[int, int]:
        """(joined, unhealthy) of cycle i in one round trip."""
        joined, unhealthy = self._op(
            lambda: self._store.multi_get([self.keys.joined(i), self.keys.unhealthy(i)])
        )
        return int(joined), int(unhealthy)

    def join_records(self, i: int, num_nodes: int) -> list[JoinInfo | None]:
        keys = [self.keys.join(i, n) for n in range(num_nodes)]
        if self._op(lambda: self._store.check(keys)):  # the usual case: one round trip each
            return [decode(JoinInfo, raw) for raw in self._op(lambda: self._store.multi_get(keys))]
        present = [self._check(k) for k in keys]
        have = [k for k, p in zip(keys, present, strict=True) if p]
        raws = iter(self._op(lambda: self._store.multi_get(have)) if have else [])
        return [decode(JoinInfo, next(raws)) if p else None for p in present]

    def acks(self) -> int:
        return int(self._op(lambda: self._store.add(self.keys.acks, 0)))

    def beats(self, nodes: Sequence[int]) -> list[int]:
        keys = [self.keys.heartbeat(n) for n in nodes]
        return [int(v) for v in self._op(lambda: self._store.multi_get(keys))]

    # ----------------------------------------------------------------- everyone

    def wait_base(self, *, deadline: float, abort: Abort) -> Base | None:
        raw = self._get_when_set(self.keys.base, deadline=deadline, abort=abort)
        return None if raw is None else decode(Base, raw)

    def join(self, i: int, info: JoinInfo) -> None:
        self._op(lambda: self._store.set(self.keys.join(i, info.node_rank), encode(info)))
        if info.unhealthy is not None:
            self._op(lambda: self._store.add(self.keys.unhealthy(i), 1))
        self._op(lambda: self._store.add(self.keys.joined(i), 1))

    def wait_decision(self, i: int, *, deadline: float, abort: Abort) -> Decision | None:
        raw = self._get_when_set(self.keys.decision(i), deadline=deadline, abort=abort)
        return None if raw is None else decode(Decision, raw)

    def publish_failure(self, i: int, failure: Failure) -> Failure:
        """First writer wins; returns the failure that did."""
        won = self._op(lambda: self._store.compare_set(self.keys.failure(i), "", encode_failure(failure)))
        self.halt(i)
        decoded = decode_failure(won)
        assert decoded is not None  # compare_set returns the value that is now set
        return decoded

    def halt(self, i: int) -> None:
        """Cycle i is over: wakes every launcher's halt waiter."""
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
        return Poll(decode_failure(raw_failure), int(raw_done))

    def wait_result(self, i: int, *, deadline: float, abort: Abort) -> CycleResult | None:
        raw = self._get_when_set(self.keys.result(i), deadline=deadline, abort=abort)
        return None if raw is None else decode(CycleResult, raw)

    def result(self, i: int) -> CycleResult | None:
        key = self.keys.result(i)
        return decode(CycleResult, self._op(lambda: self._store.get(key))) if self._check(key) else None

    def ack(self) -> None:
        self._op(lambda: self._store.add(self.keys.acks, 1))

    def beat(self, node: int) -> None:
        self._op(lambda: self._store.add(self.keys.heartbeat(node), 1))


__all__ = ["Client", "Interrupted", "StoreLost"]
