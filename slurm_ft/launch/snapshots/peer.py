"""Snapshots from launcher to launcher over TCP, authenticated with the job secret.

A launcher serves its node's area: another launcher of the job may fetch a key's snapshot
of one step (a spare taking a lost node's rank, a node that restarted with empty memory)
or push one (``--snapshot-replicas 1`` keeps each node's shards in its successor's
memory). The bytes are a shipped slot (:mod:`slurm_ft.snapshot.ship`): the receiver seals
them only when length, CRC and the sender's word agree, so a copy cut by a dying peer or
rewritten at the source is never used.

Both ends prove they hold the job secret before a byte of state moves (HMAC-SHA256 over
both sides' nonces and the request): a snapshot is unpickled by the trainer, so one from
outside the job would run its code there. Without a secret there is no service at all.

Every transfer is bounded in time: a read or write that waits longer than the connection's
timeout ends it (a peer that stops), and so does a whole transfer slower than
:data:`FLOOR_BYTES_PER_S` past that timeout (a peer that trickles): a 4 GiB state may take
at most 64 s + the timeout, and the spare waiting for it then tries the next holder.

Wire: server ``MAGIC nonce_s``; client ``nonce_c mac_c len request``; server ``OK`` +
``mac_s`` or ``NO`` + reason; then a fetch gets ``SHIP`` + stream or ``NONE`` + reason,
and a push sends the stream and gets ``KEPT``, ``GONE`` (superseded at the source while
it was sent: dropped, not a fault) or ``FAIL`` + reason.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import hmac
import json
import os
import secrets
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol, cast

from slurm_ft.snapshot import layout, reader, ship

MAGIC = b"SFTPEER1"
_NONCE = 32
_MAC = 32
_LEN = struct.Struct("<I")
_MAX_REQUEST = 4096
HANDSHAKE_S = 10.0
IDLE_S = 2 * ship.LOCK_WAIT_S  # the longest a transfer may stall (the receiver may wait for a key's lock)
FLOOR_BYTES_PER_S = 64 << 20  # slower than this (0.5 Gb/s) past the timeout, a transfer is ended


def bound(timeout: float) -> ship.Bound:
    """The longest a transfer of this protocol may take: ``timeout`` plus its length at
    the floor rate."""
    return ship.Bound(grace_s=timeout, floor_bytes_per_s=FLOOR_BYTES_PER_S)


class Pushed(enum.Enum):
    KEPT = "kept"
    SUPERSEDED = "superseded"  # the trainer rewrote the slot while it was sent: a newer one goes next


class Duplex(Protocol):
    """Both directions of a connection (``socket.makefile("rwb")``)."""

    def read(self, n: int, /) -> bytes: ...

    def readinto1(self, buffer: memoryview, /) -> int | None: ...

    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


class PeerError(Exception):
    """A transfer that did not happen; the message is the one line to say."""


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"

    @classmethod
    def parse(cls, text: str) -> Address:
        host, _, port = text.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"not a host:port: {text!r}")
        return cls(host, int(port))


def _mac(secret: bytes, role: bytes, first: bytes, second: bytes, request: bytes) -> bytes:
    return hmac.new(secret, role + b"\0" + first + second + request, hashlib.sha256).digest()


def _exact(f: Duplex, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise PeerError(f"the connection ended {n - len(data)} bytes short")
    return data


def _say(f: Duplex, word: bytes, text: str = "") -> None:
    raw = text.encode()[:_MAX_REQUEST]
    f.write(word + _LEN.pack(len(raw)) + raw)
    f.flush()


def _heard(f: Duplex) -> tuple[bytes, str]:
    word = _exact(f, 4)
    (n,) = _LEN.unpack(_exact(f, _LEN.size))
    if n > _MAX_REQUEST:
        raise PeerError("the peer's reply is not of this protocol")
    return word, _exact(f, n).decode(errors="replace")


class PeerServer:
    """Serves this node's area to the job's other launchers, on a thread of its own; each
    connection on a thread too (a slow peer holds nobody else)."""

    def __init__(
        self,
        area: Path,
        secret: bytes,
        *,
        host: str = "0.0.0.0",
        port: int = 0,
        max_size: int,
        limit: int | None = None,
        event: Callable[[str], None] = print,
        send: Callable[[reader.SnapshotInfo, BinaryIO], ship.Sent] | None = None,
    ) -> None:
        self._send = send or _send_bounded  # the tests' seam: a sender that dies half way
        self.area = area
        self.secret = secret
        self.max_size = max_size
        self.limit = limit
        self.event = event
        self._sock = socket.create_server((host, port), reuse_port=False)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="snapshot-peer", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        port: int = self._sock.getsockname()[1]
        return port

    def close(self) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, peer = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn, peer[0]), daemon=True).start()

    def _one(self, conn: socket.socket, who: str) -> None:
        with conn, conn.makefile("rwb") as f:
            try:
                conn.settimeout(HANDSHAKE_S)
                request = self._handshake(f, who)
                if request is None:
                    return
                conn.settimeout(IDLE_S)  # a peer that stops reading or sending is a dead peer
                if request.get("op") == "get":
                    self._give(f, request)
                elif request.get("op") == "put":
                    self._take(f, who)
            except (OSError, PeerError, ship.ShipError) as exc:
                self.event(f"snapshots: a transfer with {who} failed: {exc}")

    def _handshake(self, f: Duplex, who: str) -> dict[str, object] | None:
        mine = secrets.token_bytes(_NONCE)
        f.write(MAGIC + mine)
        f.flush()
        theirs = _exact(f, _NONCE)
        their_mac = _exact(f, _MAC)
        (n,) = _LEN.unpack(_exact(f, _LEN.size))
        if n > _MAX_REQUEST:
            _say(f, b"NO  ", "request too long")
            return None
        raw = _exact(f, n)
        if not hmac.compare_digest(their_mac, _mac(self.secret, b"client", mine, theirs, raw)):
            # said before the reply: a launcher that ends as soon as the peer has its answer says it all
            self.event(f"snapshots: refused a transfer from {who}: not authenticated with this job's secret")
            _say(f, b"NO  ", "not authenticated with this job's secret")
            return None
        try:
            request = json.loads(raw)
        except ValueError:
            request = None
        if not isinstance(request, dict):
            _say(f, b"NO  ", "not a request")
            return None
        f.write(b"OK  " + _mac(self.secret, b"server", theirs, mine, raw))
        f.flush()
        return request

    def _give(self, f: Duplex, request: dict[str, object]) -> None:
        key, step = request.get("key"), request.get("step")
        if not isinstance(key, str) or not isinstance(step, int):
            _say(f, b"NONE", "a fetch names a key and a step")
            return
        found = [i for i in reader.complete_slots(self.area, key) if i.step == step]
        if not found:
            _say(f, b"NONE", f"{key} of step {step} is not held here")
            return
        _say(f, b"SHIP", found[0].header.origin.word)  # a replica stays one: the log says so
        self._send(found[0], cast(BinaryIO, f))

    def _take(self, f: Duplex, who: str) -> None:
        lowest_priority()  # a replica arriving must not slow this node's own trainer
        try:
            info = ship.receive(
                self.area,
                f,
                origin=layout.Origin.REPLICA,
                max_size=self.max_size,
                limit=self.limit,
                bound=bound(IDLE_S),
            )
        except ship.Superseded as exc:
            _say(f, b"GONE", str(exc))  # the pusher sends the newer one next: nothing to say
            return
        except ship.ShipError as exc:
            with contextlib.suppress(OSError):
                _say(f, b"FAIL", str(exc))
            raise PeerError(f"the replica from {who} was not kept: {exc}") from None
        _say(f, b"KEPT", f"{info.key} {info.step}")


def _send_bounded(info: reader.SnapshotInfo, out: BinaryIO) -> ship.Sent:
    """A fetch's stream, ended past the bound when the fetching peer stops reading."""
    return ship.send(info, out, bound=bound(IDLE_S))


