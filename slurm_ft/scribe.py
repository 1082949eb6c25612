"""Writes that may meet a dead mount, made by a child process the launcher can leave behind.

A write into an NFS, Lustre or FUSE mount whose server stopped answering sleeps in the
kernel until the server answers; after SIGKILL the writer sits in state D, and a process
with one thread there cannot finish exiting (not even of SIGKILL). A thread with a
deadline is therefore not enough: the launcher hands such writes to a :class:`Scribe`, a
small standard-library child (``scribe_child.py``, ``python -I -S``, a few milliseconds to
start, started asynchronously), and never waits on it past a deadline. When the child
stops answering the launcher counts what it could not write, says so, and carries on; on
its way out it sends the child SIGKILL and walks away (the child dies as soon as the
mount answers or its server goes away). :func:`leave_alone` names those children so
that the launcher's orphan sweep does not wait for them.

Requests travel through a ring in shared memory (see ``scribe_child.py``): the launcher
copies a frame in and rings a doorbell pipe with how far the ring is filled; the child
writes an append to its file straight from the ring. On the healthy path that costs the
launcher one memory copy and an 8-byte write, and the child no copy. Appends (cycle logs,
per-rank files, the launcher log) are one-way, no answer; what reached each file is
counted by the child in shared memory. Atomic writes
and reads of the state dir are answered, each against a deadline. A stall is a request
that has been running for longer than ``stall_after`` (the child stamps the start of each
request in the shared memory), so a slow but answering file system is not taken for a
dead one. Files on local disks need none of this
(see :func:`slurm_ft.health.storage.off_local_disk`): the launcher writes them itself, as
before.
"""

from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from slurm_ft import scribe_child as wire

CHILD_SCRIPT = str(Path(__file__).with_name("scribe_child.py"))
_POLL_SLICE_S = 0.1
_ROOM_WAIT_S = 0.001  # a full ring: how often to look whether the child made room
_DOORBELL = struct.Struct("<Q")
# The children of this process that are scribes: the orphan sweep leaves them alone.
_PIDS: set[int] = set()
_PIDS_LOCK = threading.Lock()

Part: TypeAlias = bytes | bytearray | memoryview


def leave_alone() -> frozenset[int]:
    """Scribe children, live or abandoned: a sweep of the launcher's children must not wait
    for them (an abandoned one may sit in state D until its mount answers)."""
    with _PIDS_LOCK:
        return frozenset(_PIDS)


class Stalled(Exception):
    """A request did not finish within its deadline: its file system stopped answering."""


@dataclass(frozen=True)
class Reply:
    kind: int
    payload: bytes

    @property
    def missing(self) -> bool:
        return self.kind == wire.REPLY_MISSING

    def raise_error(self, path: str) -> None:
        if self.kind == wire.REPLY_ERROR:
            raise OSError(f"{path}: {self.payload.decode(errors='replace')}")


@dataclass(frozen=True)
class SlotCounts:
    """What the child did with one slot's appends."""

    written_bytes: int = 0
    written_lines: int = 0
    lost_bytes: int = 0
    lost_lines: int = 0


