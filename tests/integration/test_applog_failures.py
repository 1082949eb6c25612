"""A full disk or an unwritable log directory: loud once, workers unharmed, losses counted."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.applog_support import Workers, by_rank, marker, new_applog, read_events, workers
from tests.integration.applog_writer import numbered_line

__all__ = ["marker", "workers"]


@pytest.mark.timeout(60)
def test_dev_full_reports_once_and_counts_every_lost_line(tmp_path: Path, workers: Workers) -> None:
    count = 20_000
    log, _ = new_applog(Path("/dev/full"), tmp_path / "events.log")
    _, read_fd = workers.spawn_writer("lines", "0", str(count))
    log.attach(0, 0, read_fd)
    assert workers.wait_all() == [0]
    stats = log.close()
    assert (stats.lines, stats.lost_lines) == (0, count)
    events = read_events(tmp_path / "events.log")
    assert len(events) == 2, events
    assert "ERROR: cannot write application log /dev/full: No space left on device" in events[0]
    assert f"ERROR: application log /dev/full: {count} lines" in events[1]


@pytest.mark.timeout(60)
def test_unwritable_log_directory_keeps_workers_running(tmp_path: Path, workers: Workers) -> None:
    (tmp_path / "not-a-dir").write_text("a file where the log directory should be")
    path = tmp_path / "not-a-dir" / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log")
    count = 5000
    _, read_fd = workers.spawn_writer("lines", "0", str(count))
    log.attach(0, 0, read_fd)
    assert workers.wait_all() == [0]
    stats = log.close()
    assert stats.lost_lines == count and stats.lines == 0
    events = read_events(tmp_path / "events.log")
    assert len(events) == 2, events
    assert f"ERROR: cannot open application log {path}: File exists ({path.parent})" in events[0]
    assert "workers keep running" in events[0]
    assert f"{count} lines" in events[1]


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)


@pytest.mark.timeout(60)
def test_disk_filling_up_mid_cycle(tmp_path: Path, workers: Workers, small_tmpfs: Path) -> None:
    count = 40_000  # about 3 MB into a 1 MiB file system
    path = small_tmpfs / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log")
    for rank in range(2):
        _, read_fd = workers.spawn_writer("lines", str(rank), str(count))
        log.attach(rank, rank, read_fd)
    assert workers.wait_all() == [0, 0]
    stats = log.close()
    assert stats.lost_lines > 0
    assert stats.lines + stats.lost_lines == 2 * count
    content = path.read_bytes()
    assert stats.bytes == len(content)
    # What did reach the file is whole lines, in order, each at most once.
    records = content.split(b"\n")
    torn_tail = records.pop()  # a write cut short by the full disk may leave a partial line
    assert len(torn_tail) < 200
    ranks = by_rank(b"\n".join(records) + b"\n") if records else {}
    for rank, lines in ranks.items():
        expected = {numbered_line(rank, s): s for s in range(count)}
        seqs = [expected[line] for line in lines]
        assert seqs == sorted(set(seqs))
    assert sum(map(len, ranks.values())) == stats.lines
    events = read_events(tmp_path / "events.log")
    assert sum("cannot write application log" in e for e in events) == 1, events
    assert "No space left on device" in events[0]
