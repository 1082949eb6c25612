"""NodeWatch samples its workers' writes at the watch's pace: a look that comes a hair
before a full period since the last one still reads /proc (else a job-wide silence is
seen one period late, by chance). On node 0, while it learns, the peer monitor's wakes
take the fine samples and the loop keeps its fixed period; the gaps are learned as finely.
Output the log pipeline reads is timed as it arrives: its gaps are exact at any pace."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from slurm_ft.config import HangSettings
from slurm_ft.launch import hang
from slurm_ft.launch.hang import learn as hanglearn
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
    monkeypatch.setattr(hang.proc, "bytes_written", lambda pid: reads.append(pid) or 0)
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


def _judge_look(
    watch: hang.NodeWatch,
    policy: hanglearn.Policy,
    rhythm: hanglearn.Rhythm,
    now: float,
    quiet: float | None = None,
) -> hanglearn.Rhythm:
    """What node 0's judge does at a look: the signs of life noted since its last look, in
    order, then the latest (``quiet``: the look's own reading, taken when not given)."""
    quiet = watch.quiet() if quiet is None else quiet
    for life, since in watch.lives():
        rhythm = hanglearn.observe(policy, rhythm, life, since)
    return hanglearn.observe(policy, rhythm, now - quiet)


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
            rhythm = _judge_look(watch, policy, rhythm, now[0])
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
    monkeypatch.setattr(hang.proc, "bytes_written", lambda pid: reads.append(pid) or 0)
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
    assert watch.lives() == [(101.0, None), (102.0, None), (103.0, None)]
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
    monkeypatch.setattr(hang.proc, "bytes_written", lambda pid: taken.append(now[0]) or 0)
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


def _watching_this_process(start: float) -> tuple[hanglearn.Policy, list[float], hang.NodeWatch]:
    """A watch with the default limits on a simulated clock (``now[0]``), this process its
    one worker (its writes move the byte count)."""
    limits = hang.Limits.from_settings(HangSettings())
    now = [start]
    watch = hang.NodeWatch(limits, clock=lambda: now[0])
    watch.begin(0, {0: os.getpid()}, {})
    return limits.learn_silence, now, watch


def _piped_trainer(
    tmp_path: Path, lines: list[float], looks_every: float = 5.0
) -> tuple[hanglearn.Rhythm, bool, float]:
    """A trainer that writes a line at each of ``lines`` (seconds after the warm-up), read
    by the log pipeline (its bytes move too, as a pipe's do), node 0's loop looking every
    ``looks_every`` s: the gaps as the judge learns them, whether the watch found its signs
    exact, and its quiet at the end."""
    start = 1000.0
    policy, now, watch = _watching_this_process(start)
    rhythm = hanglearn.begin(start - policy.warmup, 0.0)
    end = start + lines[-1] + looks_every
    looks = [start + k * looks_every for k in range(1, int((end - start) / looks_every) + 1)]
    events = sorted([(start + t, "line") for t in lines] + [(t, "look") for t in looks])
    quiet = 0.0
    for at, kind in events:
        now[0] = at
        if kind == "line":
            _write(tmp_path / "written")
            watch.arrivals.heard()
            continue
        quiet = watch.quiet()
        rhythm = _judge_look(watch, policy, rhythm, at, quiet)
    exact = watch.exact()
    watch.end()
    return rhythm, exact, quiet


def test_lines_the_pipeline_reads_teach_their_exact_gaps_at_the_loop_s_fixed_pace(tmp_path):
    # A line a second for a minute, one gap of 3.7 s: read 3.7 s at 5 s looks, where the
    # byte counts sampled at that pace read 5 s (35 s limit) and needed 2 s samples.
    lines = [float(t) for t in range(1, 31)] + [33.7 + t for t in range(30)]
    rhythm, exact, quiet = _piped_trainer(tmp_path, lines)
    assert exact
    assert rhythm.longest == pytest.approx(3.7)
    assert quiet == pytest.approx(5.0 - (62.7 - 60.0), abs=1e-9)  # since the last line, exactly


def test_a_ten_times_slower_step_is_learned_whole_though_it_spans_looks(tmp_path):
    lines = [float(t) for t in range(1, 21)] + [30.0 + t for t in range(20)]
    rhythm, _, _ = _piped_trainer(tmp_path, lines)
    assert rhythm.longest == pytest.approx(10.0)


def test_a_file_written_while_no_line_comes_is_sampled_and_the_pace_is_no_longer_exact(tmp_path):
    limits = hang.Limits.from_settings(HangSettings())
    now = [1000.0]
    watch = hang.NodeWatch(limits, clock=lambda: now[0])
    watch.begin(0, {0: os.getpid()}, {})
    now[0] = 1001.0
    _write(tmp_path / "written")
    watch.arrivals.heard()
    now[0] = 1005.0
    assert watch.quiet() == pytest.approx(4.0)  # the line's time, not the sample's
    assert watch.exact()
    assert watch.lives() == [(1001.0, 1001.0)]  # the cycle's first line ends no gap
    now[0] = 1007.0
    _write(tmp_path / "written")  # a checkpoint: bytes, no line
    now[0] = 1010.0
    assert watch.quiet() == 0.0  # seen at the sample
    assert not watch.exact()
    assert watch.lives() == [(1010.0, None)]
    now[0] = 1011.0
    watch.arrivals.heard()
    now[0] = 1015.0
    watch.quiet()
    # The lines' gap is taken whole (from 1001): the sampled sign in it is timed late.
    assert watch.exact() and watch.lives() == [(1011.0, 1001.0), (1011.0, 1011.0)]
    watch.end()


def test_a_new_cycle_s_first_line_ends_no_gap(tmp_path):
    limits = hang.Limits.from_settings(HangSettings())
    now = [1000.0]
    watch = hang.NodeWatch(limits, clock=lambda: now[0])
    watch.begin(0, {0: 1234}, {})
    watch.arrivals.heard()
    watch.end()
    now[0] = 1100.0
    watch.begin(1, {0: 1234}, {})
    now[0] = 1101.0
    watch.arrivals.heard()
    now[0] = 1105.0
    watch.quiet()
    assert watch.lives() == [(1101.0, 1101.0)]
    watch.end()


def _sampled_trainer(tmp_path: Path, writes: list[int], longest: float, bounds: bool) -> hanglearn.Rhythm:
    """A trainer whose output the launcher does not read, writing at each of ``writes``
    (whole seconds after the warm-up), node 0 in the coarse phase: its loop samples at each
    look, every 5 s; the rhythm as the judge learns it, from ``longest`` learned before."""
    start = 1000.0
    policy, now, watch = _watching_this_process(start)
    watch.set_pace(hanglearn.Pace(5.0, 5.0, False, bounds))
    rhythm = hanglearn.begin(start - policy.warmup, longest)
    for second in range(1, writes[-1] + 6):
        now[0] = start + second
        if second in writes:
            _write(tmp_path / "written")
        if second % 5 == 0:
            rhythm = _judge_look(watch, policy, rhythm, now[0])
    watch.end()
    return rhythm


def test_coarse_samples_of_a_busy_trainer_teach_nothing(tmp_path):
    """Sampled every 5 s, a 1 s trainer's gaps read 5 s: learned, its limit would be 35 s,
    past the 30 s goal. In the coarse phase each gap is read as the least it can have been."""
    every_second = list(range(1, 121))
    learned = _sampled_trainer(tmp_path, every_second, 3.0, bounds=True)
    assert (learned.longest, learned.rose) == (3.0, -math.inf)
    assert _sampled_trainer(tmp_path, every_second, 3.0, bounds=False).longest == 5.0


def test_coarse_samples_learn_a_long_pause_as_the_least_it_lasted(tmp_path):
    """Writes each second to 20 s, none until 43 s (a 23 s pause): the samples at 20 and 45
    saw bytes, those at 25-40 none, so the pause lasted more than 40 - 20 = 20 s."""
    writes = [*range(1, 21), *range(43, 61)]
    learned = _sampled_trainer(tmp_path, writes, 3.0, bounds=True)
    assert learned.longest == pytest.approx(20.0)
    assert learned.rose == pytest.approx(1045.0)  # the rhythm changed: a fine phase again
    assert _sampled_trainer(tmp_path, writes, 3.0, bounds=False).longest == pytest.approx(25.0)