class Scribe:
    """One writer child and its channel; safe to use from several threads."""

    def __init__(self, name: str, *, stall_after: float, on_event: Callable[[int, str], None]) -> None:
        self.name = name
        self.stall_after = stall_after
        self._stall_ns = int(stall_after * 1e9)
        self._on_event = on_event
        self._lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: dict[int, Reply] = {}
        self._ids = itertools.count(1)
        self._broken = False
        self.abandoned = False
        self._head = 0  # how far the ring is filled (only grows; the child's tail follows)
        self._final: list[int] | None = None  # the shared words, once let go (see _release)
        self._unposted = False  # the doorbell was full: ring it again with the next frame
        self._proc, self._req_w, self._reply_r, self._mem = _spawn_child(name)
        self._words = memoryview(self._mem)[: wire.SHARED_BYTES].cast("Q")
        self._ring = memoryview(self._mem)[wire.RING_OFFSET : wire.MAP_BYTES]
        with _PIDS_LOCK:
            _PIDS.add(self._proc.pid)
        os.set_blocking(self._req_w, False)  # the doorbell: a full one is rung again later
        self._reader = threading.Thread(target=self._read_replies, name=f"scribe-{name}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    # ------------------------------------------------------------------ state

    def busy_for(self) -> float:
        """Seconds the request in hand has been running (0: idle, or the channel is closed)."""
        if self._final is not None:
            return 0.0
        since = self._words[0]
        return max(0.0, (time.monotonic_ns() - since) / 1e9) if since else 0.0

    def stalled(self) -> bool:
        """The child's request in hand has run past ``stall_after``, or the channel is gone."""
        if self._broken:
            return True
        since = self._words[0]
        return since != 0 and time.monotonic_ns() - since > self._stall_ns

    def counts(self, slot: int) -> SlotCounts:
        """Final once the channel is closed (kept when the shared memory is let go)."""
        base = wire.HEADER_WORDS + wire.SLOT_WORDS * slot
        w = self._final if self._final is not None else self._words
        return SlotCounts(w[base], w[base + 1], w[base + 2], w[base + 3])

    def _release(self) -> None:
        """Keep the counts, let go of the shared memory (a cycle's 8 MiB ring must not
        outlive it). Under ``_lock``, once nothing will be sent any more."""
        if self._final is not None:
            return
        self._broken = True
        self._final = self._words.tolist()
        self._words.release()
        self._ring.release()
        self._mem.close()

    # ------------------------------------------------------------------ requests

    def send(self, op: int, ident: int, arg: int, parts: Sequence[Part], size: int) -> bool:
        """Queue one request without waiting on the file system. False: not sent, because
        the child stopped answering (no room in the ring while a request of its stays
        unfinished past ``stall_after``) or is gone."""
        need = wire.frame_bytes(size)
        ring_bytes = wire.RING_BYTES
        if need > ring_bytes // 2:
            return self._send_split(op, ident, arg, parts)
        with self._lock:
            if self._broken or self.stalled():
                return False
            pos = self._head % ring_bytes
            gap = ring_bytes - pos if ring_bytes - pos < need else 0
            if not self._room(gap + need):
                return False
            ring = self._ring
            if gap:
                if gap >= wire.REQ.size:
                    wire.REQ.pack_into(ring, pos, wire.OP_PAD, 0, 0, gap - wire.REQ.size)
                self._head += gap
                pos = 0
            wire.REQ.pack_into(ring, pos, op, ident, arg, size)
            at = pos + wire.REQ.size
            for part in parts:
                n = len(part)
                ring[at : at + n] = part
                at += n
            self._head += need
            return self._ring_doorbell()

    def _room(self, need: int) -> bool:
        """Wait until the ring has ``need`` bytes free; False when the child stopped
        answering (or is gone) first."""
        words = self._words
        while self._head + need - words[wire.TAIL_WORD] > wire.RING_BYTES:
            if self._broken or self.stalled():
                return False
            if self._unposted:
                self._ring_doorbell()
            time.sleep(_ROOM_WAIT_S)
        return True

    def _ring_doorbell(self) -> bool:
        try:
            os.write(self._req_w, _DOORBELL.pack(self._head))
        except BlockingIOError:
            self._unposted = True  # the child is behind: the next frame announces this one too
        except OSError:
            self._broken = True
            return False
        else:
            self._unposted = False
        return True

    def _send_split(self, op: int, ident: int, arg: int, parts: Sequence[Part]) -> bool:
        """An append too large for half the ring goes in pieces (lines torn only there)."""
        if op != wire.OP_APPEND:
            raise ValueError(f"scribe request of more than {wire.RING_BYTES // 2} bytes")
        data = b"".join(parts)
        piece = wire.RING_BYTES // 4
        ok = True
        for start in range(0, len(data), piece):
            chunk = data[start : start + piece]
            more = wire.RAW if arg & wire.RAW else chunk.count(b"\n")
            ok = self.send(op, ident, more, (chunk,), len(chunk)) and ok
        return ok

    def request(
        self,
        op: int,
        path: str,
        data: bytes = b"",
        arg: int = 0,
        *,
        timeout: float,
        abort: Callable[[], bool] | None = None,
    ) -> Reply:
        """An answered request about ``path``; raises :class:`Stalled` when no answer comes
        within ``timeout`` (or at once when the child already stopped answering), or as
        soon as ``abort`` turns true (a signal arrived: its bound comes first)."""
        ident = next(self._ids)
        encoded = os.fsencode(path)
        if op in (wire.OP_ATOMIC, wire.OP_ADDLINE):
            arg |= len(encoded)
        if not self.send(op, ident, arg, (encoded, data), len(encoded) + len(data)):
            raise Stalled(path)
        deadline = time.monotonic() + timeout
        with self._cond:
            while ident not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or (self._broken and not self._reader.is_alive()):
                    raise Stalled(path)
                if abort is not None and abort():
                    raise Stalled(path)
                self._cond.wait(min(left, _POLL_SLICE_S))
            return self._replies.pop(ident)

    def _read_replies(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._reply_r, 65536)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while len(buf) >= wire.REPLY.size:
                kind, ident, size = wire.REPLY.unpack_from(buf)
                if len(buf) < wire.REPLY.size + size:
                    break
                payload = buf[wire.REPLY.size : wire.REPLY.size + size]
                buf = buf[wire.REPLY.size + size :]
                if kind == wire.REPLY_EVENT:
                    with contextlib.suppress(Exception):
                        self._on_event(ident, payload.decode(errors="replace"))
                    continue
                with self._cond:
                    self._replies[ident] = Reply(kind, payload)
                    self._cond.notify_all()
        with contextlib.suppress(OSError):
            os.close(self._reply_r)
        with self._cond:
            self._broken = True
            self._cond.notify_all()

    # ------------------------------------------------------------------ the end

    def close(self, timeout: float) -> bool:
        """Let the child finish what it was sent, within ``timeout``, and end; True when it
        did. Otherwise it is sent SIGKILL and left behind (see :meth:`abandon`)."""
        deadline = time.monotonic() + timeout
        done = False
        if not self.stalled():
            try:
                reply = self.request(wire.OP_PING, "", timeout=timeout)
                done = reply.kind == wire.REPLY_OK
            except Stalled:
                done = False
        with self._lock:
            self._close_doorbell()
            if done:  # everything sent is done: the counts are final
                self._release()
        if done:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(max(0.05, deadline - time.monotonic()))
        if self._proc.poll() is None:
            self.abandon()
            return False
        with self._lock:
            self._release()
        with _PIDS_LOCK:
            _PIDS.discard(self._proc.pid)
        return done

    def _close_doorbell(self) -> None:
        """Nothing more is sent (under ``_lock``): the child ends once it has read the rest."""
        if self._req_w >= 0:
            with contextlib.suppress(OSError):
                os.close(self._req_w)
            self._req_w = -1
        self._broken = True

    def abandon(self) -> None:
        """SIGKILL and walk away: a child in state D cannot be reaped now; it ends once its
        mount answers or its server goes away. Never waited on."""
        self.abandoned = True
        with contextlib.suppress(OSError):
            self._proc.send_signal(signal.SIGKILL)
        with self._lock:
            self._close_doorbell()
            self._release()  # what the child still does is not counted: it is lost


def _spawn_child(name: str) -> tuple[subprocess.Popen[bytes], int, int, mmap.mmap]:
    """The child, its doorbell (the request pipe's end, ours), the reply pipe's end (ours)
    and the shared memory; the child holds the other ends and its own map."""
    req_r, req_w = os.pipe2(os.O_CLOEXEC)
    reply_r, reply_w = os.pipe2(os.O_CLOEXEC)
    shared = os.memfd_create(f"slurm-ft-{name}", os.MFD_CLOEXEC)
    try:
        os.ftruncate(shared, wire.MAP_BYTES)
        mem = mmap.mmap(shared, wire.MAP_BYTES)
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", CHILD_SCRIPT, str(req_r), str(reply_w), str(shared)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            pass_fds=(req_r, reply_w, shared),
            start_new_session=True,  # a terminal's ^C or a stop of the group is not for it
        )
    finally:
        for fd in (req_r, reply_w, shared):
            os.close(fd)
    return proc, req_w, reply_r, mem
