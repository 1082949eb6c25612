"""The cycle log written by a scribe child (a log off local disks), on a local file: the
same whole lines, in order, byte-exact, counted exactly, as the in-process writer's."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_ft import scribe
from tests.integration.applog_support import Workers, by_rank, marker, new_applog, read_events, workers
from tests.integration.applog_writer import numbered_line

__all__ = ["marker", "workers"]


@pytest.mark.timeout(120)
def test_two_writers_through_the_scribe_keep_every_line_in_order(tmp_path: Path, workers: Workers) -> None:
    count = 30_000
    path = tmp_path / "job_cycle0.log"
    before = scribe.leave_alone()
    log, _ = new_applog(path, tmp_path / "events.log", scribe=True)
    assert len(scribe.leave_alone() - before) == 1  # the cycle's scribe child
    for rank in range(2):
        _, read_fd = workers.spawn_writer("lines", str(rank), str(count))
        log.attach(rank, rank, read_fd)
    assert workers.wait_all() == [0, 0]
    stats = log.close()
    assert scribe.leave_alone() == before  # it ended with the cycle
    assert (stats.lines, stats.lost_lines, stats.lost_bytes) == (2 * count, 0, 0)
    content = path.read_bytes()
    assert stats.bytes == len(content)
    lines = by_rank(content)
    for rank in range(2):
        assert lines[rank] == [numbered_line(rank, seq) for seq in range(count)]
    assert read_events(tmp_path / "events.log") == []


@pytest.mark.timeout(60)
def test_an_unwritable_file_through_the_scribe_is_counted_and_said(tmp_path: Path, workers: Workers) -> None:
    (tmp_path / "not-a-dir").write_text("a file where the log directory should be")
    path = tmp_path / "not-a-dir" / "job_cycle0.log"
    log, _ = new_applog(path, tmp_path / "events.log", scribe=True)
    count = 2000
    _, read_fd = workers.spawn_writer("lines", "0", str(count))
    log.attach(0, 0, read_fd)
    assert workers.wait_all() == [0]
    stats = log.close()
    assert (stats.lines, stats.lost_lines) == (0, count)
    events = read_events(tmp_path / "events.log")
    assert any(f"cannot open {path}" in e and "workers keep running" in e for e in events), events
    assert f"{count} lines" in events[-1]
