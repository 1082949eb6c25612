"""Exact accounting of the per-cycle application log with real workers and real pipes."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from slurm_ft.launch.hang.arrivals import ArrivalClock
from slurm_ft.launch.output.applog import cycle_log_path
from tests.integration.applog_support import (
    Workers,
    by_rank,
    marker,
    new_applog,
    read_events,
    workers,
)
from tests.integration.applog_writer import long_line, numbered_line, utf8_text

__all__ = ["marker", "workers"]  # fixtures used by name


@pytest.mark.timeout(240)
def test_four_ranks_100k_lines_each_exact(tmp_path: Path, workers: Workers) -> None:
    path = cycle_log_path(str(tmp_path / "job.log"), 0)
    log, _ = new_applog(path, tmp_path / "events.log")
    count = 100_000
    for rank in range(4):
        _, read_fd = workers.spawn_writer("lines", str(rank), str(count))
        log.attach(rank, rank, read_fd)
    assert workers.wait_all(180) == [0, 0, 0, 0]
    stats = log.close()

    content = path.read_bytes()
    ranks = by_rank(content)
    assert sorted(ranks) == [0, 1, 2, 3]
    for rank in range(4):
        expected = [numbered_line(rank, seq) for seq in range(count)]
        got = ranks[rank]
        assert len(got) == count, f"rank {rank}: {len(got)} lines"
        mismatch = next((i for i, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b), None)
        assert mismatch is None, f"rank {rank} line {mismatch}: {got[mismatch]!r} != {expected[mismatch]!r}"
    assert stats.lines == 4 * count
    assert stats.bytes == len(content)
    assert (stats.lost_lines, stats.lost_bytes, stats.split_lines, stats.abandoned_streams) == (0, 0, 0, 0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("read_size", [1, 5, 7, 4096])
def test_utf8_characters_across_every_read_boundary(tmp_path: Path, workers: Workers, read_size: int) -> None:
    text = utf8_text(3000)
    proc, read_fd = workers.spawn_writer("utf8", "3000")
    # The whole text sits in the pipe before reading starts, so every read returns exactly
    # read_size bytes and the boundaries are known.
    assert proc.wait(30) == 0
    inside = [pos for pos in range(read_size, len(text), read_size) if text[pos] & 0xC0 == 0x80]
    if read_size < 4096:
        assert len(inside) > len(text) // read_size // 2, "boundaries must fall inside characters"
    path = tmp_path / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log", read_size=read_size)
    log.attach(0, 0, read_fd)
    stats = log.close()
    content = path.read_bytes()
    assert content == b"0: " + text + b"\n"
    content.decode("utf-8")  # strict: no character was split
    assert stats.lines == 1


@pytest.mark.timeout(60)
def test_three_mib_line_split_with_continuation_marks(tmp_path: Path, workers: Workers) -> None:
    size = 3 * 1024 * 1024 + 12345
    big = long_line(size)
    _, read_fd = workers.spawn_writer("bigline", str(size))
    path = tmp_path / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log")
    log.attach(0, 0, read_fd)
    assert workers.wait_all() == [0]
    stats = log.close()
    records = path.read_bytes().split(b"\n")[:-1]
    assert records[0] == b"0: before"
    assert records[-1] == b"0: after"
    pieces = records[1:-1]
    assert len(pieces) == 4
    assert pieces[0].startswith(b"0: ") and all(p.startswith(b"0+ ") for p in pieces[1:])
    assert all(len(p) - 3 <= 1024 * 1024 for p in pieces)
    assert b"".join(p[3:] for p in pieces) == big
    for piece in pieces:
        piece[3:].decode("utf-8")  # pieces are cut between characters
    assert stats.split_lines == 1
    assert stats.lines == 6


@pytest.mark.timeout(60)
def test_three_mib_line_whole_under_a_larger_cap(tmp_path: Path, workers: Workers) -> None:
    size = 3 * 1024 * 1024
    _, read_fd = workers.spawn_writer("bigline", str(size))
    path = tmp_path / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log", line_cap=4 * 1024 * 1024)
    log.attach(0, 0, read_fd)
    assert workers.wait_all() == [0]
    stats = log.close()
    assert path.read_bytes() == b"0: before\n0: " + long_line(size) + b"\n0: after\n"
    assert stats.split_lines == 0


@pytest.mark.timeout(60)
def test_final_line_without_newline_gets_one(tmp_path: Path, workers: Workers) -> None:
    _, fd0 = workers.spawn_writer("raw", r"first\nno newline at end")
    _, fd1 = workers.spawn_writer("raw", r"only partial")
    path = tmp_path / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log")
    log.attach(0, 0, fd0)
    log.attach(1, 1, fd1)
    assert workers.wait_all() == [0, 0]
    log.close()
    assert by_rank(path.read_bytes()) == {0: [b"first", b"no newline at end"], 1: [b"only partial"]}


@pytest.mark.timeout(60)
def test_sigkill_right_after_a_write_loses_nothing(tmp_path: Path, workers: Workers) -> None:
    count = 30_000  # about 2 MB: more than the pipe holds, so the kill races the reader
    proc, read_fd = workers.spawn_writer("killself", str(count))
    path = tmp_path / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log")
    log.attach(0, 0, read_fd)
    assert proc.wait(30) == -signal.SIGKILL
    stats = log.close()
    assert by_rank(path.read_bytes()) == {0: [numbered_line(0, s) for s in range(count)]}
    assert stats.lost_lines == 0


@pytest.mark.timeout(60)
def test_crash_traceback_is_in_the_cycle_file(tmp_path: Path, workers: Workers) -> None:
    count = 40_000  # several MB before the traceback, so it is still in flight at exit
    _, read_fd = workers.spawn_writer("crash", str(count))
    path = tmp_path / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log")
    log.attach(0, 0, read_fd)
    assert workers.wait_all() == [1]
    log.close()  # right after the exit, as the launcher does
    lines = by_rank(path.read_bytes())[0]
    assert lines[:count] == [numbered_line(0, s) for s in range(count)]
    assert lines[count] == b"Traceback (most recent call last):"
    assert lines[-1] == b"RuntimeError: boom from the worker"


@pytest.mark.timeout(60)
def test_carriage_return_progress_stays_inside_its_line(tmp_path: Path, workers: Workers) -> None:
    _, fd0 = workers.spawn_writer("raw", r"step 10%\rstep 20%\rstep 30%\r\ndone\n")
    _, fd1 = workers.spawn_writer("raw", r"\r1/3\r2/3\r3/3")
    path = tmp_path / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log")
    log.attach(0, 0, fd0)
    log.attach(1, 1, fd1)
    assert workers.wait_all() == [0, 0]
    log.close()
    assert by_rank(path.read_bytes()) == {
        0: [b"step 10%\rstep 20%\rstep 30%\r", b"done"],
        1: [b"\r1/3\r2/3\r3/3"],
    }


@pytest.mark.timeout(60)
def test_raw_fd_and_c_level_output_is_captured(tmp_path: Path, workers: Workers) -> None:
    # A shell worker: output from separate programs (C code) and both fds, in write order.
    _, read_fd = workers.spawn(
        ["sh", "-c", "echo out1; echo err1 >&2; printf 'x%s\\n' 1 2; ls /nonexistent-applog-dir; printf tail"]
    )
    path = tmp_path / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log", rank_width=2)
    log.attach(11, 3, read_fd)
    workers.wait_all()
    log.close()
    lines = by_rank(path.read_bytes(), width=2)[11]
    assert lines[:4] == [b"out1", b"err1", b"x1", b"x2"]
    assert b"/nonexistent-applog-dir" in lines[4]
    assert lines[5] == b"tail"
    assert len(lines) == 6


@pytest.mark.timeout(30)
def test_events_say_nothing_when_all_goes_well(tmp_path: Path, workers: Workers) -> None:
    _, read_fd = workers.spawn_writer("raw", r"hello\n")
    path = tmp_path / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log")
    log.attach(0, 0, read_fd)
    workers.wait_all()
    log.close()
    assert path.read_bytes() == b"0: hello\n"
    assert read_events(tmp_path / "events.log") == []


@pytest.mark.timeout(60)
def test_every_chunk_read_is_timed_for_the_hang_watch(tmp_path: Path, workers: Workers) -> None:
    """The reader threads time the output as it arrives: a worker's pause between two
    lines is the clock's gap, to the reader's wake (no sampling period in it)."""
    clock = ArrivalClock()
    path = cycle_log_path(str(tmp_path / "job.log"), 0)
    log, _ = new_applog(path, tmp_path / "events.log", heard=clock.heard)
    script = "import time; print('a', flush=True); time.sleep(0.6); print('b', flush=True)"
    _, read_fd = workers.spawn([sys.executable, "-c", script])
    log.attach(0, 0, read_fd)
    assert workers.wait_all(30) == [0]
    log.close()
    heard = clock.take()
    assert heard is not None
    # the pause is 0.6 s; the reader's wake on "a" may come a few ms late on a loaded host
    # while its wake on "b" does not (measured once: 0.597 s), so the gap is the pause less
    # that lateness, never a sampling period (which would make it 0 or a whole period more)
    assert 0.5 <= heard.gap < 5.0, heard
    assert heard.last == pytest.approx(heard.gap_began + heard.gap)  # the pause was the last gap
    assert by_rank(path.read_bytes()) == {0: [b"a", b"b"]}
