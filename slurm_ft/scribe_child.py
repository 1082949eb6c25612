"""Child-process side of :mod:`slurm_ft.scribe`: the writes that may meet a dead mount.

Run as ``python -I -S scribe_child.py REQ_FD REPLY_FD SHARED_FD`` by ``scribe.py``.
A write into a dead NFS, Lustre or FUSE mount sleeps in the kernel, and after SIGKILL in
state D, until the server answers; a process with one thread there cannot finish exiting.
So the launcher never makes such a write itself: this process does, and the launcher can
walk away from it. Standard library only (``-I -S`` leaves the package off ``sys.path``).

Requests arrive as frames (header ``REQ``, then ``size`` bytes, 8-byte aligned) in a ring
in the shared memory on SHARED_FD; the launcher copies them there and writes how far the
ring is filled (8 bytes, a position that only grows) to REQ_FD, the doorbell. An append is
written to its file straight from the ring, so the hand-over costs the launcher one copy
into memory and this process no copy at all. Appends are fire-and-forget: what reached a
file and what was lost is counted per slot in the shared memory, which the launcher reads
without asking; how far this process got in the ring is there too. Atomic writes, reads and
listings are answered on REPLY_FD; errors worth a launcher event are sent there too. The
shared header also says since when the current request has been running, which is how
the launcher tells a slow file system from one that stopped answering.

End of REQ_FD (the launcher closed it, exited or was killed) ends this process once the
frames announced before it are done.
"""

from __future__ import annotations

import errno
import mmap
import os
import signal
import struct
import sys
import time
from collections.abc import Callable

REQ = struct.Struct("<IIQQ")  # op, slot or request id, argument, payload size
REPLY = struct.Struct("<IIQ")  # kind, request id, payload size

OP_OPEN = 1  # slot; payload: path. Open for appending (parents made).
OP_APPEND = 2  # slot; argument: lines | RAW; payload: whole lines (RAW: any bytes)
OP_CLOSE = 3  # slot
OP_ATOMIC = 4  # id; argument: len(path) | BACKUP; payload: path + data. Answered.
OP_READ = 5  # id; argument: 0 | the last N bytes; payload: path. Answered with them (ENOENT: REPLY_MISSING).
OP_LIST = 6  # id; payload: directory. Answered with the names, one per line.
OP_MKDIRS = 7  # id; payload: path. Answered.
OP_UNLINK = 8  # id; payload: path. Answered (a missing file is fine).
OP_PING = 9  # id. Answered: everything sent before it is done.
OP_ADDLINE = 10  # id; argument: len(path); payload: path + one whole line, appended. Answered.

RAW = 1 << 63
MAX_PARTS = 512  # per writev (Linux takes 1024)
BACKUP = 1 << 62
PATH_MASK = (1 << 32) - 1

REPLY_OK = 1
REPLY_ERROR = 2  # payload: the error text
REPLY_MISSING = 3
REPLY_EVENT = 4  # payload: a line for the launcher's log (id: the slot)

OP_PAD = 0  # the rest of the ring up to its end is unused; the next frame is at its start

# Shared memory, as unsigned 64-bit words: [0] monotonic ns since the request in hand
# started (0: idle), [1] requests done, [2] how far this process got in the ring (bytes,
# only grows), then per slot: written bytes, written lines, lost bytes, lost lines. The
# ring follows at RING_OFFSET.
HEADER_WORDS = 4
TAIL_WORD = 2
SLOT_WORDS = 4
SLOTS = 1024
SHARED_BYTES = 8 * (HEADER_WORDS + SLOT_WORDS * SLOTS)
RING_OFFSET = 64 * 1024
RING_BYTES = 8 * 1024 * 1024
MAP_BYTES = RING_OFFSET + RING_BYTES


def frame_bytes(size: int) -> int:
    """A frame's room in the ring: header and payload, rounded up to 8 bytes."""
    return (REQ.size + size + 7) & ~7


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


