"""One connection to the store, speaking the protocol of :mod:`slurm_ft.launch.rendezvous.protocol`.

A client object is used by one thread only: the main thread owns one (join, decision,
failure, done, result), and each background thread (heart-beat, peer monitor, halt
waiter) opens its own with :meth:`Client.clone` (a store wait given up on for a signal
finishes on a thread of its own: ``longwaits.LongWaits``). Every value the protocol marks sealed
goes through the client's :class:`~slurm_ft.launch.rendezvous.sealing.Sealer` in its
:class:`~slurm_ft.launch.rendezvous.connection.Connection` and nowhere else, and every value
read goes through ``reads`` there (missing keys never block; what is not what the protocol
says is reported and reads as absent). This module holds the protocol's verbs.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Sequence
from functools import partial

from slurm_ft.launch.rendezvous import reads, stores
from slurm_ft.launch.rendezvous.connection import Abort
from slurm_ft.launch.rendezvous.decisionio import DecisionIO
from slurm_ft.launch.rendezvous.donemarks import DoneMarks
from slurm_ft.launch.rendezvous.localstore import LocalConnection, LocalStore
from slurm_ft.launch.rendezvous.protocol import (
    Base,
    CycleResult,
    JoinInfo,
    Keys,
    Poll,
    decode,
    decode_failure,
    encode,
    encode_failure,
    parse_beat,
    parse_holdings,
    parse_mark,
    parse_text,
)
from slurm_ft.launch.rendezvous.reads import SHORT, Pace
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.stores import Interrupted, Store, StoreLost
from slurm_ft.records import Failure

PORT_SLICE_S = 1.0  # how long a peer looks for node 0 on one port of the sequence at a time
MAX_PORT_SLICE_S = 30.0  # ... doubled after each pass over the ports, up to this
PROBE_S = 0.5  # a TCP connect to see whether anything listens on a port at all
PROBE_PAUSE_S = 0.05

Sleep = Callable[[float], None]


NO_SILENCE = "-"  # an activity key before any report
NO_BEAT = "0"  # a heart-beat key before any beat (what node 0 writes there at the start)
FAILURE_SWAPS = 3  # forgeries in a failure key replaced before giving up on it


def _listening(address: str, port: int) -> bool:
    """Whether anything accepts connections on the port (a refused one costs nothing)."""
    try:
        with socket.create_connection((address, port), timeout=PROBE_S):
            return True
    except OSError:
        return False


class Client(DecisionIO):
    def __init__(
        self, store: Store, keys: Keys, address: str = "127.0.0.1", sealer: Sealer | None = None
    ) -> None:
        super().__init__(store, keys, address, sealer)
        self._beats = 0
        self._last_beat: str | None = None  # the sealed value of this connection's last beat
        self._done = DoneMarks()
        self._beat_values = reads.Remembered(self.sealer, parse_beat)

    # ----------------------------------------------------------------- construction

    @classmethod
    def host(
        cls,
        port: int,
        keys: Keys,
        op_timeout: float,
        sealer: Sealer | None = None,
        address: str | None = None,
    ) -> Client:
        """``address``: node 0's, as the peers reach it (see :func:`stores.host`)."""
        return cls(stores.host(port, op_timeout, address), keys, sealer=sealer)

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
        attempt: float = stores.CONNECT_ATTEMPT_S,
    ) -> Client:
        store = stores.connect(
            address, port, deadline=deadline, op_timeout=op_timeout, abort=abort, sleep=sleep, attempt=attempt
        )
        return cls(store, keys, address, sealer)

    @classmethod
    def local(cls, keys: Keys) -> Client:
        """A single-node run: the store in this process (see :class:`LocalStore`)."""
        return cls(LocalStore().connect(), keys)

    def rekeyed(self, keys: Keys, sealer: Sealer) -> Client:
        """The same connection, speaking with other keys and seals."""
        return Client(self._store, keys, self._address, sealer)

    def clone(self, op_timeout: float) -> Client:
        """A second connection to the same store, for another thread."""
        if isinstance(self._store, LocalConnection):
            store: Store = self._store.reconnect()
        else:
            store = stores.reconnect(self._address, self.port, op_timeout)
        twin = Client(store, self.keys, self._address, self.sealer)
        # the heart-beat's connection beats on from this one's last beat (see beat)
        twin._beats, twin._last_beat = self._beats, self._last_beat
        return twin

    # ----------------------------------------------------------------- node 0 writes

    def prepare(self, num_nodes: int, base: Base) -> None:
        """Create the heart-beat and activity keys and cycle 0's failure key, then publish
        ``base``."""
        keys = self.keys
        beats = [keys.heartbeat(n) for n in range(num_nodes)]
        quiet = [keys.activity(n) for n in range(num_nodes)]
        init = [self.sealer.seal(k, NO_BEAT) for k in beats]
        init += [self.sealer.seal(k, NO_SILENCE) for k in quiet]
        self._op(lambda: self._store.multi_set(beats + quiet, init))
        self._op(lambda: self._store.set(keys.failure(0), ""))
        self._keep(keys.base, encode(base))

    def publish_result(self, i: int, result: CycleResult) -> None:
        self._keep(self.keys.result(i), encode(result))

    def joined(self, i: int, nodes: Sequence[int]) -> bool:
        """Whether every one of ``nodes`` has a join record for cycle i (one round trip; what
        the records say is read with :meth:`join_records`)."""
        keys = [self.keys.join(i, n) for n in nodes]
        return not keys or bool(self._op(lambda: self._store.check(keys)))

    def unhealthy_said(self, i: int) -> bool:
        """Whether some launcher said it joined cycle i unhealthy (a wake-up only)."""
        return self._op(lambda: reads.probe(self._store, self.keys.unhealthy(i))) is not None

    def join_records(self, i: int, nodes: Sequence[int]) -> list[JoinInfo | None]:
        """The join records of cycle i of ``nodes``, in their order; None where there is none
        (or only a forgery)."""
        return self._read([self.keys.join(i, n) for n in nodes], partial(decode, JoinInfo))

    def acked(self, nodes: Sequence[int]) -> int:
        """How many of ``nodes`` said they read the final answer (sealed acks only)."""
        return sum(1 for v in self._read([self.keys.ack(n) for n in nodes], parse_mark) if v)

    def beats(self, nodes: Sequence[int]) -> list[int | None]:
        """Each node's heart-beat number; None where it is missing, forged or malformed.
        A value unchanged since this connection's last read is not opened again."""
        keys = [self.keys.heartbeat(n) for n in nodes]
        raws = self._op(lambda: reads.read(self._store, keys))
        return [self._beat_values.open(k, raw) for k, raw in zip(keys, raws, strict=True)]

    def silences(self, nodes: Sequence[int]) -> list[str]:
        """The peers' silence reports (see :meth:`report_silence`); a missing, forged or
        malformed one reads as no report."""
        values = self._read([self.keys.activity(n) for n in nodes], parse_text)
        return [NO_SILENCE if v is None else v for v in values]

    # ----------------------------------------------------------------- everyone

    def wait_base(self, *, deadline: float, abort: Abort) -> Base | None:
        return self._get_sealed_when_set(
            self.keys.base, partial(decode, Base), deadline=deadline, abort=abort, pace=SHORT
        )

    def join(self, i: int, info: JoinInfo) -> None:
        self._keep(self.keys.join(i, info.node_rank), encode(info))
        if info.unhealthy is not None:
            self._op(lambda: self._store.set(self.keys.unhealthy(i), str(info.node_rank)))

    def publish_snapshots(self, i: int, node: int, value: str) -> None:
        self._set_sealed(self.keys.snapshots(i, node), value)

    def publish_snapshot_parts(self, i: int, parts: dict[int, str]) -> None:
        """Node 0's plan for each launcher, one multi-set before the decision names it."""
        keys = [self.keys.snapshot_part(i, n) for n in parts]
        sealed = [self.sealer.seal(k, v) for k, v in zip(keys, parts.values(), strict=True)]
        self._op(lambda: self._store.multi_set(keys, sealed))

    def snapshot_part(self, i: int, node: int) -> str | None:
        return self._read([self.keys.snapshot_part(i, node)], parse_holdings)[0]

    def snapshot_holdings(self, i: int, nodes: Sequence[int]) -> list[str | None]:
        """What each of ``nodes`` published for cycle i; None where nothing (a lost node)."""
        return self._read([self.keys.snapshots(i, n) for n in nodes], parse_holdings)

    def publish_failure(self, i: int, failure: Failure) -> Failure:
        """First writer wins; returns the failure that did. A forgery found there is
        replaced (a few times at most: then this failure is the answer here)."""
        key = self.keys.failure(i)
        mine = self.sealer.seal(key, encode_failure(failure))
        expected: str | bytes = ""
        won: Failure | None = None
        for _ in range(FAILURE_SWAPS):
            raw = self._op(partial(self._store.compare_set, key, expected, mine))
            if raw == mine.encode():
                break
            won = reads.opened(self.sealer, key, raw, decode_failure) if raw else None
            if won is not None:
                break
            expected = raw
        self.halt(i)
        return won or failure

    def halt(self, i: int) -> None:
        """Cycle i is over: wakes every launcher's halt waiter."""
        self._op(lambda: self._store.set(self.keys.halt(i), "1"))

    def wait_halt(self, i: int, timeout: float) -> bool:
        """Block until cycle i is halted (True) or ``timeout`` passes (False)."""
        return stores.wait(self._store, [self.keys.halt(i)], timeout)

    def mark_done(self, i: int, node: int) -> None:
        """This launcher's workers all exited 0 (kept: see :meth:`reassert`)."""
        self._keep(self.keys.done_by(i, node), "1")
        self._done.own(i, node)

    def all_done(self, i: int, launchers: Sequence[int]) -> bool:
        """Every active launcher's sealed word that its workers finished (see :mod:`donemarks`)."""
        for group in self._done.to_ask(i, launchers):
            keys = [self.keys.done_by(i, n) for n in group]
            if self._present(keys):
                self._done.saw(i, group, self._read(keys, parse_mark))
        return self._done.all_read(i, launchers)

    def poll(self, i: int, launchers: Sequence[int], *, judging: bool = True) -> Poll:
        """The cycle's failure (None while there is none, or only a forgery there) and
        whether all of ``launchers`` finished.

        Whether all finished is a request naming every launcher's done mark: asked by every
        launcher at every look, node 0 would serve O(N) per peer per look (a 4,096-node job:
        16 million key lookups and about 1 GB of requests per look). So only the launcher
        that judges the job (``judging``) asks at every look; another asks once its own
        workers finished (it waits for the rest) or once the cycle was halted (the judge
        halts it when all finished), else it reads the failure and the halt only."""
        key = self.keys.failure(i)
        raw = self._op(lambda: reads.probe(self._store, key))
        failure = reads.opened(self.sealer, key, raw, decode_failure) if raw else None
        if failure is not None:
            return Poll(failure, False)
        if not judging and self._done.own_in != i and not self.halted(i):
            return Poll(None, False)
        return Poll(None, self.all_done(i, launchers))

    def halted(self, i: int) -> bool:
        """Whether someone halted cycle i (one round trip). A ``check``, never a probe: torch's
        libuv store wakes every ``wait`` on a key at any ``compare_set`` of it, even one that
        changes nothing, and a halt waiter woken so would sleep through the real halt."""
        key = self.keys.halt(i)
        return bool(self._op(lambda: self._store.check([key])))

    def wait_result(self, i: int, *, deadline: float, abort: Abort, pace: Pace = SHORT) -> CycleResult | None:
        key = self.keys.result(i)
        return self._get_sealed_when_set(
            key, partial(decode, CycleResult), deadline=deadline, abort=abort, pace=pace
        )

    def result(self, i: int) -> CycleResult | None:
        key = self.keys.result(i)
        return self._read([key], partial(decode, CycleResult))[0]

    def ack(self, node: int) -> None:
        self._set_sealed(self.keys.ack(node), "1")

    def beat(self, node: int) -> None:
        """A number this connection sets ever higher (sealed, unlike an increment), in one
        answered round trip: ``compare_set`` from the value it wrote last. The answer is
        what proves the host alive (a TCPStore ``set`` is not answered: a frozen host
        would take it silently). When the key holds anything else (a value someone else
        wrote, a key node 0 did not prepare), the answer says so and the beat falls back to
        ``set`` + ``check``. Half the requests of set + check: the idle cost of node 0,
        which serves every peer's beat each second.

        A connection's first beat expects what node 0 wrote at the start (:meth:`prepare`),
        and a connection cloned from one that beat expects that one's last beat: both
        first beats of a launcher (its own after finding the store, its heart-beat's) are
        then one round trip too, where each was three, 16,000 requests more for node 0 at
        the start of a 4,096-node job and for a successor's store at every succession."""
        self._beats += 1
        key = self.keys.heartbeat(node)
        sealed = self.sealer.seal(key, str(self._beats))
        previous = self._last_beat if self._last_beat is not None else self.sealer.seal(key, NO_BEAT)
        answer = self._op(lambda: self._store.compare_set(key, previous, sealed))
        if answer != sealed.encode():
            self._op(lambda: self._store.set(key, sealed))
            self._op(lambda: self._store.check([key]))
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
    accept: Callable[[Base], bool] | None = None,
    noted: int | None = None,
) -> tuple[Client, Base]:
    """A peer: node 0's store and the run it published (one that ``accept`` accepts, when
    given: a successor's store must hold this launcher's own run). Node 0 listens on the first
    port of ``ports`` that was free, so each is tried in turn, a short slice at a time,
    until one holds this run's ``base``: a store without it (not up yet, or another
    job's on a clashing port) is left for the next. Each pass doubles the slice: a loaded
    store host may take seconds to connect to. StoreLost at ``deadline``.

    Each pass first probes every port with a connection of its own (a refused one costs
    nothing). ``noted``: the port a successor noted it listens on (``rule.await_port``),
    tried alone first, unprobed: every follower of a succession probed the whole sequence
    (4 ports) on the successor's host, a connection more for its store to accept and close
    per follower, 4,095 at 4,096 nodes, before making its own."""
    slice_s = PORT_SLICE_S
    stores.load_torch()  # while node 0 starts, not once it listens
    unprobed = [noted] if noted is not None else []
    while True:
        if abort():
            raise Interrupted()
        probed = not unprobed  # the first pass of a noted port: that port alone, unprobed
        listening = unprobed or [p for p in ports if _listening(address, p)]  # not yet: no slice spent
        unprobed = []
        if not listening:
            sleep(min(PROBE_PAUSE_S, max(0.0, deadline - time.monotonic())))
        for port in listening:
            until = min(deadline, time.monotonic() + slice_s)
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
                    attempt=slice_s,
                )
            except StoreLost:
                continue
            until = min(deadline, time.monotonic() + slice_s)
            with contextlib.suppress(StoreLost):
                base = client.wait_base(deadline=until, abort=abort)
                if base is not None and (accept is None or accept(base)):
                    return client, base
        if listening and probed:
            slice_s = min(slice_s * 2, MAX_PORT_SLICE_S)
        if time.monotonic() >= deadline:
            raise StoreLost(
                f"node 0 did not publish the run at {address} on port(s) "
                f"{', '.join(map(str, ports))} within the join timeout"
            )
