"""The cycle file's writing side on a real file: pieces in, whole lines out, in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_ft.launch.output.cyclefile import MAX_WRITE_PARTS, AppLogStats, CycleFile
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.output.framing import LineFramer


def cycle_file(tmp_path: Path) -> tuple[CycleFile, AppLogStats, Path]:
    stats = AppLogStats()
    path = tmp_path / "job_cycle0.log"
    return CycleFile(path, stats, EventLog(tmp_path / "events.log", "node0", quiet=True)), stats, path


@pytest.mark.timeout(30)
def test_more_pieces_than_one_writev_takes_land_whole_and_in_order(tmp_path: Path) -> None:
    # A long line under a small cap is framed into one piece per cap bytes: far more
    # pieces than a writev accepts.
    framer = LineFramer(3, 1, 8)
    line = bytes(range(97, 123)) * 400 + b"\n"
    parts, lines = framer.feed_parts(line)
    assert len(parts) > MAX_WRITE_PARTS
    log, stats, path = cycle_file(tmp_path)
    log.write_parts(parts, sum(map(len, parts)), lines)
    log.close()
    content = path.read_bytes()
    assert content == b"".join(parts)
    assert b"".join(r[3:] for r in content.split(b"\n")[:-1]) == line[:-1]
    assert (stats.lines, stats.bytes, stats.lost_lines) == (lines, len(content), 0)


@pytest.mark.timeout(30)
def test_pieces_of_consecutive_chunks_append_byte_exact(tmp_path: Path) -> None:
    framer = LineFramer(0, 1, 1024)
    stream = b"".join(b"line %d " % i + b"x" * (i % 37) + b"\n" for i in range(5000)) + b"tail"
    log, stats, path = cycle_file(tmp_path)
    for start in range(0, len(stream), 7001):  # chunk ends fall inside lines
        parts, lines = framer.feed_parts(stream[start : start + 7001])
        log.write_parts(parts, sum(map(len, parts)), lines)
    log.write(*framer.finish())
    log.close()
    expected = b"".join(b"0: " + line + b"\n" for line in stream.split(b"\n"))
    assert path.read_bytes() == expected
    assert (stats.lines, stats.bytes) == (5001, len(expected))
