"""The launcher event line format."""

from __future__ import annotations

import datetime

from slurm_ft.launch.output.eventlog import format_event


def test_event_line_format_is_utc_with_milliseconds() -> None:
    when = datetime.datetime(
        2026, 12, 2, 16, 40, 1, 123999, tzinfo=datetime.timezone(datetime.timedelta(hours=1))
    )
    assert format_event(when, "node1", "cycle 3 started") == (
        b"2026-12-02T15:40:01.123Z node1 slurm-ft-launch: cycle 3 started\n"
    )


def test_event_is_always_one_line() -> None:
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    line = format_event(when, "n", "worker failed:\nTraceback\r\n  boom")
    assert line.count(b"\n") == 1 and b"\r" not in line
    assert line.endswith(b"worker failed: | Traceback  |   boom\n")
