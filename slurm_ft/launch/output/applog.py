"""Worker pipes -> rank-prefixed whole lines -> one application log file per cycle.

One reader thread per worker pipe. Measured against one epoll thread serving all pipes
(benchmarks/applog_throughput.py, 4 workers, 2 cores): about 1.5x the throughput for about
30% less launcher CPU, because a thread that finds data reads it without a readiness call
first, and one pipe's read/write syscalls (which release the GIL) overlap with another's
prefixing. All threads write through one ``O_APPEND`` descriptor under one lock, so the
node's own writes are sequential as well.

Per chunk the data is copied three times, the least this design allows: pipe -> one
``os.read`` of up to the whole pipe (1 MiB, so a busy pipe costs one read, one framing and
one write per MiB, and a thread holds the GIL for few, long C calls), one ``bytes.replace``
that adds the prefixes, and one ``writev`` of the framer's pieces (prefix, pending partial
line, a view of the replaced chunk) into the file, never joined in user space first.

Line integrity in the shared cycle file: every write is one ``writev`` of whole lines on
an ``O_APPEND`` descriptor. On local file systems (ext4, xfs, tmpfs) Linux appends a single
write or writev under the inode lock, so another node's (another process's) write lands
before or after it, never inside. A short write only happens when the disk fills up, the
file size limit is hit or a signal interrupts: the rest is then written by a second write,
which may land after another node's write; the line stays in the file but may be torn,
which is the price of not losing it, and it happens only together with the loud disk-full
report. NFS clients do not append atomically at all, hence ``--applog-per-node``.

Nothing is dropped on the way in: a worker's pipe is read until end of stream, also after
the worker exited (crash tracebacks arrive last). Only a pipe kept open by a grandchild is
abandoned, after ``drain_timeout``, and only after reading what it already holds.

The console echo (``tee``) runs on its own thread behind a bounded queue, so a console that
does not read (a stopped terminal, a stalled srun) costs echo lines, never log lines.

torchrun's ``--redirects``/``--tee`` (see ``streams.py``): a worker whose streams have
per-rank files gets one pipe per stream (:meth:`AppLog.attach_worker`); its reader copies
the raw bytes to the rank's file before framing them for the cycle log, and echoes a
stderr stream on the launcher's stderr. The cycle log is fed exactly as before.
"""

from __future__ import annotations

import collections
import fcntl
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft.launch.output import streams as streams_mod
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.output.framing import LineFramer, Part
from slurm_ft.launch.output.scribed import ScribedFile, on_child_event
from slurm_ft.launch.output.tracebacks import StreamTail, last_traceback
from slurm_ft.logline import NOTE_MARK, rank_prefix
from slurm_ft.records import Failure
from slurm_ft.settingsyntax import check_applog_prefix

if TYPE_CHECKING:
    from slurm_ft.config import AppLogSettings
    from slurm_ft.scribe import Scribe

DEFAULT_PIPE_SIZE = 1024 * 1024
# One read takes what a full pipe holds: fewer, longer calls (see the module docstring).
DEFAULT_READ_SIZE = DEFAULT_PIPE_SIZE
# Linux accepts 1024 pieces per writev; more (many long-line pieces) are joined first.
MAX_WRITE_PARTS = 1024
DEFAULT_TEE_QUEUE_BYTES = 16 * 1024 * 1024
DEFAULT_STALL_AFTER = 10.0
# Linux: fcntl.F_SETPIPE_SZ exists from Python 3.10; keep the number for older builds.
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def cycle_log_path(prefix: str, cycle: int, node_rank: int | None = None) -> Path:
    """``/abs/job.log`` + cycle 3 -> ``/abs/job_cycle3.log`` (``.node<K>`` before the suffix).

    The cycle number is the global one (continuing across requeues), so a file is never
    reused; the prefix follows :func:`slurm_ft.settingsyntax.check_applog_prefix`.
    """
    try:
        check_applog_prefix(prefix)
    except ValueError as exc:
        raise ValueError(f"applog prefix {exc}") from None
    if cycle < 0:
        raise ValueError(f"cycle must be >= 0, got {cycle}")
    base = Path(prefix)
    node = f".node{node_rank}" if node_rank is not None else ""
    return base.with_name(f"{base.stem}_cycle{cycle}{node}{base.suffix}")


