"""Hangs in a cycle's first minutes (issue 46): the job's known start-up, the stopped-rank
rule and their records, as data (the launcher runs them in tests/integration/test_hang_young.py)."""

from __future__ import annotations

import math
import os
import signal
import subprocess

import pytest

from slurm_ft.config import HangSettings
from slurm_ft.launch import hang
from slurm_ft.launch.hang import learn as hanglearn
from slurm_ft.launch.hang.learn import Policy
from slurm_ft.progress import LedgerError, ledger_from_json
from tests.support.waiting import wait_until

DEFAULT = Policy(hanglearn.DEFAULT_FACTOR, hanglearn.DEFAULT_FLOOR_S, 1800.0, hanglearn.DEFAULT_WARMUP_S)
HOUR = 3600.0


def lines(rhythm: hanglearn.Rhythm, times: list[float]) -> hanglearn.Rhythm:
    for t in times:
        rhythm = hanglearn.observe(DEFAULT, rhythm, t)
    return rhythm


def every(start: float, interval: float, until: float) -> list[float]:
    return [start + k * interval for k in range(int((until - start) / interval) + 1)]


def test_a_steady_start_is_known_after_a_steady_stretch_and_its_gaps_are_learned() -> None:
    """First line 0.4 s in, then a line every 0.5 s: the start-up (0.4 s) is confirmed once
    max(20 s, 7 x 0.4 s) of steady lines followed it, in the 600 s warm-up; the gaps since
    are learned then, so the ledger has a rhythm even for a cycle that never left it."""
    r = lines(hanglearn.begin(0.0, 0.0), every(0.4, 0.5, 19.9))
    assert (r.startup, r.cycle_longest) == (0.0, 0.0)
    assert hanglearn.startup_seen(DEFAULT, r, 20.0) is None  # a crash now: not known yet
    r = lines(r, every(20.4, 0.5, 25.0))
    assert r.startup == pytest.approx(0.4) and r.cycle_longest == pytest.approx(0.5)
    assert hanglearn.startup_seen(DEFAULT, r, 25.0) == pytest.approx(0.4)
    assert hanglearn.limit(DEFAULT, r, 25.0) == 1800.0  # this cycle is still in its warm-up


def test_a_silent_compilation_moves_the_start_up_to_its_end() -> None:
    """Setup lines for 25 s (a start-up of 0.2 s, confirmed), then a 300 s compilation in
    silence: a silence above the floor in the warm-up is start-up, not rhythm: the start-up
    is known to end at 325 s, so a later cycle keeps the whole 600 s warm-up."""
    r = lines(hanglearn.begin(0.0, 0.0), every(0.2, 0.1, 25.0))
    assert r.startup == pytest.approx(0.2)
    r = lines(r, every(325.0, 0.5, 330.0))
    seen = hanglearn.startup_seen(DEFAULT, r, 330.0)
    assert seen == pytest.approx(325.0)
    later = hanglearn.begin(1000.0, r.cycle_longest, seen)
    assert hanglearn.warm_until(DEFAULT, later) == 1600.0
    assert (
        hanglearn.simulate(
            DEFAULT, [0.1] * 250 + [300.0] + [0.5] * 2000, start_gap=0.2, history_gap=0.5, startup=seen
        )
        is None
    )


def test_a_cycle_that_ends_in_a_silent_start_up_counts_it_whole() -> None:
    """A first line, then silence (compiling) when another rank failed at 100 s: the start-up
    lasted at least 100 s; a verdict's silence was no start-up."""
    r = lines(hanglearn.begin(0.0, 0.0), [0.3])
    assert hanglearn.startup_seen(DEFAULT, r, 100.0) == pytest.approx(100.0)
    assert hanglearn.startup_seen(DEFAULT, hanglearn.judged_stopped(r), 100.0) is None
    assert hanglearn.startup_seen(DEFAULT, r, 10.0) is None  # a short silence proves nothing
    off = Policy(0.0, 20.0, 1800.0, 600.0)
    assert hanglearn.startup_seen(off, r, 100.0) is None


@pytest.mark.parametrize(("known", "ends"), [(0.0, 600.0), (0.4, 20.0), (5.0, 35.0), (100.0, 600.0)])
def test_the_known_start_up_ends_the_warm_up_as_a_gap_would(known: float, ends: float) -> None:
    r = hanglearn.begin(0.0, 0.5, known)
    assert hanglearn.warm_until(DEFAULT, r) == ends
    assert hanglearn.ended_by_startup(DEFAULT, r) == (ends < 600.0)


@pytest.mark.parametrize("hang_at", [0.4, 5.0, 15.0, 30.0, 120.0, 590.0])
def test_a_hang_at_any_time_of_a_later_cycle_is_found_within_the_goal(hang_at: float) -> None:
    """Issue 46's goal for a trainer with a line every 0.5 s whose start-up (0.4 s) is known:
    from its start on, a hang is found within max(30 s, 10 x 0.5 s) (the watch's lateness,
    at most 4 s for lines timed as they arrive, comes on top: tests/unit/test_hang_learning)."""
    intervals = [0.5] * int((hang_at - 0.4) / 0.5) + [HOUR]
    found = hanglearn.simulate(DEFAULT, intervals, start_gap=0.4, history_gap=0.5, startup=0.4)
    last = 0.4 + 0.5 * (len(intervals) - 1)
    assert found is not None and found - last <= 30.0 - 4.0, (found, last)


def test_an_evaluation_silent_6_s_every_4_s_is_no_hang_in_any_cycle() -> None:
    evaluation = ([0.5] * 8 + [6.0]) * 400
    assert hanglearn.simulate(DEFAULT, evaluation, start_gap=0.4) is None  # the first cycle
    assert hanglearn.simulate(DEFAULT, evaluation, start_gap=0.4, history_gap=6.0, startup=0.4) is None


