"""A complete snapshot as a byte stream, and back into an area, verified on arrival.

One slot file is one whole snapshot, so shipping it is sending its bytes: a preamble
(magic and length), the slot's sealed header, the rest of the file in pieces (each with
its length), a trailer (whether the sender's slot was still the same snapshot when the
last byte left, and a CRC-32 of everything sent). The receiver writes a new file in the
key's older slot's place (reserve, copy, seal last) and seals it only when the length, the
CRC and the sender's word all agree: a stream cut, corrupted or torn at the source leaves
the receiving area as it was.

The sender holds the slot's file still while it sends (a shared ``flock`` on it, taken
only once its seal names the snapshot): the trainer's writer, finding the slot it would
fill held, puts a new file in its place and fills that, so the held one stays whole,
unlinked, until the last byte left, and the trainer's snapshot call never waits on a
transfer however long it takes (issue #44: unheld, a copy slower than the interval
between two snapshots was superseded every time and no replica ever landed). A slot the
trainer was already filling is not held (the copy is superseded at once: the newer one
goes next); the seal is still looked at before every piece, so nothing that rewrote a
file in place unnoticed could pass as whole. Works over any file object: a file, a pipe,
``socket.makefile``. Standard library only (the launcher ships bytes, it
never needs torch for it).
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, Protocol

from slurm_ft.snapshot import area as areas
from slurm_ft.snapshot import claim, layout, reader

_PREAMBLE = struct.Struct("<8sQ")
_PIECE_LEN = struct.Struct("<I")
_TRAILER = struct.Struct("<4sI")
SHIP_MAGIC = b"SFTSHIP2"
_DONE, _TORN = b"DONE", b"TORN"
_PIECE = 8 << 20
LOCK_WAIT_S = 30.0
_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux: the slot's pages are mapped in one call


class Readable(Protocol):
    """What a receiver reads from: a binary file, a pipe, ``socket.makefile("rb")``."""

    def read(self, n: int, /) -> bytes: ...

    def readinto1(self, buffer: memoryview, /) -> int | None: ...


class ShipError(Exception):
    """The stream is not a whole, verified snapshot; the message is the one line to say."""


class Superseded(ShipError):
    """The sender's slot was rewritten while it was sent: a newer snapshot exists, and this
    copy is dropped (not a fault of either end)."""


@dataclass(frozen=True)
class Bound:
    """How long one transfer may take once its bytes start to flow: ``grace_s`` plus its
    length at ``floor_bytes_per_s``. A peer that stops is caught sooner by the connection's
    own idle timeout; this bound also ends one that trickles."""

    grace_s: float
    floor_bytes_per_s: float

    def seconds(self, size: int) -> float:
        return self.grace_s + size / self.floor_bytes_per_s

    def deadline(self, size: int) -> float:
        return time.monotonic() + self.seconds(size)


class _Clock:
    """A transfer's deadline, checked between pieces."""

    def __init__(self, bound: Bound | None, size: int) -> None:
        self.text = f"{bound.seconds(size):.0f} s" if bound is not None else ""
        self.at = bound.deadline(size) if bound is not None else None

    def check(self, done: int, size: int) -> None:
        if self.at is not None and time.monotonic() > self.at:
            raise ShipError(f"the transfer was not done within {self.text} ({done} of {size} bytes moved)")


@dataclass(frozen=True)
class Sent:
    size: int  # bytes written to the stream
    whole: bool  # False: superseded at the source (the receiver refuses it)


