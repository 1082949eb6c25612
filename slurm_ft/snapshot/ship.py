"""A complete snapshot as a byte stream, and back into an area, verified on arrival.

One slot file is one whole snapshot, so shipping it is sending its bytes: a preamble
(magic and length), the file (its sealed header first), a trailer (whether the sender's
slot was still the same snapshot when the last byte left, and a CRC-32 of everything
sent). The receiver writes a new file in the key's older slot's place (reserve, copy, seal
last) and seals it only when the length, the CRC and the
sender's word all agree: a stream cut, corrupted or torn at the source leaves the
receiving area as it was. Works over any file object: a file, a pipe, ``socket.makefile``.
Standard library only (the launcher ships bytes, it never needs torch for it).
"""

from __future__ import annotations

import errno
import mmap
import os
import struct
import zlib
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, Protocol

from slurm_ft.snapshot import area as areas
from slurm_ft.snapshot import claim, layout, reader

_PREAMBLE = struct.Struct("<8sQ")
_TRAILER = struct.Struct("<4sI")
SHIP_MAGIC = b"SFTSHIP1"
_DONE, _TORN = b"DONE", b"TORN"
_PIECE = 8 << 20
LOCK_WAIT_S = 30.0


class Readable(Protocol):
    """What a receiver reads from: a binary file, a pipe, ``socket.makefile("rb")``."""

    def read(self, n: int, /) -> bytes: ...

    def readinto(self, buffer: memoryview, /) -> int | None: ...


class ShipError(Exception):
    """The stream is not a whole, verified snapshot; the message is the one line to say."""


def send(info: reader.SnapshotInfo, out: BinaryIO) -> int:
    """Write the snapshot ``info`` describes to ``out``; the bytes sent. The trailer says
    TORN when the slot was rewritten while it was sent (the receiver then refuses it)."""
    size = info.header.file_size
    crc = 0
    fd = os.open(info.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        out.write(_PREAMBLE.pack(SHIP_MAGIC, size))
        sent = 0
        while sent < size:
            piece = os.pread(fd, min(_PIECE, size - sent), sent)
            if not piece:
                break
            crc = zlib.crc32(piece, crc)
            out.write(piece)
            sent += len(piece)
        still = layout.decode(os.pread(fd, layout.HEADER_SIZE, 0))
    finally:
        os.close(fd)
    whole = sent == size and still == layout.Sealed(info.header, info.generation)
    out.write(_TRAILER.pack(_DONE if whole else _TORN, crc))
    out.flush()
    return _PREAMBLE.size + sent + _TRAILER.size


def receive(
    area: Path, inp: Readable, *, origin: layout.Origin, max_size: int, limit: int | None = None
) -> reader.SnapshotInfo:
    """Read one shipped snapshot from ``inp`` into ``area`` as a complete slot of its key,
    marked with ``origin``. Raises :class:`ShipError` (the area keeps what it had)."""
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
        return _receive_locked(area, key, inp, raw_header, sealed, origin, limit)


def _receive_locked(
    area: Path,
    key: str,
    inp: Readable,
    raw_header: bytes,
    sealed: layout.Sealed,
    origin: layout.Origin,
    limit: int | None,
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
            generation = _fill(fd, size, inp, raw_header, sealed, origin, max(gens) + 1)
        except ShipError:
            os.ftruncate(fd, 0)  # the memory is given back; the slot was unsealed first
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
) -> int:
    """Copy the payload from the stream into the reserved slot, verify it, seal it."""
    with mmap.mmap(fd, size) as view:
        crc = zlib.crc32(raw_header)
        done = layout.HEADER_SIZE
        while done < size:
            got = inp.readinto(memoryview(view)[done : min(size, done + _PIECE)])
            if not got:
                raise ShipError(f"the stream ended after {done} of {size} bytes")
            crc = zlib.crc32(view[done : done + got], crc)
            done += got
        word, sent_crc = _TRAILER.unpack(_exact(inp, _TRAILER.size))
        if word != _DONE:
            raise ShipError("the sender's slot was rewritten while it was sent")
        if sent_crc != crc:
            raise ShipError("the shipped bytes do not match their checksum")
        fields = layout.encode_fields(_with_origin(sealed.header, origin))
        view[: len(fields)] = fields
        view[len(fields) : layout.SEAL_OFFSET] = raw_header[len(fields) : layout.SEAL_OFFSET]
        view[layout.SEAL_OFFSET : layout.HEADER_SIZE] = layout.encode_seal(fields, generation)
    return generation


def _with_origin(header: layout.Header, origin: layout.Origin) -> layout.Header:
    return replace(header, origin=origin)


def _exact(inp: Readable, n: int) -> bytes:
    data = b""
    while len(data) < n:
        piece = inp.read(n - len(data))
        if not piece:
            raise ShipError(f"the stream ended {n - len(data)} bytes short")
        data += piece
    return data
