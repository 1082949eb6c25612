"""The stores under the protocol: node 0's TCPStore (and connections to it); for a single
node, an in-memory store with the same semantics (``localstore``) keeps to :class:`Store`.

Everything torch-specific about the store lives here: how it is opened, how its errors
are told apart (a timeout is an answer, anything else means the store is lost), and the
one back-off rule that every polling wait of the launcher uses.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import functools
import random
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Protocol, TypeVar

from slurm_ft import lifelong
from slurm_ft.launch.rendezvous import keptthreads

CONNECT_ATTEMPT_S = 2.0
# How long a connection to a store known to be up may take to be made: longer than any
# operation's timeout, a margin for a loaded store host. (Connections once took 4-30 s
# here, put down to idle connections held to the port; it was torch's own listener's
# reverse lookup of every accepted peer: 10 s a join whatever was held, under 0.02 s with
# node 0's own listener: ``python -m benchmarks.store_flood``, docs/guides/security.md.)
RECONNECT_S = 60.0
# How much longer than its own timeout a connection attempt is given before it is abandoned
# (:func:`_client`): torch's own timeout ends a refused or slow connect first.
CONNECT_GRACE_S = 1.0
# torch's own timeout for making a connection, whatever the caller waits: it covers the
# reverse lookup torch makes first (see :func:`_client`).
LOOKUP_ALLOWANCE_S = 30.0
BACKOFF_FIRST_S = 0.2  # a refused connect's first pause (see :func:`backoff`)
BACKOFF_MAX_S = 2.0
# The kernel caps it at net.core.somaxconn (see :func:`backlog_warning`).
LISTEN_BACKLOG = 65535
FAST_POLL_S = 0.005
FAST_POLL_PERIOD_S = 2.0

T = TypeVar("T")


class StoreLost(Exception):
    """The store (node 0) cannot be reached any more."""


class StoreBindError(Exception):
    """Node 0 could not listen on the rendezvous port."""


class WaitTimeout(RuntimeError):
    """The in-memory store's counterpart of torch's ``DistStoreError`` on a timed-out wait."""


class Interrupted(Exception):
    """A wait ended because the caller's abort predicate became true (a signal arrived)."""


class Store(Protocol):
    """The subset of ``torch.distributed.Store`` the protocol uses (TCPStore, or a
    connection to the in-memory :class:`~slurm_ft.launch.rendezvous.localstore.LocalStore`)."""

    def set(self, key: str, value: str | bytes) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...
    def add(self, key: str, amount: int) -> int: ...
    def multi_get(self, keys: list[str]) -> list[bytes]: ...
    def multi_set(self, keys: list[str], values: list[str]) -> None: ...
    def compare_set(self, key: str, expected: str | bytes, desired: str) -> bytes: ...
    def delete_key(self, key: str) -> bool: ...
    @property
    def port(self) -> int: ...
    def wait(self, keys: list[str], timeout: datetime.timedelta) -> None: ...
    def set_timeout(self, timeout: datetime.timedelta) -> None: ...


def _c10d() -> ModuleType:
    """torch.distributed, imported on first use: --dry-run and bad input must not pay for it.
    Its objects live as long as the launcher (``lifelong``): the first import is made with
    the collector paused, and frozen."""
    first = "torch.distributed" not in sys.modules
    with warnings.catch_warnings(), lifelong.made_for_life() if first else contextlib.nullcontext():
        warnings.simplefilter("ignore")
        import torch.distributed as dist
    return dist


def load_torch() -> None:
    """Import torch.distributed now rather than at the first connection: a peer does it
    while node 0 is still starting (node 0 imports it before it listens), so the two
    imports overlap instead of following each other (1.3-2 s of every start and requeue)."""
    _c10d()


def is_timeout(exc: BaseException) -> bool:
    """A store call that timed out (the key is not there yet) rather than a lost store.

    torch raises ``DistStoreError`` for timeouts and ``DistNetworkError`` for a broken
    connection; both are ``RuntimeError``s, so the type, not the message, tells them apart.
    """
    if isinstance(exc, WaitTimeout):
        return True
    if "torch" not in sys.modules:  # no torch store was ever opened in this process
        return False
    return isinstance(exc, _c10d().DistStoreError)


def lost(exc: BaseException) -> StoreLost:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return StoreLost(f"rendezvous store unreachable: {first}")


def wait(store: Store, keys: list[str], timeout: float) -> bool:
    """Block until every key is set (True) or ``timeout`` passes (False); StoreLost when
    the store is gone."""
    try:
        store.wait(keys, datetime.timedelta(seconds=timeout))
    except RuntimeError as exc:
        if is_timeout(exc):
            return False
        raise lost(exc) from None
    return True