def send(info: reader.SnapshotInfo, out: BinaryIO, *, bound: Bound | None = None) -> Sent:
    """Write the snapshot ``info`` describes to ``out``. Stops early, and says TORN, as soon
    as the slot is being rewritten (the trainer's next snapshot into it). Raises
    :class:`ShipError` past ``bound``."""
    size = info.header.file_size
    clock = _Clock(bound, size)
    fd = os.open(info.path, os.O_RDONLY | os.O_CLOEXEC)
    view = memoryview(bytearray(min(_PIECE, size)))  # one buffer for every piece
    try:
        raw_header = os.pread(fd, layout.HEADER_SIZE, 0)
        still = _is(raw_header, info) and _hold(fd)
        if still:  # held now: the seal read before the hold must still be the slot's
            raw_header = os.pread(fd, layout.HEADER_SIZE, 0)
            still = _is(raw_header, info)
        if not still:  # the slot is being filled, or is a new file: say TORN after info's header
            raw_header = _header_of(info)
        crc = zlib.crc32(raw_header)
        out.write(_PREAMBLE.pack(SHIP_MAGIC, size) + raw_header)
        sent = len(raw_header)
        while still and sent < size:
            got = os.preadv(fd, [view[: min(_PIECE, size - sent)]], sent)
            if not got:
                break
            piece = view[:got]
            crc = zlib.crc32(piece, crc)
            out.write(_PIECE_LEN.pack(got))
            out.write(piece)
            sent += got
            clock.check(sent, size)
            still = _is(os.pread(fd, layout.HEADER_SIZE, 0), info)
    finally:
        os.close(fd)  # drops the hold: the trainer's writer fills this slot's place again
    whole = still and sent == size
    if not whole:
        out.write(_PIECE_LEN.pack(0))
    out.write(_TRAILER.pack(_DONE if whole else _TORN, crc))
    out.flush()
    return Sent(_PREAMBLE.size + sent + _TRAILER.size, whole)


