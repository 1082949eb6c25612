"""NodeWatch samples its workers' writes at the watch's pace: a look that comes a hair
before a full period since the last one still reads /proc (else a job-wide silence is
seen one period late, by chance)."""

from __future__ import annotations

import os

from slurm_ft.config import HangSettings
from slurm_ft.launch import hang


def test_every_look_about_a_period_apart_sees_the_latest_write(tmp_path):
    limits = hang.Limits.from_settings(HangSettings(timeout=2.0))
    assert limits.period == 0.2
    now = [100.0]
    watch = hang.NodeWatch(limits, clock=lambda: now[0])
    watch.begin(0, {0: os.getpid()}, {})
    out = tmp_path / "written"
    for _ in range(10):
        now[0] += limits.period - 0.0005  # the poll's whole milliseconds, less loop time
        with open(out, "ab", buffering=0) as fh:
            fh.write(b"x")  # this process is the "worker": its wchar moves
        assert watch.quiet() == 0.0
    watch.end()


def test_looks_in_quick_succession_read_proc_at_most_twice_a_period(tmp_path, monkeypatch):
    limits = hang.Limits.from_settings(HangSettings(timeout=2.0))
    reads = []
    monkeypatch.setattr(hang, "bytes_written", lambda pid: reads.append(pid) or 0)
    now = [0.0]
    watch = hang.NodeWatch(limits, clock=lambda: now[0])
    watch.begin(0, {0: 1234}, {})
    reads.clear()
    for _ in range(100):  # a loop woken every millisecond for a tenth of a second
        now[0] += 0.001
        watch.quiet()
    assert len(reads) <= 1
    watch.end()