def output_note(applog: AppLogSettings, cycle: int, failure: Failure) -> str:
    """Where a failed rank's output is, for the failure's event line: the cycle log (that
    node's, with one per node); empty without a cycle log or a rank."""
    if failure.rank is None or not applog.prefix:
        return ""
    path = cycle_log_path(applog.prefix, cycle, failure.node_rank if applog.per_node else None)
    return f" (its output: {path})"


def _os_error(exc: OSError, path: Path) -> str:
    """The error, naming the path it concerns when that is not the log file itself."""
    text = exc.strerror or str(exc)
    if exc.filename is not None and str(exc.filename) != str(path):
        text += f" ({exc.filename})"
    return text


def open_worker_pipe(size: int = DEFAULT_PIPE_SIZE) -> tuple[int, int]:
    """A close-on-exec pipe for one worker's stdout+stderr: ``(read_fd, write_fd)``.

    Give ``write_fd`` to the worker as both stdout and stderr (``Popen(stdout=w,
    stderr=w)``) and close it in the launcher right after the spawn, or end of stream never
    arrives. The buffer is enlarged (best effort) so a worker rarely waits on a full pipe.
    """
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    try:
        fcntl.fcntl(write_fd, F_SETPIPE_SZ, size)
    except OSError:
        pass
    return read_fd, write_fd


@dataclass
class AppLogStats:
    """Counts for one cycle file. ``lines``/``bytes`` are what reached the file (the
    console when there is no file), prefixes included; ``lost_*`` could not be written."""

    lines: int = 0
    bytes: int = 0
    lost_lines: int = 0
    lost_bytes: int = 0
    split_lines: int = 0
    abandoned_streams: int = 0
    tee_dropped_lines: int = 0
    peak_pending_bytes: int = 0
    rank_file_lost_bytes: int = 0


class _RankFile:
    """torchrun's per-rank file of one stream: raw bytes, appended; loud once on failure."""

    def __init__(self, path: Path, events: EventLog) -> None:
        self.path = path
        self.events = events
        self.lost_bytes = 0
        self._fd: int | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            self._report(f"cannot open per-rank log {path}: {_os_error(exc, path)}")

    def _report(self, text: str) -> None:
        if not self.lost_bytes:
            self.events.event(
                f"ERROR: {text}; this stream's output is missing from that file (the cycle log has it)"
            )

    def write(self, data: bytes) -> None:
        if self._fd is None:
            self.lost_bytes += len(data)
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self._report(f"cannot write per-rank log {self.path}: {exc.strerror or exc}")
            self.lost_bytes += len(view)

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError as exc:
                self.events.event(f"ERROR: closing per-rank log {self.path}: {exc.strerror or exc}")
            self._fd = None


@dataclass
class _Stream:
    """One worker pipe being read: its framer, its tee and what it has held back."""

    global_rank: int
    local_rank: int
    fd: int
    framer: LineFramer
    tee: _Tee | None
    rank_file: _RankFile | ScribedFile | None = None
    peak_pending: int = 0
    abandoned: bool = False
    # The end of this stream, where a crash's traceback is (see tracebacks.py), complete
    # once ``ended`` is set: the reader has seen the end of the stream.
    tail: StreamTail = field(default_factory=StreamTail)
    ended: threading.Event = field(default_factory=threading.Event)