def test_a_start_up_slower_than_the_known_one_within_the_factor_is_no_hang() -> None:
    """A checkpoint load a later cycle has and the first did not: 2.5 s known, 17 s now."""
    assert hanglearn.simulate(DEFAULT, [0.5] * 100, start_gap=17.0, history_gap=0.5, startup=2.5) is None


def test_the_stopped_rank_rule_judges_at_the_learned_limit_or_the_floor() -> None:
    assert hanglearn.stopped_limit(DEFAULT, hanglearn.begin(0.0, 0.0)) == 20.0
    assert hanglearn.stopped_limit(DEFAULT, hanglearn.begin(0.0, 6.0)) == 42.0
    assert hanglearn.stopped_limit(Policy(0.0, 20.0, 1800.0, 600.0), hanglearn.begin(0.0, 6.0)) == 0.0
    why = hanglearn.stopped_basis(DEFAULT, hanglearn.begin(0.0, 0.0), [3, 1])
    assert why.startswith("stopped-rank rule: rank(s) 1, 3 stopped or in uninterruptible sleep"), why


@pytest.mark.parametrize(
    ("raw", "quiet", "held"),
    [
        ("2:13.5", 13.5, ()),
        ("2:13.5:3", 13.5, (3,)),
        ("2:13.5:1,3", 13.5, (1, 3)),
        ("2:13.5:x", 13.5, ()),
        ("2:13.5:-1", 13.5, ()),
        ("2:nan:3", None, ()),
        ("2:-4", None, ()),
        ("1:13.5:3", None, ()),
    ],
)
def test_a_peer_s_report_says_its_held_ranks(raw: str, quiet: float | None, held: tuple[int, ...]) -> None:
    assert hang.parse_report(raw, 2) == quiet
    assert hang.reported_held(raw, 2) == held


def _ledger(startup: object) -> dict[str, object]:
    cycle = {"cycle": 0, "attempt": 0, "iteration_start": 0, "startup": startup}
    return {"version": 1, "cycles": [cycle], "streak": 0}


def test_the_ledger_keeps_the_start_up_and_refuses_a_bad_one() -> None:
    assert ledger_from_json(_ledger(0.4)).cycles[0].startup == 0.4
    assert ledger_from_json(_ledger(None)).cycles[0].startup is None
    for bad in (-1.0, math.inf, "1", True):
        with pytest.raises(LedgerError, match="startup"):
            ledger_from_json(_ledger(bad))


def test_a_node_names_the_ranks_held_at_every_look_of_its_quiet_and_reports_them() -> None:
    """Two real "workers": rank 1 stopped (SIGSTOP), rank 0 asleep (S). Held ranks are read
    only once the node was quiet for the report threshold, and kept only while held at
    every look; the silence report names them, and a change of them travels again."""
    sleepers = [subprocess.Popen(["sleep", "60"]) for _ in range(2)]
    try:
        os.kill(sleepers[1].pid, signal.SIGSTOP)
        wait_until(lambda: hang.process_state(sleepers[1].pid) == "T", 5, message="rank 1 stopped")
        limits = hang.Limits.from_settings(HangSettings())
        assert limits.silence_report_after == 10.0
        now = [100.0]
        watch = hang.NodeWatch(limits, clock=lambda: now[0])
        watch.begin(4, {0: sleepers[0].pid, 1: sleepers[1].pid}, {})
        now[0] += 9.0
        watch.quiet()
        assert watch.stopped_ranks() == ()  # not quiet long enough: no /proc read
        now[0] += 1.5
        assert watch.silence_report() == "4:10.500:1"
        now[0] += 5.0
        assert watch.silence_report() is None  # nothing changed
        os.kill(sleepers[1].pid, signal.SIGCONT)
        wait_until(lambda: hang.process_state(sleepers[1].pid) != "T", 5, message="rank 1 continued")
        now[0] += 5.0
        assert watch.silence_report() == "4:20.500"  # held no longer: said again
        os.kill(sleepers[1].pid, signal.SIGSTOP)
        wait_until(lambda: hang.process_state(sleepers[1].pid) == "T", 5, message="rank 1 stopped")
        now[0] += 5.0
        watch.quiet()
        assert watch.stopped_ranks() == ()  # not held at every look of this quiet
        watch.end()
    finally:
        for p in sleepers:
            p.kill()
            p.wait()


def test_a_rank_in_uninterruptible_sleep_is_held_only_while_it_reads_nothing(monkeypatch) -> None:
    """D is where a dead mount keeps a rank, and where a checkpoint load from a slow file
    system spends most of its time: the loading rank's read bytes move, the stuck one's do
    not (this machine cannot hold a process in D on demand: the state is given here)."""
    read = {101: 5_000, 102: 7_000}
    monkeypatch.setattr(hang.proc, "process_state", lambda pid: "D")
    monkeypatch.setattr(hang.proc, "bytes_read", lambda pid: read[pid])
    now = [0.0]
    watch = hang.NodeWatch(hang.Limits.from_settings(HangSettings()), clock=lambda: now[0])
    watch.begin(0, {0: 101, 1: 102}, {})
    now[0] += 10.0
    watch.quiet()
    assert watch.stopped_ranks() == (0, 1)  # the first look cannot tell
    read[101] += 1 << 20  # rank 0 loads a checkpoint; rank 1 is stuck
    now[0] += 5.0
    watch.quiet()
    assert watch.stopped_ranks() == (1,)
    now[0] += 5.0
    watch.quiet()
    assert watch.stopped_ranks() == (1,)
    watch.end()