def lowest_priority() -> None:
    """The calling thread (this thread only) runs at nice 19: it takes a core's time from a
    trainer at normal priority at most 15/1039 of the time, about 1.4 % (the kernel's
    weights), while it is on the trainer's core and both want it, and nothing while cores
    are idle. Not SCHED_IDLE: that share (3/1027) starves replicas outright on a node whose
    cores are all busy, and a replica that never lands costs a lost node everything since
    the checkpoint."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)


def _open(
    address: Address, secret: bytes, request: dict[str, object], timeout: float
) -> tuple[socket.socket, Duplex]:
    """A connection on which both ends proved they hold the job secret."""
    try:
        conn = socket.create_connection((address.host, address.port), timeout=timeout)
    except OSError as exc:
        raise PeerError(f"cannot reach {address}: {exc.strerror or exc}") from None
    f = conn.makefile("rwb")
    try:
        if _exact(f, len(MAGIC)) != MAGIC:
            raise PeerError(f"{address} is not a slurm-ft launcher")
        theirs = _exact(f, _NONCE)
        mine = secrets.token_bytes(_NONCE)
        raw = json.dumps(request, sort_keys=True).encode()
        f.write(mine + _mac(secret, b"client", theirs, mine, raw) + _LEN.pack(len(raw)) + raw)
        f.flush()
        word = _exact(f, 4)
        if word != b"OK  ":
            (n,) = _LEN.unpack(_exact(f, _LEN.size))
            raise PeerError(f"{address} refused: {_exact(f, min(n, _MAX_REQUEST)).decode(errors='replace')}")
        if not hmac.compare_digest(_exact(f, _MAC), _mac(secret, b"server", mine, theirs, raw)):
            raise PeerError(f"{address} does not hold this job's secret")
    except (OSError, PeerError) as exc:
        f.close()
        conn.close()
        raise exc if isinstance(exc, PeerError) else PeerError(f"{address}: {exc}") from None
    return conn, f


def fetch(
    address: Address,
    secret: bytes,
    key: str,
    step: int,
    area: Path,
    *,
    max_size: int,
    limit: int | None = None,
    timeout: float = 30.0,
) -> reader.SnapshotInfo:
    """``key``'s snapshot of ``step`` from the launcher at ``address`` into ``area`` (origin:
    a replica when the peer held it as one, else a peer's memory). Raises
    :class:`PeerError`; the area then keeps what it had."""
    conn, f = _open(address, secret, {"op": "get", "key": key, "step": step}, timeout)
    with conn, contextlib.closing(f):
        try:
            conn.settimeout(timeout)  # per read: a peer that stops sending is a dead peer
            word, why = _heard(f)
            if word != b"SHIP":
                raise PeerError(f"{address}: {why}")
            origin = layout.Origin.REPLICA if why == layout.Origin.REPLICA.word else layout.Origin.PEER
            return ship.receive(area, f, origin=origin, max_size=max_size, limit=limit, bound=bound(timeout))
        except ship.ShipError as exc:
            raise PeerError(f"the copy of {key} from {address} is not used: {exc}") from None
        except OSError as exc:
            raise PeerError(f"the copy of {key} from {address} is not used: {exc}") from None


def push(address: Address, secret: bytes, info: reader.SnapshotInfo, *, timeout: float = 30.0) -> Pushed:
    """This node's snapshot ``info`` into the memory of the launcher at ``address``, as a
    replica: kept, or superseded (the slot was rewritten while it was sent, and the copy
    dropped at both ends). Raises :class:`PeerError`."""
    conn, f = _open(address, secret, {"op": "put"}, timeout)
    with conn, contextlib.closing(f):
        try:
            conn.settimeout(timeout)
            ship.send(info, cast(BinaryIO, f), bound=bound(timeout))
            word, why = _heard(f)
        except (OSError, ship.ShipError) as exc:
            raise PeerError(f"the replica of {info.key} for {address} was not sent: {exc}") from None
        if word == b"GONE":
            return Pushed.SUPERSEDED
        if word != b"KEPT":
            raise PeerError(f"{address} did not keep the replica of {info.key}: {why}")
        return Pushed.KEPT