class _Tee:
    """Console echo behind a bounded queue; drops (and counts) rather than block the log."""

    def __init__(self, fd: int, limit: int, events: EventLog) -> None:
        self.fd = fd
        self.limit = limit
        self.events = events
        self.dropped_lines = 0
        self._unreported_drops = 0
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._closing = False
        self._failed = False
        self._thread = threading.Thread(target=self._run, name="applog-tee", daemon=True)
        self._thread.start()

    def put(self, data: bytes, lines: int) -> None:
        with self._cond:
            if self._failed:
                return
            if self._queued + len(data) > self.limit:
                if not self.dropped_lines:
                    self.events.event(
                        "console echo cannot keep up; skipping echo lines (the cycle log has them)"
                    )
                self.dropped_lines += lines
                self._unreported_drops += lines
                return
            if self._unreported_drops:
                note = (
                    f"slurm-ft-launch: console echo skipped {self._unreported_drops} lines "
                    "(console too slow); the cycle log has them\n"
                ).encode()
                self._queue.append(note)
                self._queued += len(note)
                self._unreported_drops = 0
            self._queue.append(data)
            self._queued += len(data)
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                data = self._queue.popleft()
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self.fd, view) :]
            except OSError as exc:
                with self._cond:
                    self._failed = True
                    self._queue.clear()
                    self._queued = 0
                self.events.event(f"console echo stopped: {exc.strerror or exc}")
                return
            with self._cond:
                self._queued -= len(data)

    def close(self, timeout: float) -> None:
        """Flush what is queued within ``timeout``; a console that does not read loses it."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)
        with self._cond:
            if self._thread.is_alive():
                left = sum(chunk.count(b"\n") for chunk in self._queue)
                self.dropped_lines += left
                self._queue.clear()
                self._queued = 0
            if self._unreported_drops and not self._thread.is_alive():
                note = f"slurm-ft-launch: console echo skipped {self._unreported_drops} lines\n".encode()
                try:
                    os.write(self.fd, note)
                except OSError:
                    pass
                self._unreported_drops = 0


class CycleFile:
    """The cycle file's writing side: whole-line appends, loss accounting, one report of
    a failure and one of the recovery. Shared by every reader thread of the cycle."""

    def __init__(self, path: Path | None, stats: AppLogStats, events: EventLog) -> None:
        self.path = path
        self.stats = stats
        self.events = events
        self._fd: int | None = None
        # Guards the file descriptor, the failure state and the counters. Held across
        # os.write (which releases the GIL), so other readers keep framing meanwhile.
        self._write_lock = threading.Lock()
        self._write_failed = False
        self._loss_reported = False
        self._torn = False
        if path is not None:
            self._open(path)

    def _open(self, path: Path) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            self._write_failed = True
            self._loss_reported = True
            self.events.event(
                f"ERROR: cannot open application log {path}: {_os_error(exc, path)}; "
                "workers keep running, their output is NOT logged (lost lines are counted)"
            )

    def write(self, data: bytes, lines: int) -> None:
        """Append whole lines in one write; on failure count the loss and keep going."""
        self.write_parts((data,), len(data), lines)

    def write_parts(self, parts: Sequence[Part], size: int, lines: int) -> None:
        """Append ``parts`` (whole lines, ``size`` bytes in all) with one ``writev``; the
        rest of a short write follows in plain writes. On failure count the loss and keep
        going."""
        if not size:
            return
        with self._write_lock:
            if self._fd is None:
                if self.path is None:
                    self.stats.bytes += size
                    self.stats.lines += lines
                else:
                    self.stats.lost_bytes += size
                    self.stats.lost_lines += lines
                return
            # After a failed write left a partial line at the end of the file, end it first
            # so that the next record starts on a line of its own.
            lead = b"\n" if self._torn else b""
            pieces = [lead, *parts] if lead else parts
            if len(pieces) > MAX_WRITE_PARTS:
                pieces = [b"".join(pieces)]
            total = len(lead) + size
            done = 0
            try:
                done = os.writev(self._fd, pieces)
                if done < total:
                    buf = b"".join(pieces)
                    view = memoryview(buf)
                    while done < total:
                        done += os.write(self._fd, view[done:])
            except OSError as exc:
                self._count_failure(b"".join(parts), lead, done, exc)
                return
            self._torn = False
            self.stats.bytes += size
            self.stats.lines += lines
            if self._write_failed:
                self._write_failed = False
                self.events.event(
                    f"application log {self.path} is writable again; "
                    f"{self.stats.lost_lines} lines ({self.stats.lost_bytes} bytes) were lost so far"
                )

    def _count_failure(self, data: bytes, lead: bytes, done: int, exc: OSError) -> None:
        if done:
            self._torn = (lead + data)[done - 1] != 0x0A
        kept = max(0, done - len(lead))
        self.stats.bytes += kept
        self.stats.lines += data.count(b"\n", 0, kept)
        self.stats.lost_bytes += len(data) - kept
        self.stats.lost_lines += data.count(b"\n", kept)
        if not self._loss_reported:
            self._loss_reported = True
            self.events.event(
                f"ERROR: cannot write application log {self.path}: {exc.strerror or exc}; "
                "workers keep running; lost lines are counted and reported when the cycle ends"
            )
        self._write_failed = True

    def close(self) -> None:
        with self._write_lock:
            if self._fd is not None:
                try:
                    os.close(self._fd)
                except OSError as exc:
                    self.events.event(f"ERROR: closing application log {self.path}: {exc.strerror or exc}")
                self._fd = None


class AppLog:
    """Captures the output of a node's workers for one cycle; see the module docstring."""

    def __init__(
        self,
        path: Path | None,
        *,
        rank_width: int,
        line_cap: int,
        drain_timeout: float,
        tee: bool,
        tee_local_ranks: frozenset[int] | None,
        events: EventLog,
        tee_stream_fd: int = 1,
        tee_err_fd: int = 2,
        read_size: int = DEFAULT_READ_SIZE,
        tee_queue_bytes: int = DEFAULT_TEE_QUEUE_BYTES,
        stall_after: float = DEFAULT_STALL_AFTER,
        scribe: bool | None = None,
        heard: Callable[[], None] | None = None,
    ) -> None:
        """``scribe``: write the files through a scribe child (see ``scribed.py``); None:
        for files off local disks (``slurm_ft.health.storage.off_local_disk``). ``stall_after``: a
        write of that child unfinished for this long means its mount stopped answering.
        ``heard``: called by a reader thread for every chunk it read (the hang watch times
        the workers' output there: ``launch/arrivals.py``)."""
        self.path = path
        self.rank_width = rank_width
        self.line_cap = line_cap
        self.drain_timeout = drain_timeout
        self.tee_local_ranks = tee_local_ranks
        self.events = events
        self.read_size = read_size
        self.stats = AppLogStats()
        self._tee_enabled = tee
        self._tee_fds = {"stdout": tee_stream_fd, "stderr": tee_err_fd}
        self._tee_queue_bytes = tee_queue_bytes
        self._tees: dict[int, _Tee] = {}
        self._threads: list[threading.Thread] = []
        self._streams: list[_Stream] = []
        self._deadline: float | None = None
        self._closed = False
        # Readable once close() was called: wakes readers waiting on a quiet pipe.
        self._closing_r, self._closing_w = os.pipe2(os.O_CLOEXEC)
        self.stall_after = stall_after
        self._heard = heard
        self._use_scribe = scribe
        self._scribe: Scribe | None = None
        self._scribed: dict[int, ScribedFile] = {}
        self._file: CycleFile | ScribedFile = (
            self._scribed_file(path, raw=False)
            if path is not None and self._needs_scribe(path)
            else CycleFile(path, self.stats, events)
        )
        self._write = self._file.write_parts

    def _needs_scribe(self, path: Path) -> bool:
        if self._use_scribe is not None:
            return self._use_scribe
        from slurm_ft.health.storage import off_local_disk

        return off_local_disk(path.parent)

    def _scribed_file(self, path: Path, *, raw: bool) -> ScribedFile:
        """A file written by this cycle's scribe child, started with the first such file."""
        if self._scribe is None:
            from slurm_ft.scribe import Scribe

            self._scribe = Scribe(
                "applog", stall_after=self.stall_after, on_event=on_child_event(self.events, self._scribed)
            )
        f = ScribedFile(self._scribe, len(self._scribed), path, self.events, raw=raw)
        self._scribed[f.slot] = f
        return f

    def _rank_file(self, path: Path) -> _RankFile | ScribedFile:
        return (
            self._scribed_file(path, raw=True)
            if self._needs_scribe(path.parent)
            else _RankFile(path, self.events)
        )

    def _settle_scribe(self) -> None:
        """Let the scribe write what it holds (within ``stall_after``; at once when it has
        stopped answering), then count: what it never wrote is lost."""
        if self._scribe is None:
            return
        self._scribe.close(0.0 if self._scribe.stalled() else self.stall_after)
        if isinstance(self._file, ScribedFile):
            written_bytes, written_lines, lost_bytes, lost_lines = self._file.lost()
            self.stats.bytes += written_bytes
            self.stats.lines += written_lines
            self.stats.lost_bytes += lost_bytes
            self.stats.lost_lines += lost_lines

    def _emit(self, stream: _Stream, parts: Sequence[Part], lines: int) -> None:
        size = sum(map(len, parts))
        if not size:
            return
        self._write(parts, size, lines)
        if stream.tee is not None:
            stream.tee.put(b"".join(parts), lines)

    def _echo_to(self, kind: str) -> _Tee:
        fd = self._tee_fds["stderr" if kind == "stderr" else "stdout"]
        if fd not in self._tees:
            self._tees[fd] = _Tee(fd, self._tee_queue_bytes, self.events)
        return self._tees[fd]

    def note(self, global_rank: int, text: str) -> None:
        """Launcher notes about a rank (the stacks of a hang), one marked line per line of
        ``text``, appended whole like every other line."""
        prefix = rank_prefix(global_rank, self.rank_width, NOTE_MARK)
        lines = text.rstrip("\n").split("\n")
        self._file.write(
            b"".join(prefix + line.encode(errors="replace") + b"\n" for line in lines), len(lines)
        )

    # -- reader side -------------------------------------------------------------------

    def attach(
        self,
        global_rank: int,
        local_rank: int,
        read_fd: int,
        *,
        kind: str = "both",
        echo: bool | None = None,
        rank_file: Path | None = None,
    ) -> None:
        """Take ownership of ``read_fd``, the read end of one worker's pipe: stdout+stderr
        (``kind`` "both"), or one of them ("stdout", "stderr"; echoed to the same stream
        of the launcher). ``echo`` None: the ``tee``/``tee_local_ranks`` rule.
        ``rank_file``: also copy the raw bytes there."""
        if self._closed:
            raise RuntimeError("AppLog.attach after close")
        os.set_blocking(read_fd, False)
        if echo is None:
            echo = self._tee_enabled and (self.tee_local_ranks is None or local_rank in self.tee_local_ranks)
        stream = _Stream(
            global_rank,
            local_rank,
            read_fd,
            LineFramer(global_rank, self.rank_width, self.line_cap),
            self._echo_to(kind) if echo else None,
            self._rank_file(rank_file) if rank_file is not None else None,
        )
        thread = threading.Thread(
            target=self._reader, args=(stream,), name=f"applog-rank{global_rank}", daemon=True
        )
        self._threads.append(thread)
        self._streams.append(stream)
        thread.start()

    def _reader(self, stream: _Stream) -> None:
        """Read one pipe to end of stream; after close(), at most until the deadline.

        Reads first and waits only on an empty pipe, so a busy pipe costs one syscall per
        chunk (see the module docstring for why one thread per pipe).
        """
        poller = select.poll()
        poller.register(stream.fd, select.POLLIN)
        poller.register(self._closing_r, select.POLLIN)
        closing_seen = False
        framer = stream.framer
        heard = self._heard
        try:
            while True:
                try:
                    data = os.read(stream.fd, self.read_size)
                except BlockingIOError:
                    deadline = self._deadline
                    if deadline is None:
                        poller.poll()
                        continue
                    if not closing_seen:
                        closing_seen = True
                        poller.unregister(self._closing_r)
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._abandon(stream)
                        return
                    poller.poll(max(1, int(left * 1000)))
                    continue
                except OSError:
                    data = b""
                if not data:
                    self._end(stream)
                    return
                if heard is not None:
                    heard()
                if stream.rank_file is not None:
                    stream.rank_file.write(data)
                stream.tail.feed(data)
                self._emit(stream, *framer.feed_parts(data))
                pending = framer.pending_bytes
                if pending > stream.peak_pending:
                    stream.peak_pending = pending
                if self._deadline is not None and time.monotonic() >= self._deadline:
                    # Still busy at the deadline: a grandchild keeps writing.
                    self._abandon(stream)
                    return
        finally:
            os.close(stream.fd)
            if stream.rank_file is not None:
                stream.rank_file.close()
            stream.ended.set()

    def last_traceback(self, global_rank: int, wait: float) -> str | None:
        """The last Python traceback ``global_rank`` wrote, or None. Call once the worker
        exited: waits up to ``wait`` seconds for its pipes to end (a crash's traceback is
        the last thing it writes, and its end of stream follows the exit at once)."""
        deadline = time.monotonic() + wait
        found = None
        for stream in self._streams:
            if stream.global_rank != global_rank:
                continue
            stream.ended.wait(max(0.0, deadline - time.monotonic()))
            found = last_traceback(stream.tail.data()) or found
        return found

    def _end(self, stream: _Stream, note: str | None = None) -> None:
        data, lines = stream.framer.finish()
        self._emit(stream, (data,), lines)
        if note is not None:
            self._emit(stream, (stream.framer.note(note),), 1)

    def _abandon(self, stream: _Stream) -> None:
        """Write what the pipe already holds (bounded), then give up on it unless that
        reached end of stream after all."""
        budget = 4 * DEFAULT_PIPE_SIZE
        while budget > 0:
            try:
                data = os.read(stream.fd, self.read_size)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self._end(stream)
                return
            budget -= len(data)
            if stream.rank_file is not None:
                stream.rank_file.write(data)
            stream.tail.feed(data)
            self._emit(stream, *stream.framer.feed_parts(data))
        stream.abandoned = True
        message = (
            f"slurm-ft-launch: output of rank {stream.global_rank} still open {self.drain_timeout:g} s "
            "after the workers exited (a process the worker started holds it); "
            "stopped reading, later output of this rank is not in this log"
        )
        self.events.event(message)
        self._end(stream, note=message)

    def attach_worker(
        self,
        global_rank: int,
        local_rank: int,
        output: streams_mod.WorkerOutput,
        rank_dir: Path | None,
    ) -> tuple[int | None, int | None]:
        """Open and attach the pipes ``output`` asks for; return the write ends to give the
        worker as (stdout, stderr). None: the worker inherits the launcher's stream. The
        same fd twice: one pipe for both. The caller closes each distinct fd right after
        the spawn (end of stream never arrives otherwise). ``rank_dir`` is
        :func:`streams.rank_dir` of this worker, required when a route has a rank file."""

        def file_for(route: streams_mod.Route, name: str) -> Path | None:
            if not route.rank_file:
                return None
            if rank_dir is None:
                raise ValueError("a per-rank file is routed but no rank_dir was given")
            return rank_dir / name

        if not output.split:
            if not output.out.pipe:
                return None, None
            r, w = open_worker_pipe()
            self.attach(global_rank, local_rank, r, kind="both", echo=output.out.echo)
            return w, w
        fds: list[int | None] = []
        for kind, route, name in (
            ("stdout", output.out, streams_mod.STDOUT_FILE),
            ("stderr", output.err, streams_mod.STDERR_FILE),
        ):
            if not route.pipe:
                fds.append(None)
                continue
            r, w = open_worker_pipe()
            self.attach(
                global_rank, local_rank, r, kind=kind, echo=route.echo, rank_file=file_for(route, name)
            )
            fds.append(w)
        return fds[0], fds[1]

    def close(self) -> AppLogStats:
        """Drain every pipe to end of stream (bounded by ``drain_timeout`` for pipes held
        open by a grandchild), then close the file. Call after the workers exited."""
        if self._closed:
            return self.stats
        self._closed = True
        self._deadline = time.monotonic() + self.drain_timeout
        os.close(self._closing_w)  # wakes every reader waiting on a quiet pipe
        for thread in self._threads:
            thread.join()
        os.close(self._closing_r)
        self._settle_scribe()
        for stream in self._streams:
            self.stats.split_lines += stream.framer.split_lines
            self.stats.abandoned_streams += stream.abandoned
            self.stats.peak_pending_bytes = max(self.stats.peak_pending_bytes, stream.peak_pending)
            if stream.rank_file is not None:
                self.stats.rank_file_lost_bytes += stream.rank_file.lost_bytes
        for tee in self._tees.values():
            tee.close(self.drain_timeout)
            self.stats.tee_dropped_lines += tee.dropped_lines
        self._file.close()
        if self.stats.lost_lines or self.stats.lost_bytes:
            self.events.event(
                f"ERROR: application log {self.path}: {self.stats.lost_lines} lines "
                f"({self.stats.lost_bytes} bytes) could not be written this cycle"
            )
        return self.stats