class Child:
    def __init__(self, req_fd: int, reply_fd: int, shared: mmap.mmap) -> None:
        self.req_fd = req_fd
        self.reply_fd = reply_fd
        self.words = memoryview(shared)[:SHARED_BYTES].cast("Q")
        self.ring = memoryview(shared)[RING_OFFSET:MAP_BYTES]
        self.files: dict[int, int] = {}
        self.paths: dict[int, str] = {}
        self.failed: set[int] = set()  # reported once; a later success says so
        self.torn: set[int] = set()

    # -- channel ------------------------------------------------------------------

    def reply(self, kind: int, ident: int, payload: bytes = b"") -> None:
        data = REPLY.pack(kind, ident, len(payload)) + payload
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.reply_fd, view) :]
        except OSError:
            pass  # the launcher is gone: nothing to tell

    def event(self, slot: int, text: str) -> None:
        self.reply(REPLY_EVENT, slot, text.encode(errors="replace"))

    def count(self, slot: int, field: int, value: int) -> None:
        if 0 <= slot < SLOTS and value:
            i = HEADER_WORDS + SLOT_WORDS * slot
            self.words[i + field] = self.words[i + field] + value

    # -- requests -----------------------------------------------------------------

    def serve(self) -> int:
        """Wait for the doorbell, then do every frame announced so far; consecutive appends
        to one file become one ``writev`` (whole lines still, fewer calls)."""
        tail = 0
        posted = 0
        while True:
            try:
                ring_at = os.read(self.req_fd, 65536)
            except InterruptedError:
                continue
            if not ring_at:
                return 0  # the launcher closed the channel
            posted = max(posted, int.from_bytes(ring_at[-8:], "little"))
            tail = self.run_ring(tail, posted)

    def run_ring(self, tail: int, head: int) -> int:
        """Do the frames between ``tail`` and ``head`` (ring positions); return the new tail."""
        ring = self.ring
        words = self.words
        words[0] = time.monotonic_ns() or 1
        try:
            while tail < head:
                pos = tail % RING_BYTES
                if RING_BYTES - pos < REQ.size:
                    tail += RING_BYTES - pos
                    continue
                op, ident, arg, size = REQ.unpack_from(ring, pos)
                if op == OP_PAD:
                    tail += REQ.size + size
                    continue
                if op != OP_APPEND:
                    self.handle(op, ident, arg, ring[pos + REQ.size : pos + REQ.size + size])
                    tail += frame_bytes(size)
                    words[1] = words[1] + 1
                    words[TAIL_WORD] = tail
                    continue
                parts: list[memoryview] = []
                lines = 0
                while tail < head and len(parts) < MAX_PARTS:
                    pos = tail % RING_BYTES
                    if RING_BYTES - pos < REQ.size:
                        break
                    more_op, more_ident, more, size = REQ.unpack_from(ring, pos)
                    if (more_op, more_ident) != (OP_APPEND, ident) or (more & RAW) != (arg & RAW):
                        break
                    parts.append(ring[pos + REQ.size : pos + REQ.size + size])
                    lines += 0 if more & RAW else more
                    tail += frame_bytes(size)
                self.append(ident, bool(arg & RAW), lines, parts)
                words[1] = words[1] + len(parts)
                words[TAIL_WORD] = tail  # only now: the launcher may reuse the room
        finally:
            words[TAIL_WORD] = tail
            words[0] = 0
        return tail

    def handle(self, op: int, ident: int, arg: int, body: memoryview) -> None:
        if op == OP_OPEN:
            self.open(ident, bytes(body).decode(errors="surrogateescape"))
        elif op == OP_CLOSE:
            fd = self.files.pop(ident, None)
            if fd is not None:
                try:
                    os.close(fd)
                except OSError as exc:
                    self.event(ident, f"ERROR: closing {self.paths.get(ident)}: {_why(exc)}")
        elif op == OP_ATOMIC:
            n = arg & PATH_MASK
            path = bytes(body[:n]).decode(errors="surrogateescape")
            self.answer(ident, lambda: atomic_write(path, bytes(body[n:]), keep_backup=bool(arg & BACKUP)))
        elif op == OP_READ:
            self.read(ident, bytes(body).decode(errors="surrogateescape"), arg)
        elif op == OP_LIST:
            path = bytes(body).decode(errors="surrogateescape")
            self.answer(ident, lambda: "\n".join(os.listdir(path)).encode(errors="surrogateescape"))
        elif op == OP_MKDIRS:
            path = bytes(body).decode(errors="surrogateescape")
            self.answer(ident, lambda: os.makedirs(path, exist_ok=True))
        elif op == OP_UNLINK:
            self.answer(ident, lambda: unlink(bytes(body).decode(errors="surrogateescape")))
        elif op == OP_ADDLINE:
            n = arg & PATH_MASK
            path = bytes(body[:n]).decode(errors="surrogateescape")
            self.answer(ident, lambda: add_line(path, bytes(body[n:])))
        elif op == OP_PING:
            self.reply(REPLY_OK, ident)

    def answer(self, ident: int, work: Callable[[], bytes | None]) -> None:
        try:
            out = work()
        except FileNotFoundError:
            self.reply(REPLY_MISSING, ident)
            return
        except OSError as exc:
            self.reply(REPLY_ERROR, ident, _why(exc).encode())
            return
        self.reply(REPLY_OK, ident, out if isinstance(out, bytes) else b"")

    def read(self, ident: int, path: str, tail: int = 0) -> None:
        def work() -> bytes:
            return read_file(path, tail)

        self.answer(ident, work)

    def open(self, slot: int, path: str) -> None:
        self.paths[slot] = path
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self.files[slot] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            self.failed.add(slot)
            self.event(slot, f"cannot open {path}: {_why(exc)}")

    def append(self, slot: int, raw: bool, lines: int, parts: list[memoryview]) -> None:
        """One ``writev`` of whole lines (``raw``: any bytes), the rest of a short write in
        plain writes; a failure is counted (and said once), as the in-process writer does."""
        size = sum(len(p) for p in parts)
        fd = self.files.get(slot)
        if fd is None:
            self.count(slot, 2, size)
            self.count(slot, 3, lines)
            return
        lead = [memoryview(b"\n")] if slot in self.torn else []
        pieces = lead + parts
        total = len(lead) + size
        done = 0
        try:
            done = os.writev(fd, pieces)
            if done < total:
                rest = b"".join(pieces)
                while done < total:
                    done += os.write(fd, memoryview(rest)[done:])
        except OSError as exc:
            data = b"".join(parts)
            kept = max(0, done - len(lead))
            if done and not raw and (b"\n" + data[:kept])[-1:] != b"\n":
                self.torn.add(slot)
            self.count(slot, 0, kept)
            self.count(slot, 2, size - kept)
            if not raw:
                kept_lines = data.count(b"\n", 0, kept)
                self.count(slot, 1, kept_lines)
                self.count(slot, 3, lines - kept_lines)
            if slot not in self.failed:
                self.failed.add(slot)
                self.event(slot, f"cannot write {self.paths.get(slot)}: {_why(exc)}")
            return
        self.torn.discard(slot)
        self.count(slot, 0, size)
        self.count(slot, 1, lines)
        if slot in self.failed:
            self.failed.discard(slot)
            self.event(slot, f"writable again: {self.paths.get(slot)}")


