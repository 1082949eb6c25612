"""Child-process side of :mod:`slurm_ft.scribe`: the writes that may meet a dead mount.

Run as ``python -I -S scribe_child.py REQ_FD REPLY_FD SHARED_FD`` by ``scribe.py``.
A write into a dead NFS, Lustre or FUSE mount sleeps in the kernel, and after SIGKILL in
state D, until the server answers; a process with one thread there cannot finish exiting.
So the launcher never makes such a write itself: this process does, and the launcher can
walk away from it. Standard library only (``-I -S`` leaves the package off ``sys.path``).

Requests arrive on REQ_FD as frames (header ``REQ``, then ``size`` bytes). Appends are
fire-and-forget: what reached a file and what was lost is counted per slot in the shared
memory on SHARED_FD, which the launcher reads without asking. Atomic writes, reads and
listings are answered on REPLY_FD; errors worth a launcher event are sent there too. The
shared header also says since when the current request has been running, which is how
the launcher tells a slow file system from one that stopped answering.

End of REQ_FD (the launcher closed it, exited or was killed) ends this process after the
request in hand; a frame cut short by the launcher giving up is dropped.
"""

from __future__ import annotations

import errno
import mmap
import os
import signal
import struct
import sys
import time

REQ = struct.Struct("<IIQQ")  # op, slot or request id, argument, payload size
REPLY = struct.Struct("<IIQ")  # kind, request id, payload size

OP_OPEN = 1  # slot; payload: path. Open for appending (parents made).
OP_APPEND = 2  # slot; argument: lines | RAW; payload: whole lines (RAW: any bytes)
OP_CLOSE = 3  # slot
OP_ATOMIC = 4  # id; argument: len(path) | BACKUP; payload: path + data. Answered.
OP_READ = 5  # id; payload: path. Answered with the bytes (ENOENT: REPLY_MISSING).
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

# Shared memory, as unsigned 64-bit words: [0] monotonic ns since the request in hand
# started (0: idle), [1] requests done, then per slot: written bytes, written lines,
# lost bytes, lost lines.
HEADER_WORDS = 2
SLOT_WORDS = 4
SLOTS = 1024
SHARED_BYTES = 8 * (HEADER_WORDS + SLOT_WORDS * SLOTS)


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


class Child:
    def __init__(self, req_fd: int, reply_fd: int, shared: memoryview) -> None:
        self.req_fd = req_fd
        self.reply_fd = reply_fd
        self.words = shared
        self.files: dict[int, int] = {}
        self.paths: dict[int, str] = {}
        self.failed: set[int] = set()  # reported once; a later success says so
        self.torn: set[int] = set()
        self.buf = bytearray(4 << 20)

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
        """Read as much as the pipe holds, then do every whole request in it; consecutive
        appends to one file become one ``writev`` (whole lines still, fewer calls)."""
        buf = self.buf
        start = end = 0
        while True:
            need = REQ.size
            if end - start >= REQ.size:
                need = REQ.size + REQ.unpack_from(buf, start)[3]
            if end - start < need:
                if need > len(buf) - start:
                    if need > len(buf):
                        grown = bytearray(max(need, 2 * len(buf)))
                        grown[: end - start] = buf[start:end]
                        buf = self.buf = grown
                    else:
                        buf[: end - start] = buf[start:end]
                    end -= start
                    start = 0
                try:
                    got = os.readv(self.req_fd, [memoryview(buf)[end:]])
                except InterruptedError:
                    continue
                if got == 0:
                    return 0  # the launcher closed the channel (a frame cut short is dropped)
                end += got
                continue
            start = self.run_batch(memoryview(buf), start, end)
            if start == end:
                start = end = 0

    def run_batch(self, view: memoryview, start: int, end: int) -> int:
        """Do the whole requests in ``view[start:end]``; return where the rest begins."""
        self.words[0] = time.monotonic_ns() or 1
        try:
            while end - start >= REQ.size:
                op, ident, arg, size = REQ.unpack_from(view, start)
                if end - start < REQ.size + size:
                    break
                if op != OP_APPEND:
                    self.handle(op, ident, arg, view[start + REQ.size : start + REQ.size + size])
                    start += REQ.size + size
                    self.words[1] = self.words[1] + 1
                    continue
                parts: list[memoryview] = []
                lines = 0
                while (
                    end - start >= REQ.size
                    and len(parts) < MAX_PARTS
                    and REQ.unpack_from(view, start)[:2] == (OP_APPEND, ident)
                ):
                    _, _, more, size = REQ.unpack_from(view, start)
                    if end - start < REQ.size + size or (more & RAW) != (arg & RAW):
                        break
                    parts.append(view[start + REQ.size : start + REQ.size + size])
                    lines += 0 if more & RAW else more
                    start += REQ.size + size
                self.append(ident, bool(arg & RAW), lines, parts)
                self.words[1] = self.words[1] + len(parts)
        finally:
            self.words[0] = 0
        return start

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
            self.read(ident, bytes(body).decode(errors="surrogateescape"))
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

    def answer(self, ident: int, work: object) -> None:
        try:
            out = work()  # type: ignore[operator]
        except FileNotFoundError:
            self.reply(REPLY_MISSING, ident)
            return
        except OSError as exc:
            self.reply(REPLY_ERROR, ident, _why(exc).encode())
            return
        self.reply(REPLY_OK, ident, out if isinstance(out, bytes) else b"")

    def read(self, ident: int, path: str) -> None:
        def work() -> bytes:
            with open(path, "rb") as fh:
                return fh.read()

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
    shared = mmap.mmap(shared_fd, SHARED_BYTES)
    os.close(shared_fd)
    return Child(req_fd, reply_fd, memoryview(shared).cast("Q")).serve()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