def poll_until(
    ready: Callable[[], T | None],
    *,
    deadline: float,
    abort: Callable[[], bool],
    sleep: Callable[[float], None],
    max_interval: float,
    clock: Callable[[], float] = time.monotonic,
) -> T | None:
    """``ready()`` until it gives a value, or None at ``deadline`` (on ``clock``).

    Polls every 5 ms for the first seconds (a restart waits here: every millisecond
    counts), then with a growing interval up to ``max_interval`` (cheap for the store when
    the answer is minutes away). ``abort`` (a signal arrived) raises :class:`Interrupted`.
    """
    interval = FAST_POLL_S
    fast_until = clock() + FAST_POLL_PERIOD_S
    while True:
        value = ready()
        if value is not None:
            return value
        if abort():
            raise Interrupted()
        left = deadline - clock()
        if left <= 0:
            return None
        sleep(min(interval, left))
        if clock() > fast_until:
            interval = min(interval * 1.5, max_interval)


def host(port: int, op_timeout: float, address: str | None = None) -> Store:
    """Node 0: listen on all interfaces; ``port`` 0 picks a free one. ``address``: the
    name or address the peers reach node 0 by (see :func:`_ipv4_listener`)."""
    dist = _c10d()
    listener = _ipv4_listener(port, address) if address is not None else None
    if listener is not None:
        port = listener.getsockname()[1]
        try:
            return _server(dist, port, op_timeout, listener)
        except TypeError:  # a torch without master_listen_fd (before 2.4): it listens itself
            listener.close()
    return _server(dist, port, op_timeout, None)


def _server(dist: ModuleType, port: int, op_timeout: float, listener: socket.socket | None) -> Store:
    extra = {"master_listen_fd": listener.fileno()} if listener is not None else {}
    try:
        store: Store = dist.TCPStore(
            "0.0.0.0",
            port,
            None,
            True,
            datetime.timedelta(seconds=op_timeout),
            wait_for_workers=False,
            use_libuv=True,
            **extra,
        )
    except RuntimeError as exc:
        if listener is not None:
            listener.detach()  # torch may have closed it: never close a descriptor twice
        raise StoreBindError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    if listener is not None:
        listener.detach()  # the store owns the descriptor now
    return store


def _ipv4_listener(port: int, address: str) -> socket.socket | None:
    """The store's listening socket, IPv4 only, where the peers can only reach node 0 over
    IPv4; None where ``address`` has an IPv6 address too (torch's client tries IPv6 first,
    and would be refused) or no IPv4 socket can be made here: torch then listens itself.

    Why not let torch listen: its libuv server listens on a dual-stack IPv6 socket, so every
    peer arrives as ``::ffff:a.b.c.d``, and it names each accepted peer with
    ``getnameinfo`` on its one event-loop thread. ``/etc/hosts`` never lists the mapped
    form, so each accept waits for a reverse DNS query (``[c10d] The hostname of the client
    socket cannot be retrieved. err=-3`` when the resolver gives up): 1,100 connections took
    110 s to be accepted here (about 0.1 s each), 5 s and more each where queries are
    dropped. On an IPv4 socket the peer is a plain IPv4 address, which ``/etc/hosts`` or
    the node's resolver cache answers (1,100 in 0.05 s here)."""
    try:
        socket.getaddrinfo(address, port, socket.AF_INET6, socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        pass  # no IPv6 address: the peers come over IPv4
    else:
        return None
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("0.0.0.0", port))
        listener.listen(LISTEN_BACKLOG)
    except OSError as exc:
        listener.close()
        if exc.errno == errno.EADDRINUSE:
            raise StoreBindError(f"port {port} in use ({exc.strerror})") from None
        return None
    return listener


SOMAXCONN = "/proc/sys/net/core/somaxconn"


def backlog_warning(num_nodes: int, path: str = SOMAXCONN) -> str | None:
    """One line where the kernel's cap on the listen queue is below the launchers that may
    connect at once (PyTorch warns the same): past it a storm of connects is dropped and
    retried, or reset."""
    try:
        with open(path) as fh:
            cap = int(fh.read().strip())
    except (OSError, ValueError):
        return None
    if cap >= num_nodes:
        return None
    return (
        f"net.core.somaxconn is {cap}, below the {num_nodes} launchers that connect to the store at "
        f"start: connections past it wait for retries (sysctl -w net.core.somaxconn={num_nodes} on node 0)"
    )