def _hold(fd: int) -> bool:
    """Hold the slot's file still (shared: a replica and a fetch may send one slot at
    once); False while the trainer's writer holds it (it is filling it: superseded)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _header_of(info: reader.SnapshotInfo) -> bytes:
    """The sealed header ``info`` describes, for a stream that stops at once: whatever the
    slot holds now (half written, empty) the receiver reads a header and then the TORN."""
    fields = layout.encode_fields(info.header)
    padding = bytes(layout.SEAL_OFFSET - len(fields))
    return fields + padding + layout.encode_seal(fields, info.generation)


def _is(raw_header: bytes, info: reader.SnapshotInfo) -> bool:
    """Whether a slot's header still names the snapshot ``info`` does, sealed (the writer
    unseals a slot before it rewrites a byte of it)."""
    return layout.decode(raw_header) == layout.Sealed(info.header, info.generation)


def receive(
    area: Path,
    inp: Readable,
    *,
    origin: layout.Origin,
    max_size: int,
    limit: int | None = None,
    bound: Bound | None = None,
) -> reader.SnapshotInfo:
    """Read one shipped snapshot from ``inp`` into ``area`` as a complete slot of its key,
    marked with ``origin``. Raises :class:`ShipError` (:class:`Superseded` when the sender
    stopped because its slot was rewritten; past ``bound``, counted from when the key's
    slots are had); the area keeps what it had."""
    magic, size = _PREAMBLE.unpack(_exact(inp, _PREAMBLE.size))
    if magic != SHIP_MAGIC:
        raise ShipError("not a shipped snapshot")
    if not layout.HEADER_SIZE <= size <= max_size:
        raise ShipError(f"a shipped snapshot of {size} bytes (at most {max_size} taken)")
    raw_header = _exact(inp, layout.HEADER_SIZE)
    sealed = layout.decode(raw_header)
    if sealed is None or sealed.header.file_size != size:
        raise ShipError("the shipped snapshot's header is not sealed or does not match its length")
    header = sealed.header
    key = layout.REPLICATED if header.replicated else layout.rank_key(header.rank)
    lock = claim.KeyLock.acquire(layout.owner_path(area, key), wait_s=LOCK_WAIT_S)
    if lock is None:
        raise ShipError(f"{key}'s slots stay busy in {area}")
    with lock:
        return _receive_locked(area, key, inp, raw_header, sealed, origin, limit, _Clock(bound, size))


def _receive_locked(
    area: Path,
    key: str,
    inp: Readable,
    raw_header: bytes,
    sealed: layout.Sealed,
    origin: layout.Origin,
    limit: int | None,
    clock: _Clock,
) -> reader.SnapshotInfo:
    paths = layout.slot_paths(area, key)
    gens = [found.generation if (found := reader.read_header(p)) else 0 for p in paths]
    target = paths[0 if gens[0] <= gens[1] else 1]
    size = sealed.header.file_size
    # a new file in the older slot's place: a trainer's mapped restore may still use the old one
    try:
        os.unlink(target)
    except FileNotFoundError:
        pass
    fd = os.open(target, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        space = claim.KeyLock.acquire(layout.space_lock_path(area), wait_s=LOCK_WAIT_S)
        if space is None:
            raise ShipError(f"the space lock of {area} stays busy")
        with space:
            others = areas.held(area) - os.fstat(fd).st_size
            if limit is not None and others + size > limit:
                os.ftruncate(fd, 0)
                raise ShipError(f"{areas.human(size)} for {key} would exceed the node's snapshot memory")
            try:
                os.ftruncate(fd, size)
                os.posix_fallocate(fd, 0, size)
            except OSError as exc:
                os.ftruncate(fd, 0)
                full = exc.errno in (errno.ENOSPC, errno.ENOMEM, errno.EDQUOT)
                raise ShipError(f"{area.parent} is full" if full else f"{target}: {exc.strerror}") from None
        try:
            generation = _fill(fd, size, inp, raw_header, sealed, origin, max(gens) + 1, clock)
        except BaseException:  # cut, refused, timed out: the memory is given back, nothing sealed
            os.ftruncate(fd, 0)
            raise
    finally:
        os.close(fd)
    return reader.SnapshotInfo(key, target, generation, _with_origin(sealed.header, origin))


def _fill(
    fd: int,
    size: int,
    inp: Readable,
    raw_header: bytes,
    sealed: layout.Sealed,
    origin: layout.Origin,
    generation: int,
    clock: _Clock,
) -> int:
    """Copy the pieces from the stream straight into the reserved slot (its pages mapped
    up front: no fault per page), verify them, seal the slot."""
    with mmap.mmap(fd, size, flags=mmap.MAP_SHARED | _POPULATE) as mapped:
        view = memoryview(mapped)
        try:
            crc = _fill_pieces(view, size, inp, zlib.crc32(raw_header), clock)
            word, sent_crc = _TRAILER.unpack(_exact(inp, _TRAILER.size))
            if word != _DONE:
                raise Superseded("the sender's slot was rewritten while it was sent")
            if sent_crc != crc:
                raise ShipError("the shipped bytes do not match their checksum")
            fields = layout.encode_fields(_with_origin(sealed.header, origin))
            view[: len(fields)] = fields
            view[len(fields) : layout.SEAL_OFFSET] = raw_header[len(fields) : layout.SEAL_OFFSET]
            view[layout.SEAL_OFFSET : layout.HEADER_SIZE] = layout.encode_seal(fields, generation)
        finally:
            view.release()
    return generation


def _fill_pieces(view: memoryview, size: int, inp: Readable, crc: int, clock: _Clock) -> int:
    """The pieces after the header into ``view``; their running CRC. Returns early at an
    empty piece (the sender stopped: its trailer says why)."""
    done = layout.HEADER_SIZE
    while done < size:
        (n,) = _PIECE_LEN.unpack(_exact(inp, _PIECE_LEN.size, done, size))
        if n == 0:
            break
        if n > size - done:
            raise ShipError("a shipped piece runs past the snapshot's length")
        end = done + n
        while done < end:
            got = inp.readinto1(view[done:end])  # what has arrived: the deadline is checked between
            if not got:
                raise ShipError(f"the stream ended after {done} of {size} bytes")
            done += got
            clock.check(done, size)
        crc = zlib.crc32(view[end - n : end], crc)
    return crc


def _with_origin(header: layout.Header, origin: layout.Origin) -> layout.Header:
    return replace(header, origin=origin)


def _exact(inp: Readable, n: int, done: int | None = None, size: int | None = None) -> bytes:
    data = b""
    while len(data) < n:
        piece = inp.read(n - len(data))
        if not piece:
            if done is not None:
                raise ShipError(f"the stream ended after {done} of {size} bytes")
            raise ShipError(f"the stream ended {n - len(data)} bytes short")
        data += piece
    return data
