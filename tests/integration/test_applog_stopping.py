"""Stopping a cycle: drain to end of stream, bounded wait for grandchildren; console echo."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from slurm_ft.launch.output.applog import DEFAULT_PIPE_SIZE, F_SETPIPE_SZ, open_worker_pipe
from slurm_ft.logline import rank_width
from tests.integration.applog_support import (
    Workers,
    by_rank,
    marker,
    new_applog,
    read_events,
    wait_for_file_bytes,
    workers,
)
from tests.integration.applog_writer import numbered_line
from tests.support.procs import pids_with_marker
from tests.support.waiting import wait_until

__all__ = ["marker", "workers"]

F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)


@pytest.mark.timeout(60)
def test_grandchild_holding_the_pipe_is_given_up_after_the_drain_timeout(
    tmp_path: Path, workers: Workers, marker: str
) -> None:
    proc, read_fd = workers.spawn_writer("grandchild")
    path = tmp_path / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log", drain_timeout=0.5)
    log.attach(0, 0, read_fd)
    assert proc.wait(30) == 0
    wait_for_file_bytes(path, b"grandchild up\n")
    grandchildren = wait_until(lambda: pids_with_marker(marker), 10, message="the grandchild")
    started = time.monotonic()
    stats = log.close()
    took = time.monotonic() - started
    try:
        assert 0.5 <= took < 5.0
        assert stats.abandoned_streams == 1
        records = path.read_bytes().split(b"\n")[:-1]
        assert sorted(records[:2]) == [b"0: grandchild up", b"0: worker done"]
        assert len(records) == 3
        assert records[2].startswith(b"0! slurm-ft-launch: output of rank 0 still open 0.5 s")
        events = read_events(tmp_path / "events.log")
        assert len(events) == 1 and "output of rank 0 still open" in events[0]
    finally:
        for pid in grandchildren:
            os.kill(pid, 9)
        wait_until(lambda: not pids_with_marker(marker), 10, message="grandchild gone")


class PipeConsole:
    """A console the test controls: a pipe whose reading can be withheld."""

    def __init__(self, size: int = 65536) -> None:
        self.read_fd, self.write_fd = os.pipe2(os.O_CLOEXEC)
        fcntl.fcntl(self.write_fd, F_SETPIPE_SZ, size)
        self.data = bytearray()
        self._thread: threading.Thread | None = None

    def start_reading(self) -> None:
        def pump() -> None:
            while chunk := os.read(self.read_fd, 65536):
                self.data += chunk

        self._thread = threading.Thread(target=pump, daemon=True)
        self._thread.start()

    def close(self) -> bytes:
        os.close(self.write_fd)
        if self._thread is None:
            self.start_reading()
        assert self._thread is not None
        self._thread.join(10)
        os.close(self.read_fd)
        return bytes(self.data)


@pytest.mark.timeout(60)
def test_tee_echoes_only_the_filtered_local_ranks(tmp_path: Path, workers: Workers) -> None:
    console = PipeConsole()
    console.start_reading()
    path = tmp_path / "job_cycle0.log"
    log, _ = new_applog(
        path,
        tmp_path / "events.log",
        rank_width=rank_width(16),
        tee=True,
        tee_local_ranks=frozenset({0, 3}),
        tee_stream_fd=console.write_fd,
    )
    count = 2000
    for local in range(4):
        _, read_fd = workers.spawn_writer("lines", str(8 + local), str(count))
        log.attach(8 + local, local, read_fd)
    assert workers.wait_all() == [0, 0, 0, 0]
    stats = log.close()
    echoed = by_rank(console.close(), width=2)
    assert sorted(echoed) == [8, 11]
    for rank in (8, 11):
        assert echoed[rank] == [numbered_line(rank, s) for s in range(count)]
    in_file = by_rank(path.read_bytes(), width=2)
    assert sorted(in_file) == [8, 9, 10, 11]
    assert stats.tee_dropped_lines == 0


@pytest.mark.timeout(60)
def test_tee_without_a_file_prefixes_to_the_console(tmp_path: Path, workers: Workers) -> None:
    console = PipeConsole()
    console.start_reading()
    log, _ = new_applog(
        None, tmp_path / "events.log", tee=True, tee_local_ranks=None, tee_stream_fd=console.write_fd
    )
    _, read_fd = workers.spawn_writer("raw", r"a\nb")
    log.attach(0, 0, read_fd)
    workers.wait_all()
    stats = log.close()
    assert console.close() == b"0: a\n0: b\n"
    assert (stats.lines, stats.lost_lines) == (2, 0)


@pytest.mark.timeout(60)
def test_a_console_that_does_not_read_never_blocks_the_log(tmp_path: Path, workers: Workers) -> None:
    console = PipeConsole(size=4096)  # nobody reads it until the end
    path = tmp_path / "job_cycle0.log"
    log, _ = new_applog(
        path,
        tmp_path / "events.log",
        tee=True,
        tee_local_ranks=None,
        tee_stream_fd=console.write_fd,
        tee_queue_bytes=256 * 1024,
        drain_timeout=1.0,
    )
    count = 50_000
    _, read_fd = workers.spawn_writer("lines", "0", str(count))
    log.attach(0, 0, read_fd)
    assert workers.wait_all(60) == [0]
    started = time.monotonic()
    stats = log.close()
    assert time.monotonic() - started < 5.0
    assert by_rank(path.read_bytes()) == {0: [numbered_line(0, s) for s in range(count)]}
    assert stats.lost_lines == 0
    assert stats.tee_dropped_lines > 0
    echoed = console.close()
    assert len(echoed) < len(path.read_bytes())
    events = read_events(tmp_path / "events.log")
    assert sum("console echo cannot keep up" in e for e in events) == 1


@pytest.mark.timeout(30)
def test_worker_pipes_get_a_large_buffer() -> None:
    """A slow log write must not stall a worker at once: it can run ahead by the buffer."""
    read_fd, write_fd = open_worker_pipe()
    try:
        size = fcntl.fcntl(write_fd, F_GETPIPE_SZ)
        limit = int(Path("/proc/sys/fs/pipe-max-size").read_text())
        assert size >= min(DEFAULT_PIPE_SIZE, limit)
        assert os.get_inheritable(read_fd) is False and os.get_inheritable(write_fd) is False
    finally:
        os.close(read_fd)
        os.close(write_fd)