class _Connecting:
    """One connection being made on a kept thread (see :func:`_client`)."""

    def __init__(self, dist: ModuleType, address: str, port: int, timeout: float) -> None:
        self.done = threading.Event()
        self.result: Store | BaseException | None = None
        keptthreads.run(functools.partial(self._make, dist, address, port, timeout))

    def _make(self, dist: ModuleType, address: str, port: int, timeout: float) -> None:
        try:
            self.result = dist.TCPStore(
                address, port, None, False, datetime.timedelta(seconds=timeout), use_libuv=True
            )
        except BaseException as exc:  # handed to the caller's thread
            self.result = exc
        finally:
            self.done.set()


# Connections still being made when their caller gave up on them, by (address, port): the
# caller's next attempt waits for that one instead of opening another.
_pending: dict[tuple[str, int], _Connecting] = {}
_pending_lock = threading.Lock()


def _client(dist: ModuleType, address: str, port: int, timeout: float) -> Store:
    """A client connection to the TCPStore at ``address:port``, made within ``timeout``
    (plus :data:`CONNECT_GRACE_S`) or RuntimeError.

    torch's client constructor waits for the server's answer to its first request without
    a time limit: a store whose process is frozen (SIGSTOP, a hung node) still accepts the
    connection in its kernel and never answers, and the constructor blocked for ever
    (measured: over 60 s with a 1 s timeout, torch 2.13), past every join timeout. So the
    connection is made on another thread (a kept one: ``keptthreads``) and the caller stops
    waiting at the deadline.

    The connection itself is not given up with it: torch names the address it connects to
    with a reverse lookup first (``getnameinfo`` of ``::ffff:a.b.c.d``, which ``/etc/hosts``
    never answers: a DNS query, 5 s and more where the resolver drops it under a storm of
    thousands of launchers), so a short attempt would fail every time and each retry would
    add a connection and a query. It is made with :data:`LOOKUP_ALLOWANCE_S` at least, and
    the caller's next attempt at the same address and port waits for it. The launcher's
    process asks its resolver once, for a second (``resolver.bound_reverse_lookups``)."""
    key = (address, port)
    with _pending_lock:
        connecting = _pending.pop(key, None)
    if connecting is None:
        connecting = _Connecting(dist, address, port, max(timeout, LOOKUP_ALLOWANCE_S))
    if not connecting.done.wait(timeout + CONNECT_GRACE_S):
        with _pending_lock:
            _pending.setdefault(key, connecting)
        raise RuntimeError(f"{address}:{port} took the connection but did not answer within {timeout:g} s")
    if isinstance(connecting.result, BaseException):
        raise connecting.result
    assert connecting.result is not None
    return connecting.result


def backoff(tries: int, draw: Callable[[], float] = random.random) -> float:
    """Seconds before connect attempt ``tries + 1``: doubling from :data:`BACKOFF_FIRST_S` up
    to :data:`BACKOFF_MAX_S`, each drawn between half and all of it, so thousands of
    launchers refused at once (node 0 not up yet, its listen queue full) come back spread."""
    ceiling = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2.0 ** min(tries, 16))
    return ceiling * (0.5 + 0.5 * draw())


def connect(
    address: str,
    port: int,
    *,
    deadline: float,
    op_timeout: float,
    abort: Callable[[], bool],
    sleep: Callable[[float], None],
    attempt: float = CONNECT_ATTEMPT_S,
) -> Store:
    """Retry until ``deadline`` (monotonic): node 0 may start a little later than us. Each
    attempt may take ``attempt`` seconds (a signal is noticed between two)."""
    dist = _c10d()
    tries = 0
    while True:
        if abort():
            raise Interrupted()
        left = deadline - time.monotonic()
        if left <= 0:
            raise StoreLost(f"could not reach the rendezvous store at {address}:{port}")
        try:
            store = _client(dist, address, port, max(0.1, min(attempt, left)))
        except RuntimeError:
            sleep(min(backoff(tries), max(0.0, deadline - time.monotonic())))
            tries += 1
            continue
        store.set_timeout(datetime.timedelta(seconds=op_timeout))
        return store


def reconnect(address: str, port: int, op_timeout: float) -> Store:
    """A second connection to a store that is known to be up, for another thread
    (:class:`StoreLost` when it cannot be made within ``RECONNECT_S``)."""
    try:
        store = _client(_c10d(), address, port, max(op_timeout, RECONNECT_S))
    except RuntimeError as exc:
        raise lost(exc) from None
    store.set_timeout(datetime.timedelta(seconds=op_timeout))
    return store
