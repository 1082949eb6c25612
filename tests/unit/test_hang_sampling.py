"""NodeWatch samples its workers' writes at the watch's pace: a look that comes a hair
before a full period since the last one still reads /proc (else a job-wide silence is
seen one period late, by chance). On node 0, while it learns, the peer monitor's wakes
take the fine samples and the loop keeps its fixed period; the gaps are learned as finely."""

from __future__ import annotations

import os
from pathlib import Path

from slurm_ft.config import HangSettings
from slurm_ft.launch import hang, hanglearn
from slurm_ft.launch.rendezvous import background
from slurm_ft.launch.rendezvous import protocol as proto
from slurm_ft.launch.rendezvous.client import Client
from tests.support.waiting import wait_until


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


def _write(out: Path) -> None:
    with open(out, "ab", buffering=0) as fh:
        fh.write(b"x")  # this process is the "worker": its wchar moves


def _busy_trainer_learned(tmp_path: Path, by_sampler: bool) -> hanglearn.Rhythm:
    """A trainer writing every second for a minute after the warm-up, node 0's loop looking
    every 5 s, the peer monitor calling every second; the gaps as the judge learns them."""
    limits = hang.Limits.from_settings(HangSettings())
    policy = limits.learn_silence
    now = [1000.0]
    watch = hang.NodeWatch(limits, clock=lambda: now[0])
    watch.begin(0, {0: os.getpid()}, {})
    watch.set_pace(hanglearn.Pace(5.0, hanglearn.LEARN_PERIOD_S, by_sampler))
    rhythm = hanglearn.begin(now[0] - policy.warmup, 0.0)
    for second in range(1, 61):
        now[0] += 1.0
        _write(tmp_path / "written")
        watch.sample()
        if second % 5 == 0:  # the loop's look: the judge replays the signs of life noted
            quiet = watch.quiet()
            for life in watch.lives():
                rhythm = hanglearn.observe(policy, rhythm, life)
            rhythm = hanglearn.observe(policy, rhythm, now[0] - quiet)
    watch.end()
    return rhythm


def test_the_peer_monitor_s_samples_teach_the_gaps_the_loop_does_not_wake_for(tmp_path):
    learned = _busy_trainer_learned(tmp_path, by_sampler=True)
    assert learned.longest == hanglearn.LEARN_PERIOD_S  # read to the samples' 2 s
    limits = hang.Limits.from_settings(HangSettings())
    assert hanglearn.learned(limits.learn_silence, learned.longest) == hanglearn.DEFAULT_FLOOR_S
    # The loop's own 5 s looks alone would read the same trainer's gaps 5 s long (35 s).
    assert _busy_trainer_learned(tmp_path, by_sampler=False).longest == 5.0


def test_the_sampler_reads_proc_only_when_the_judge_leaves_the_samples_to_it(monkeypatch):
    limits = hang.Limits.from_settings(HangSettings())
    reads = []
    monkeypatch.setattr(hang, "bytes_written", lambda pid: reads.append(pid) or 0)
    now = [0.0]
    watch = hang.NodeWatch(limits, clock=lambda: now[0])
    assert watch.sampler_age() == float("inf")
    watch.begin(0, {0: 1234}, {})
    reads.clear()
    for _ in range(20):
        now[0] += 1.0
        watch.sample()
    assert reads == [] and watch.sampler_age() == 0.0
    watch.set_pace(hanglearn.Pace(5.0, 2.0, True))
    for _ in range(20):
        now[0] += 1.0
        watch.sample()
    assert len(reads) == 10  # every 2 s
    watch.end()
    watch.sample()  # between cycles: nothing to sample
    assert len(reads) == 10


def test_signs_of_life_are_noted_once_each_in_order(tmp_path):
    limits = hang.Limits.from_settings(HangSettings(timeout=2.0))
    now = [100.0]
    watch = hang.NodeWatch(limits, clock=lambda: now[0])
    watch.begin(0, {0: os.getpid()}, {})
    for _ in range(3):
        now[0] += 1.0
        _write(tmp_path / "written")
        watch.quiet()
        watch.quiet()  # the same sign of life, looked at again
    now[0] += 1.0
    watch.quiet()  # no write since
    assert watch.lives() == [101.0, 102.0, 103.0]
    assert watch.lives() == []
    watch.end()


def test_the_peer_monitor_calls_the_sampler_at_each_of_its_looks():
    h = Client.host(0, proto.Keys("sampler-a0"), 5.0)
    h.prepare(2, proto.Base(0, "u"))
    threads = background.BackgroundSet()
    threads.monitor = background.PeerMonitor(h.clone(5.0), [1], interval=0.02, timeout=5.0, wake_fd=None)
    calls = []
    assert threads.sample_with(lambda: calls.append(1)) == 0.02
    threads.monitor.start()
    try:
        wait_until(lambda: len(calls) >= 3, 5, message="the monitor's looks call the sampler")
    finally:
        threads.monitor.stop()
    assert background.BackgroundSet().sample_with(lambda: None) is None  # one node: no monitor


def test_while_the_monitor_samples_the_loop_only_reads_and_nothing_is_sampled_early(monkeypatch):
    """One steady pace, the monitor's: a look of the loop between two of its calls takes no
    sample (a 10 s trainer's gaps read 10.0 s at a steady pace; with samples off it, 10 to 12)."""
    limits = hang.Limits.from_settings(HangSettings())
    now = [1000.0]
    taken = []
    monkeypatch.setattr(hang, "bytes_written", lambda pid: taken.append(now[0]) or 0)
    watch = hang.NodeWatch(limits, clock=lambda: now[0])
    watch.begin(0, {0: 1234}, {})
    taken.clear()
    watch.set_pace(hanglearn.Pace(5.0, 2.0, True))  # the first sample due at 1001.5
    calls = (
        (1001.4, watch.sample),  # not yet due
        (1001.6, watch.sample),  # the next due at 1003.6
        (1003.0, watch.quiet),  # the loop only reads
        (1003.5, watch.sample),  # the monitor is never early
        (1003.7, watch.sample),
    )
    for at, look in calls:
        now[0] = at
        look()
    assert taken == [1001.6, 1003.7]
    watch.set_pace(hanglearn.Pace(2.0, 2.0, False))  # the loop samples again, a little early at most
    now[0] = 1004.8
    watch.quiet()
    assert taken == [1001.6, 1003.7, 1004.8]
    watch.end()
