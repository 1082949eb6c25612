"""Reading the store's keys as untrusted input: a key anyone may have deleted, a value
anyone may have overwritten.

A TCPStore ``get`` (or ``multi_get``) of a missing key blocks until the key appears or
the connection's timeout passes, and then raises as a broken store would: one deleted key
would stall a launcher for the heart-beat timeout and end its attempt as a lost store.
So a key that may be missing is read with ``compare_set(key, MISSING, MISSING)``: the
store answers the value, or ``MISSING`` when there is none, at once and without creating
it. Several keys are read with one ``check`` and, when all are there, one ``multi_get``.

What is read is then opened (the seal) and parsed (``protocol``'s parsers) in one place,
:func:`opened`: a value that is not what the protocol says is reported once per key by
the sealer and reads as absent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from slurm_ft.launch.rendezvous import stores
from slurm_ft.launch.rendezvous.longwaits import LongWaits
from slurm_ft.launch.rendezvous.protocol import Malformed
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.stores import Store

T = TypeVar("T")

# Expected and desired value of a read: no launcher ever writes it. Someone else may:
# then the key reads as missing, which is what a value not from the protocol amounts to.
MISSING = "slurm-ft:no-such-key:5e1d"
_MISSING = MISSING.encode()

# A store wait's slice where the caller does not stretch it for the job's size (see
# :func:`when_set`).
WAIT_CHUNK_S = 0.2
MIN_WAIT_S = 0.05


@dataclass(frozen=True)
class Pace:
    """How a wait for a key comes back to the store: each store wait's length
    (``slice_s``), the signal box's wake-up fd that ends it at once, and whether the key is
    read before the first wait (``read_first``; see :func:`when_set`)."""

    slice_s: float = WAIT_CHUNK_S
    signal_fd: int | None = None
    read_first: bool = True


SHORT = Pace()


def probe(store: Store, key: str) -> bytes | None:
    """The value of ``key``, or None when it does not exist; one round trip, never blocks.
    Never on a key that someone ``wait``s on: torch's libuv store wakes every waiter of a
    key at any ``compare_set`` of it, even one that finds the key missing and sets nothing
    (the waiter's ``wait`` returns as if the key were set; torch 2.13)."""
    raw = store.compare_set(key, MISSING, MISSING)
    return None if raw == _MISSING else raw


def read(store: Store, keys: Sequence[str]) -> list[bytes | None]:
    """Each key's value, None where it does not exist: two round trips when all exist (the
    usual case), else one per key. A key deleted between the two requests costs one wait
    of the connection's timeout, then the keys are read one by one."""
    if not keys:
        return []
    if store.check(list(keys)):
        try:
            return list(store.multi_get(list(keys)))
        except RuntimeError as exc:
            if not stores.is_timeout(exc):
                raise
    return [probe(store, k) for k in keys]


def opened(sealer: Sealer, key: str, raw: bytes | None, parse: Callable[[bytes], T]) -> T | None:
    """The parsed value under a valid seal; None when absent, forged or malformed (the
    sealer reports each such key once)."""
    if raw is None:
        return None
    value = sealer.open(key, raw)
    if value is None:
        return None
    try:
        return parse(value)
    except Malformed as exc:
        sealer.reject(key, str(exc))
        return None


class Remembered(Generic[T]):
    """:func:`opened` for keys read over and over whose values rarely change: a value read
    again unchanged is not opened again. Node 0 reads every peer's beat each second and
    most have not moved since the last look; checking each seal anew (an HMAC) was most of
    that look's cost, 7 ms for 4,096 peers. Same answers: what a value opens to depends on
    its key and bytes alone."""

    def __init__(self, sealer: Sealer, parse: Callable[[bytes], T]) -> None:
        self._sealer = sealer
        self._parse = parse
        self._last: dict[str, tuple[bytes | None, T | None]] = {}

    def open(self, key: str, raw: bytes | None) -> T | None:
        last = self._last.get(key)
        if last is None or last[0] != raw:
            last = self._last[key] = (raw, opened(self._sealer, key, raw, self._parse))
        return last[1]


def when_set(
    store: Store,
    key: str,
    *,
    deadline: float,
    abort: Callable[[], bool],
    slice_s: float = WAIT_CHUNK_S,
    signal_fd: int | None = None,
    waits: LongWaits,
    read_first: bool = True,
) -> bytes | None:
    """The value of ``key`` once someone sets it; None on deadline.

    With many launchers, all of them polling node 0's store for the same key is what
    makes a cycle slow (the store host answers thousands of requests while node 0
    itself is trying to read the join records). A blocking ``wait`` costs the store
    nothing until the key appears and wakes every waiter at once; what it costs is its
    timeouts, one request per ``slice_s`` (callers that wait with a whole job stretch it
    with the job's size: ``beatperiod.look_period``). ``abort`` (a signal) is looked at
    meanwhile without a request, at once on a signal where ``signal_fd`` is the signal
    box's (:class:`LongWaits`: the connection's ``waits``). The key is read
    (:func:`probe`: someone may delete it again) first and after each wait that saw it
    set, never between slices. ``read_first`` False: the first request is the wait, for a
    caller that knows the key was not set a moment ago (a launcher that has just joined
    waits for a decision node 0 makes only once it saw that join): a wait on a key that is
    set returns at once, and the read before it was one request more for node 0 from
    every launcher of every cycle, 4,095 at 4,096 nodes.
    """
    look = read_first
    while True:
        if abort():
            raise stores.Interrupted()
        if look:  # a check first: a probe would wake everyone else waiting here (see probe)
            raw = probe(store, key) if store.check([key]) else None
            if raw is not None:
                return raw
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        # Never a wait of a few milliseconds: a wait that times out on the client while
        # the store's answer is on its way (a loaded host) leaves that answer to be
        # taken for the next request's, and the connection stalls for its timeout.
        look = waits.wait([key], max(MIN_WAIT_S, min(slice_s, left)), abort, signal_fd)


def sealed_when_set(
    store: Store,
    sealer: Sealer,
    key: str,
    parse: Callable[[bytes], T],
    *,
    deadline: float,
    abort: Callable[[], bool],
    slice_s: float = WAIT_CHUNK_S,
    signal_fd: int | None = None,
    waits: LongWaits,
    read_first: bool = True,
) -> T | None:
    """As :func:`when_set`, for a sealed value: a forgery or a malformed value there
    counts as not set (until its real writer overwrites it).

    A forgery is deleted, so that the wait in :func:`when_set` wakes at the key's next
    write and reads it at once. Looking again a little later would be a sample, which
    someone who overwrites the key more often than its writer restores it
    (:meth:`Client.reassert`, once a second) starves (issue 47: a peer sampling every
    0.2 s beside an outsider writing every 0.2 s took 3 to 15 s to catch the run's base,
    now and then past the join timeout). Deleting a value that is not the protocol's
    loses nothing: should the writer's value have arrived between the read and the
    delete, its next reassert restores it. One delete per ``MIN_WAIT_S`` at most, so that
    a flood of forgeries is paced by this loop and not multiplied by it on node 0's
    store (a value written meanwhile is read by the first look of :func:`when_set`).
    """
    while True:
        raw = when_set(
            store,
            key,
            deadline=deadline,
            abort=abort,
            slice_s=slice_s,
            signal_fd=signal_fd,
            waits=waits,
            read_first=read_first,
        )
        if raw is None:
            return None
        value = opened(sealer, key, raw, parse)
        if value is not None:
            return value
        read_first = True  # what is written after the delete is read before any wait
        store.delete_key(key)
        time.sleep(max(0.0, min(MIN_WAIT_S, deadline - time.monotonic())))


def ensure(store: Store, key: str, sealed: str) -> bool:
    """``key`` holds ``sealed`` afterwards: one answered round trip when it already does
    (``compare_set`` from "" also creates a missing or emptied key); a second, a ``set``,
    when someone overwrote it. True in that case."""
    answer = store.compare_set(key, "", sealed)
    if answer == sealed.encode():
        return False
    store.set(key, sealed)
    return True