def read_file(path: str, tail: int = 0) -> bytes:
    """The file's bytes, or only its last ``tail`` (0: all): a reader of a log that only
    grows (the snapshot readings) needs its end, not the hours of lines before it."""
    with open(path, "rb") as fh:
        if tail > 0:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - tail))
        return fh.read()


def add_line(path: str, line: bytes) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def atomic_write(path: str, data: bytes, *, keep_backup: bool) -> None:
    """``atomicfile.write_bytes`` in this process: temp file, fsync, optional ``.bak``
    link, rename, fsync of the directory."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    name = os.path.basename(path)
    fd, tmp = -1, ""
    for _ in range(100):
        tmp = os.path.join(directory, f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            break
        except FileExistsError:
            continue
    else:
        raise OSError(errno.EEXIST, f"no free temporary name in {directory}")
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        if keep_backup and os.path.exists(path):
            staging = os.path.join(directory, f".{name}.bak.{os.getpid()}")
            unlink(staging)
            os.link(path, staging)
            os.replace(staging, path + ".bak")
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        unlink(tmp)
        raise
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print("usage: scribe_child.py REQ_FD REPLY_FD SHARED_FD", file=sys.stderr)
        return 2
    req_fd, reply_fd, shared_fd = (int(a) for a in argv[1:])
    # The launcher decides when this process ends (end of REQ_FD); a job's SIGTERM (a
    # preemption, the time limit) comes before the launcher writes its last records.
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGPIPE"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    shared = mmap.mmap(shared_fd, MAP_BYTES)
    os.close(shared_fd)
    return Child(req_fd, reply_fd, shared).serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
