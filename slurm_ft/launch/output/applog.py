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

The cycle file's writing side and its line integrity: ``cyclefile.py``; the files
themselves, local or through a scribe child: ``logfiles.py``; one rank's stream and what
is kept of it (its per-rank file, its tail for tracebacks, its counts): ``rankstream.py``.

Nothing is dropped on the way in: a worker's pipe is read until end of stream, also after
the worker exited (crash tracebacks arrive last). Only a pipe kept open by a grandchild is
abandoned, after ``drain_timeout``, and only after reading what it already holds.

The console echo (``tee``) runs on its own thread behind a bounded queue (``echo.py``).

torchrun's ``--redirects``/``--tee`` (see ``streams.py``): a worker whose streams have
per-rank files gets one pipe per stream (:meth:`AppLog.attach_worker`); its reader copies
the raw bytes to the rank's file before framing them for the cycle log, and echoes a
stderr stream on the launcher's stderr. The cycle log is fed exactly as before.
"""

from __future__ import annotations

import fcntl
import os
import select
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft.launch.output import streams as streams_mod
from slurm_ft.launch.output.cyclefile import AppLogStats
from slurm_ft.launch.output.echo import DEFAULT_TEE_QUEUE_BYTES, Echoes
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.output.framing import LineFramer, Part
from slurm_ft.launch.output.logfiles import DEFAULT_STALL_AFTER, LogFiles
from slurm_ft.launch.output.rankstream import RankStream, count_streams, rank_traceback
from slurm_ft.logline import NOTE_MARK, rank_prefix
from slurm_ft.records import Failure
from slurm_ft.settingsyntax import check_applog_prefix

if TYPE_CHECKING:
    from slurm_ft.config import AppLogSettings

DEFAULT_PIPE_SIZE = 1024 * 1024
# One read takes what a full pipe holds: fewer, longer calls (see the module docstring).
DEFAULT_READ_SIZE = DEFAULT_PIPE_SIZE
# Linux: fcntl.F_SETPIPE_SZ exists from Python 3.10; keep the number for older builds.
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def cycle_log_path(prefix: str, cycle: int, node_rank: int | None = None) -> Path:
    """``/abs/job.log`` + cycle 3 -> ``/abs/job_cycle3.log``; one node's:
    ``/abs/job_node<K>/job_cycle3.node<K>.log``.

    The cycle number is the global one (continuing across requeues), so a file is never
    reused; the prefix follows :func:`slurm_ft.settingsyntax.check_applog_prefix`. A node's
    files go into a directory of its own, made at its first cycle: a cycle of 4,096 nodes
    then adds one file to each of 4,096 directories, not 4,096 to one, whose lock a shared
    file system would take for each create (#45). The name still says the node.
    """
    try:
        check_applog_prefix(prefix)
    except ValueError as exc:
        raise ValueError(f"applog prefix {exc}") from None
    if cycle < 0:
        raise ValueError(f"cycle must be >= 0, got {cycle}")
    base = Path(prefix)
    if node_rank is None:
        return base.with_name(f"{base.stem}_cycle{cycle}{base.suffix}")
    own = base.with_name(f"{base.stem}_node{node_rank}")
    return own / f"{base.stem}_cycle{cycle}.node{node_rank}{base.suffix}"


def output_note(applog: AppLogSettings, cycle: int, failure: Failure) -> str:
    """Where a failed rank's output is, for the failure's event line: the cycle log (that
    node's, with one per node); empty without a cycle log or a rank."""
    if failure.rank is None or not applog.prefix:
        return ""
    path = cycle_log_path(applog.prefix, cycle, failure.node_rank if applog.per_node else None)
    return f" (its output: {path})"


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
        the workers' output there: ``launch/hang/arrivals.py``)."""
        self.path = path
        self.rank_width = rank_width
        self.line_cap = line_cap
        self.drain_timeout = drain_timeout
        self.tee_local_ranks = tee_local_ranks
        self.events = events
        self.read_size = read_size
        self.stats = AppLogStats()
        self._tee_enabled = tee
        self._echoes = Echoes(tee_stream_fd, tee_err_fd, tee_queue_bytes, events)
        self._threads: list[threading.Thread] = []
        self._streams: list[RankStream] = []
        self._deadline: float | None = None
        self._closed = False
        # Readable once close() was called: wakes readers waiting on a quiet pipe.
        self._closing_r, self._closing_w = os.pipe2(os.O_CLOEXEC)
        self._heard = heard
        self._files = LogFiles(events, self.stats, scribe, stall_after)
        self._file = self._files.cycle_file(path)
        self._write = self._file.write_parts

    def _emit(self, stream: RankStream, parts: Sequence[Part], lines: int) -> None:
        size = sum(map(len, parts))
        if not size:
            return
        self._write(parts, size, lines)
        if stream.tee is not None:
            stream.tee.put(b"".join(parts), lines)

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
        stream = RankStream(
            global_rank,
            local_rank,
            read_fd,
            LineFramer(global_rank, self.rank_width, self.line_cap),
            self._echoes.to(kind) if echo else None,
            self._files.rank_file(rank_file) if rank_file is not None else None,
        )
        thread = threading.Thread(
            target=self._reader, args=(stream,), name=f"applog-rank{global_rank}", daemon=True
        )
        self._threads.append(thread)
        self._streams.append(stream)
        thread.start()

    def _reader(self, stream: RankStream) -> None:
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
        """The last Python traceback ``global_rank`` wrote (:func:`rankstream.rank_traceback`)."""
        return rank_traceback(self._streams, global_rank, wait)

    def _end(self, stream: RankStream, note: str | None = None) -> None:
        data, lines = stream.framer.finish()
        self._emit(stream, (data,), lines)
        if note is not None:
            self._emit(stream, (stream.framer.note(note),), 1)

    def _abandon(self, stream: RankStream) -> None:
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
            rank_file = streams_mod.rank_file_path(route, name, rank_dir)
            self.attach(global_rank, local_rank, r, kind=kind, echo=route.echo, rank_file=rank_file)
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
        self._files.settle(self._file)
        count_streams(self._streams, self.stats)
        self.stats.tee_dropped_lines += self._echoes.close(self.drain_timeout)
        self._file.close()
        if self.stats.lost_lines or self.stats.lost_bytes:
            self.events.event(
                f"ERROR: application log {self.path}: {self.stats.lost_lines} lines "
                f"({self.stats.lost_bytes} bytes) could not be written this cycle"
            )
        return self.stats
