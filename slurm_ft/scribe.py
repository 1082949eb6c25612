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

Appends (cycle logs, per-rank files, the launcher log) are one-way: a frame into a pipe,
no answer; what reached each file is counted by the child in shared memory. Atomic writes
and reads of the state dir are answered, each against a deadline. A stall is a request
that has been running for longer than ``stall_after`` (the child stamps the start of each
request in the shared memory), so a slow but answering file system is not taken for a
dead one. Files on local disks need none of this (see :func:`needs_scribe`): the launcher
writes them itself, as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import mmap
import os
import select
import signal
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
PIPE_BYTES = 1024 * 1024
MAX_WRITE_PARTS = 1024
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_POLL_SLICE_S = 0.1
# The children of this process that are scribes: the orphan sweep leaves them alone.
_PIDS: set[int] = set()
_PIDS_LOCK = threading.Lock()

Part: TypeAlias = bytes | bytearray | memoryview


def leave_alone() -> frozenset[int]:
    """Scribe children, live or abandoned: a sweep of the launcher's children must not wait
    for them (an abandoned one may sit in state D until its mount answers)."""
    with _PIDS_LOCK:
        return frozenset(_PIDS)


def needs_scribe(path: str | os.PathLike[str], proc_root: str = "/proc") -> bool:
    """False when ``path`` (which need not exist yet) is reached through local disk file
    systems only, by the rule the health check uses to probe a path in-process; True for
    network, FUSE and unknown file systems, and whenever that cannot be told safely."""
    from slurm_ft.health import storage

    return not storage.on_local_disk(os.path.abspath(os.fspath(path)), storage.read_mounts(proc_root))


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
        req_r, self._req_w = os.pipe2(os.O_CLOEXEC)
        self._reply_r, reply_w = os.pipe2(os.O_CLOEXEC)
        shared = os.memfd_create(f"slurm-ft-{name}", os.MFD_CLOEXEC)
        with contextlib.suppress(OSError):
            fcntl.fcntl(self._req_w, F_SETPIPE_SZ, PIPE_BYTES)
        try:
            os.ftruncate(shared, wire.SHARED_BYTES)
            self._mem = mmap.mmap(shared, wire.SHARED_BYTES)
            self._words = memoryview(self._mem).cast("Q")
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", CHILD_SCRIPT, str(req_r), str(reply_w), str(shared)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(req_r, reply_w, shared),
                start_new_session=True,  # a terminal's ^C or a stop of the group is not for it
            )
        finally:
            for fd in (req_r, reply_w, shared):
                os.close(fd)
        with _PIDS_LOCK:
            _PIDS.add(self._proc.pid)
        os.set_blocking(self._req_w, False)
        self._reader = threading.Thread(target=self._read_replies, name=f"scribe-{name}", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    # ------------------------------------------------------------------ state

    def busy_for(self) -> float:
        """Seconds the request in hand has been running (0: idle)."""
        since = self._words[0]
        return max(0.0, (time.monotonic_ns() - since) / 1e9) if since else 0.0

    def stalled(self) -> bool:
        """The child's request in hand has run past ``stall_after``, or the channel is gone."""
        if self._broken:
            return True
        since = self._words[0]
        return since != 0 and time.monotonic_ns() - since > self._stall_ns

    def counts(self, slot: int) -> SlotCounts:
        base = wire.HEADER_WORDS + wire.SLOT_WORDS * slot
        w = self._words
        return SlotCounts(w[base], w[base + 1], w[base + 2], w[base + 3])

    # ------------------------------------------------------------------ requests

    def send(self, op: int, ident: int, arg: int, parts: Sequence[Part], size: int) -> bool:
        """Queue one request without waiting on the file system. False: not sent, because
        the child stopped answering (a full pipe for longer than ``stall_after`` while a
        request of its stays unfinished) or is gone."""
        header = wire.REQ.pack(op, ident, arg, size)
        total = wire.REQ.size + size
        with self._lock:
            if self._broken or self.stalled():
                return False
            pieces: list[Part] = [header, *parts]
            if len(pieces) > MAX_WRITE_PARTS:
                pieces = [header, b"".join(parts)]
            try:
                done = os.writev(self._req_w, pieces)
            except BlockingIOError:
                done = 0
            except OSError:
                self._broken = True
                return False
            if done == total:
                return True
            return self._finish_frame(b"".join(pieces), done)

    def _finish_frame(self, frame: bytes, done: int) -> bool:
        """The slow path: the pipe is full. Wait for room while the child makes progress."""
        view = memoryview(frame)
        poller = select.poll()
        poller.register(self._req_w, select.POLLOUT)
        while done < len(frame):
            if self.stalled() or self._proc.poll() is not None:
                if done:
                    self._break()  # half a frame in the pipe: this channel carries nothing more
                return False
            poller.poll(int(_POLL_SLICE_S * 1000))
            try:
                done += os.write(self._req_w, view[done:])
            except BlockingIOError:
                continue
            except OSError:
                self._broken = True
                return False
        return True

    def _break(self) -> None:
        self._broken = True
        with contextlib.suppress(OSError):
            os.close(self._req_w)
        self._req_w = -1

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
            if self._req_w >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._req_w)
                self._req_w = -1
                self._broken = True
        if done:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(max(0.05, deadline - time.monotonic()))
        if self._proc.poll() is None:
            self.abandon()
            return False
        with _PIDS_LOCK:
            _PIDS.discard(self._proc.pid)
        return done

    def abandon(self) -> None:
        """SIGKILL and walk away: a child in state D cannot be reaped now; it ends once its
        mount answers or its server goes away. Never waited on."""
        self.abandoned = True
        with contextlib.suppress(OSError):
            self._proc.send_signal(signal.SIGKILL)
        with self._lock:
            if self._req_w >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._req_w)
                self._req_w = -1
            self._broken = True
