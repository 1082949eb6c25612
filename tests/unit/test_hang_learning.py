"""Learned hang timeouts (issue 34): the pure policy, as data.

Each trainer is a sequence of intervals between its signs of life, judged through
``hanglearn.observe``/``limit`` exactly as the watch judges it (``hanglearn.simulate``).
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from slurm_ft.config import HangSettings
from slurm_ft.launch.hang import learn as hanglearn
from slurm_ft.launch.hang.learn import Policy, Rhythm

DEFAULT = Policy(hanglearn.DEFAULT_FACTOR, hanglearn.DEFAULT_FLOOR_S, 1800.0, hanglearn.DEFAULT_WARMUP_S)
HOUR = 3600.0
START = 120.0  # seconds from the cycle's start to its first line (start-up)
PEER_PERIOD = 5.0  # how often a peer samples its workers with the default --hang-timeout


def steady(interval: float, seconds: float = HOUR) -> list[float]:
    return [interval] * int(seconds / interval)


def periodic(base: float, every: int, slow: float, repeats: int) -> list[float]:
    """``every - 1`` normal intervals, then one ``slow`` one, ``repeats`` times."""
    return ([base] * (every - 1) + [slow]) * repeats


# A hang after an hour of steady output: found within max(30 s, 10 x the interval) of the
# last line (goal of issue 34), the tick's sampling error and a peer's sampling period
# included. With the factor 8 the 1 s and 10 s trainers missed it (31 s, 103 s).
@pytest.mark.parametrize(
    ("interval", "tick", "found_within"),
    [(0.2, 2.0, 30.0), (1.0, 2.0, 30.0), (10.0, 2.0, 100.0), (60.0, 5.0, 600.0)],
)
def test_a_hang_is_found_within_the_goal(interval: float, tick: float, found_within: float) -> None:
    lines = steady(interval)
    # Gaps are read to node 0's tick: the worst case reads every gap a tick long, the
    # verdict comes a tick late, and a peer whose workers wrote last is sampled up to its
    # period (5 s) late.
    found = hanglearn.simulate(DEFAULT, [g + tick for g in lines] + [math.inf], start_gap=START)
    assert found is not None
    last_read = START + sum(g + tick for g in lines)
    assert found - last_read + tick + PEER_PERIOD <= found_within, found - last_read


# The same with the lines timed exactly by the log pipeline: a gap reads as it was, the
# loop looks every 2 s once node 0's own workers are quiet (``pace``), and a peer's report
# is timed from node 0's read of it (up to 2 s late).
EXACT_LAG = 2.0 + 2.0


@pytest.mark.parametrize(
    ("interval", "found_within"), [(0.2, 30.0), (1.0, 30.0), (10.0, 100.0), (60.0, 600.0)]
)
def test_a_hang_in_exactly_timed_lines_is_found_within_the_goal(interval: float, found_within: float) -> None:
    found = hanglearn.simulate(DEFAULT, [*steady(interval), math.inf], start_gap=START)
    assert found is not None
    last_line = START + sum(steady(interval))
    assert found - last_line + EXACT_LAG <= found_within, found - last_line


@pytest.mark.parametrize(
    ("rhythm", "now", "expected"),
    [
        (Rhythm(0.0, 100.0, 0.0), 300.0, 5.0),  # the warm-up: the fixed period
        (Rhythm(0.0, 500.0, 0.0), 700.0, 5.0),  # silent since the warm-up: nothing pending
        (Rhythm(0.0, 650.0, 0.0), 700.0, 2.0),  # a first sign of life after it: a gap comes
        (Rhythm(0.0, 650.0, 1.0), 700.0, 2.0),  # 1 s trainer: limit 20 s
        (Rhythm(0.0, 650.0, 12.0), 700.0, 2.0),  # 10 s trainer: limit 84 s
        (Rhythm(0.0, 650.0, 61.0), 700.0, 5.0),  # 60 s trainer: limit 427 s
    ],
)
def test_node_0_ticks_finely_only_while_a_gap_is_being_learned(
    rhythm: Rhythm, now: float, expected: float
) -> None:
    assert hanglearn.tick(DEFAULT, rhythm, now, 5.0) == pytest.approx(expected)


PEERED = Policy(hanglearn.DEFAULT_FACTOR, hanglearn.DEFAULT_FLOOR_S, 1800.0, 0.0, peer_period=5.0)


@pytest.mark.parametrize(
    ("sample_every", "own_quiet", "sampler", "due", "expected"),
    [
        (2.0, 0.5, None, math.inf, (2.0, False)),  # one node: the loop samples, every 2 s
        (2.0, 0.5, 3.0, math.inf, (2.0, False)),  # a sampler slower than the samples wanted
        (5.0, 0.5, 1.0, math.inf, (5.0, False)),  # nothing fine wanted: the fixed period
        (2.0, 0.5, 1.0, math.inf, (5.0, True)),  # a busy job: the loop keeps its fixed period
        (2.0, 7.0, 1.0, math.inf, (3.0, True)),  # woken as its own quiet reaches the threshold
        (2.0, 9.5, 1.0, math.inf, (2.0, True)),  # ... never finer than the samples
        (2.0, 10.0, 1.0, math.inf, (2.0, True)),  # quiet that long: the peers are read finely
        (2.0, 0.5, 1.0, 3.5, (3.5, True)),  # woken when the iteration limit expires
    ],
)
def test_node_0_s_loop_wakes_finely_only_once_the_job_can_be_silent(
    sample_every: float, own_quiet: float, sampler: float | None, due: float, expected: tuple[float, bool]
) -> None:
    assert PEERED.report_after == 10.0
    got = hanglearn.pace(PEERED, sample_every, 5.0, own_quiet, sampler, due)
    assert (got.look, got.by_sampler) == (pytest.approx(expected[0]), expected[1])
    assert got.sample == sample_every


@pytest.mark.parametrize(
    ("own_quiet", "due", "expected_look"),
    [
        (0.5, math.inf, 5.0),  # lines flow: the fixed period, nothing sampled finely
        (7.0, math.inf, 3.0),  # woken as node 0's own quiet reaches the report threshold
        (10.0, math.inf, 2.0),  # quiet that long: a verdict can come, looks every 2 s
        (0.5, 3.5, 3.5),  # woken when the iteration limit expires
    ],
)
def test_with_exact_signs_the_loop_wakes_finely_only_once_the_job_can_be_silent(
    own_quiet: float, due: float, expected_look: float
) -> None:
    for sampler in (None, 1.0):
        got = hanglearn.pace(PEERED, 5.0, 5.0, own_quiet, sampler, due, exact=True)
        assert got == hanglearn.Pace(pytest.approx(expected_look), 5.0, False)


def test_no_learned_limit_expires_before_the_loop_wakes_finely() -> None:
    """The loop leaves the fine pace only while no verdict can come: every limit lies above
    the quiet at which it wakes finely again."""
    for floor in (0.5, 2.0, 20.0):
        for ceiling in (3.0, 8.0, 1800.0):
            policy = Policy(7.0, floor, ceiling, 0.0, peer_period=5.0)
            assert policy.ceiling >= policy.report_after  # the warm-up's, and before a gap
            for gap in (0.1, 1.0, 10.0, 100.0):
                assert hanglearn.learned(policy, gap) >= policy.report_after


def test_the_limit_stays_above_what_a_busy_peer_can_show() -> None:
    """A peer that samples every 5 s reports nothing below 10 s of quiet; node 0 takes an
    unreported peer as 10 s quiet, so no limit may be at or below that."""
    policy = Policy(7.0, 2.0, 120.0, 0.0, peer_period=5.0)
    assert policy.report_after == 10.0
    assert hanglearn.learned(policy, 0.5) == 15.0
    assert hanglearn.learned(DEFAULT, 0.5) == 20.0


# No false alarm: the trainer's own rhythm, with its rare slow stretches, for hours.
NO_ALARM = {
    "evaluation pass (15 s silent) every 500 steps of 1 s": periodic(1.0, 500, 15.0, 20),
    "slow checkpoint (18 s silent) every 1000 steps of 1 s": periodic(1.0, 1000, 18.0, 8),
    "10x slower step every 50 steps of 1 s": periodic(1.0, 50, 10.0, 100),
    "10x slower step every 50 steps of 1.9 s": periodic(1.9, 50, 19.0, 50),
    "validation (12 s silent) every 60 steps of 1 s, checkpoint (6 s silent) every 120": (
        [1.0] * 59 + [12.0] + [1.0] * 59 + [12.0, 6.0]
    )
    * 20,
    "10x slower step every 50 steps of 0.2 s": periodic(0.2, 50, 2.0, 500),
    "data-loader refill (8 s) every 200 steps of 0.5 s": periodic(0.5, 200, 8.0, 40),
    "GC pause of 5 s every 300 steps of 0.1 s": periodic(0.1, 300, 5.0, 100),
    "a 10 s trainer with a 60 s evaluation": periodic(10.0, 30, 60.0, 10),
    "a 60 s trainer with a 6-minute checkpoint": periodic(60.0, 20, 360.0, 5),
}


@pytest.mark.parametrize("intervals", NO_ALARM.values(), ids=list(NO_ALARM))
def test_the_job_s_own_rhythm_is_no_hang(intervals: list[float]) -> None:
    assert hanglearn.simulate(DEFAULT, intervals, start_gap=START) is None


def test_start_up_silence_in_the_warm_up_is_no_hang_even_with_a_history() -> None:
    """Cycle 2 of a 1 s trainer: a line, then 5 minutes of compilation, then steps."""
    assert hanglearn.simulate(DEFAULT, [300.0, *steady(1.0, 600)], start_gap=30.0, history_gap=1.0) is None


def test_start_up_longer_than_the_warm_up_is_a_hang_once_a_gap_is_known() -> None:
    """The warm-up is what ``--hang-initial-timeout`` is for: a compilation of 15 minutes
    in a cycle that knows its 1 s rhythm is found at the warm-up's end (600 s)."""
    assert hanglearn.simulate(DEFAULT, [900.0], start_gap=30.0, history_gap=1.0) == 600.0


def test_the_warm_up_ends_at_the_cycle_s_first_progress() -> None:
    """A 1 s trainer that restarts every few minutes: with a progress source its warm-up
    ends at the cycle's first checkpoint past the resumed step (40 s here), so a hang 60 s
    into the cycle is found at the learned 20 s, not at --hang-timeout (it used to wait for
    the 600 s warm-up, which such a job never leaves)."""
    lines = [*steady(1.0, 60), 3600.0]
    assert hanglearn.simulate(DEFAULT, lines, start_gap=30.0, history_gap=1.0) == 600.0
    found = hanglearn.simulate(DEFAULT, lines, start_gap=30.0, history_gap=1.0, progress_at=40.0)
    assert found == 110.0  # the last line at 90 s, then the learned 7 x 1 s within its 20 s floor
    # Without a history the first gaps after the progress teach the limit.
    assert hanglearn.simulate(DEFAULT, lines, start_gap=30.0, progress_at=40.0) == 110.0
    # A compilation before the first progress is judged by the ceiling alone (within the
    # --hang-initial-timeout, which still bounds the warm-up).
    compiled = hanglearn.simulate(DEFAULT, [500.0, 1.0], start_gap=30.0, history_gap=1.0, progress_at=531.0)
    assert compiled is None


def test_progressed_only_moves_the_warm_up_s_end_earlier_and_within_the_cycle() -> None:
    policy = Policy(7.0, 20.0, 1800.0, 600.0)
    r = hanglearn.begin(100.0, 2.0)
    assert hanglearn.warm_until(policy, r) == 700.0
    r = hanglearn.progressed(r, 150.0)
    assert hanglearn.warm_until(policy, r) == 150.0
    assert hanglearn.progressed(r, 160.0) == r  # a later move is not the first
    assert hanglearn.progressed(hanglearn.begin(100.0, 2.0), 50.0).progressed == math.inf  # before the cycle
    assert hanglearn.warm_until(policy, hanglearn.progressed(hanglearn.begin(0.0, 0.0), 900.0)) == 600.0


def test_the_first_cycle_knows_no_gap_until_after_its_warm_up() -> None:
    """Without a history the fixed timeout rules the warm-up and the first gap after it."""
    assert hanglearn.simulate(DEFAULT, [700.0, 1700.0], start_gap=30.0) is None
    assert hanglearn.simulate(DEFAULT, [700.0, 1800.0], start_gap=30.0) == 2530.0


def test_a_gap_judged_a_hang_is_carried_so_the_same_silence_is_no_hang_in_the_next_cycle() -> None:
    """A 10 s trainer whose evaluation is silent for 300 s: judged a hang at 70 s once;
    the judged gap goes to the ledger, the next cycle's limit is 7 x 70 s = 490 s, and the
    same evaluation passes (it used to be judged a hang in every cycle: a gap that never
    ended taught nothing)."""
    rhythm = hanglearn.begin(0.0, 0.0)
    for t in range(0, 1000, 10):  # after the warm-up: a line every 10 s
        rhythm = hanglearn.observe(DEFAULT, rhythm, float(t))
    assert hanglearn.limit(DEFAULT, rhythm, 1000.0) == 70.0
    rhythm = hanglearn.judged(DEFAULT, rhythm, 70.0)
    assert rhythm.cycle_longest == 70.0  # what the ledger keeps of this cycle
    following = hanglearn.begin(2000.0, rhythm.longest)
    assert hanglearn.limit(DEFAULT, following, 2000.0 + hanglearn.DEFAULT_WARMUP_S + 1) == 490.0
    fixed = Policy(0.0, 0.0, 1800.0, 0.0)
    assert hanglearn.judged(fixed, rhythm, 500.0) == rhythm  # a fixed timeout learns nothing


def test_a_slow_step_seen_once_protects_later_cycles() -> None:
    """A 10 s trainer's 10x slower step (100 s) is a hang the first time (7 x 10 s = 70 s:
    the factor is the price of finding hangs within 10 x the interval; the 100 s step is that
    goal itself), never again once the ledger carries it."""
    lines = periodic(10.0, 50, 100.0, 3)
    assert hanglearn.simulate(DEFAULT, lines, start_gap=START) is not None
    assert hanglearn.simulate(DEFAULT, lines, start_gap=START, history_gap=100.0) is None


@pytest.mark.parametrize(
    ("longest", "expected"),
    [(0.5, 20.0), (2.5, 20.0), (4.0, 28.0), (60.0, 420.0), (300.0, 1800.0)],
)
def test_the_learned_limit_is_factor_times_gap_within_floor_and_ceiling(
    longest: float, expected: float
) -> None:
    assert hanglearn.learned(DEFAULT, longest) == expected


@pytest.mark.parametrize(
    ("policy", "rhythm", "now", "expected"),
    [
        (DEFAULT, Rhythm(0.0, 700.0, 2.0), 701.0, 20.0),  # learned
        (DEFAULT, Rhythm(0.0, 100.0, 2.0), 101.0, 1800.0),  # in the warm-up
        (DEFAULT, Rhythm(0.0, 700.0, 0.0), 701.0, 1800.0),  # no gap known
        (Policy(0.0, 25.0, 1800.0, 600.0), Rhythm(0.0, 700.0, 2.0), 701.0, 1800.0),  # fixed
        (Policy(7.0, 25.0, 10.0, 0.0), Rhythm(0.0, 700.0, 2.0), 701.0, 10.0),  # never above the ceiling
        (Policy(7.0, 25.0, 0.0, 0.0), Rhythm(0.0, 700.0, 2.0), 701.0, 0.0),  # detector off
        (Policy(7.0, 25.0, math.inf, 0.0), Rhythm(0.0, 700.0, 0.0), 701.0, math.inf),  # uncapped, unknown
    ],
)
def test_limit(policy: Policy, rhythm: Rhythm, now: float, expected: float) -> None:
    assert hanglearn.limit(policy, rhythm, now) == expected


def test_observe_learns_only_gaps_that_began_after_a_sign_of_life_past_the_warm_up() -> None:
    policy = Policy(7.0, 25.0, 1800.0, 10.0)
    r = hanglearn.begin(0.0, 0.0)
    r = hanglearn.observe(policy, r, 5.0)  # start-up: the gap from the start is no gap
    r = hanglearn.observe(policy, r, 12.0)  # began in the warm-up
    assert (r.longest, r.cycle_longest) == (0.0, 0.0)
    r = hanglearn.observe(policy, r, 15.0)
    r = hanglearn.observe(policy, r, 15.0)  # no new life: nothing changes
    r = hanglearn.observe(policy, r, 14.0)  # an earlier estimate: nothing changes
    assert (r.last_life, r.longest, r.cycle_longest) == (15.0, 3.0, 3.0)


def test_an_exact_gap_is_learned_from_where_it_began() -> None:
    policy = Policy(7.0, 20.0, 1800.0, 10.0)
    r = Rhythm(0.0, 20.0)
    r = hanglearn.observe(policy, r, 31.0, since=29.0)  # lines until 29, the widest gap 2 s
    assert (r.last_life, r.longest) == (31.0, 2.0)
    r = hanglearn.observe(policy, r, 33.0, since=33.0)  # the window's last line: no gap
    assert (r.last_life, r.longest) == (33.0, 2.0)
    r = hanglearn.observe(policy, r, 40.0)  # a sampled sign: from the latest known
    assert (r.last_life, r.longest) == (40.0, 7.0)
    # A sampled sign inside an exact gap is timed late (at its sample): the whole gap counts.
    r = hanglearn.observe(policy, r, 45.0, since=36.0)
    assert (r.last_life, r.longest) == (45.0, 9.0)
    r = hanglearn.observe(policy, Rhythm(0.0, 5.0), 12.0, since=8.0)  # began in the warm-up
    assert (r.last_life, r.longest) == (12.0, 0.0)


def test_a_history_counts_but_is_not_this_cycle_s_own() -> None:
    r = hanglearn.observe(Policy(7.0, 25.0, 1800.0, 0.0), Rhythm(0.0, 1.0, 9.0), 3.0)
    assert (r.longest, r.cycle_longest) == (9.0, 2.0)


def test_report_threshold_is_where_a_gap_can_start_to_matter() -> None:
    assert DEFAULT.report_after == pytest.approx(20.0 / 7.0)
    assert Policy(7.0, 25.0, 1800.0, 600.0, peer_period=5.0).report_after == 10.0
    assert Policy(0.0, 25.0, 1800.0, 0.0).report_after == 1800.0
    assert Policy(7.0, 25.0, 2.0, 0.0).report_after == 2.0


@pytest.mark.parametrize(
    ("said", "now", "expected"),
    [(None, 25.0, True), (25.0, 25.0, False), (25.0, 27.0, False), (25.0, 28.0, True), (80.0, 70.0, True)],
)
def test_the_log_says_a_limit_when_it_is_new_or_moved(said: float | None, now: float, expected: bool) -> None:
    assert hanglearn.worth_saying(said, now) is expected


def test_the_settings_defaults_are_the_policy_s() -> None:
    """The reasoning behind 7 and 20 s lives beside hanglearn's constants; the settings
    that a launch really uses must be those numbers."""
    hang = HangSettings()
    assert (hang.safety_factor, hang.learned_floor, hang.initial_timeout) == (
        hanglearn.DEFAULT_FACTOR,
        hanglearn.DEFAULT_FLOOR_S,
        hanglearn.DEFAULT_WARMUP_S,
    )


# ---------------------------------------------------------------- the coarse phase

WARM_END = 600.0  # DEFAULT's warm-up, for a cycle started at 0


@pytest.mark.parametrize(
    ("rhythm", "now", "expected"),
    [
        (Rhythm(0.0, 650.0, 1.0), 650.0, False),  # just past the warm-up: the fine phase
        (Rhythm(0.0, 890.0, 1.0), WARM_END + hanglearn.FINE_S - 1, False),
        (Rhythm(0.0, 900.0, 1.0), WARM_END + hanglearn.FINE_S, True),  # 5 minutes after it
        (Rhythm(0.0, 900.0, 0.0), 2000.0, False),  # no gap known yet
        (Rhythm(0.0, 900.0, 12.0, rose=1500.0), 1700.0, False),  # the rhythm changed lately
        (Rhythm(0.0, 900.0, 12.0, rose=1500.0), 1500.0 + hanglearn.FINE_S, True),
        (Rhythm(0.0, 900.0, 61.0), 2000.0, False),  # a 60 s trainer is sampled at 5 s anyway
    ],
)
def test_node_0_samples_finely_for_five_minutes_after_the_warm_up_and_after_the_rhythm_changed(
    rhythm: Rhythm, now: float, expected: bool
) -> None:
    assert hanglearn.coarse(DEFAULT, rhythm, now, 5.0) is expected
    assert (hanglearn.tick(DEFAULT, rhythm, now, 5.0) == 5.0) is (expected or rhythm.longest > 36)


def test_a_gap_longer_than_the_longest_by_more_than_the_fine_grain_starts_a_fine_phase() -> None:
    rhythm = hanglearn.observe(DEFAULT, Rhythm(0.0, 700.0, 0.0), 701.0)
    assert (rhythm.longest, rhythm.rose) == (1.0, 701.0)  # the first gap
    later = hanglearn.observe(DEFAULT, replace_last(rhythm, 1500.0), 1502.9)
    assert (later.longest, later.rose) == (pytest.approx(2.9), 701.0)  # within the grain: the same rhythm
    changed = hanglearn.observe(DEFAULT, replace_last(later, 1600.0), 1660.0, since=1605.0)
    assert (changed.longest, changed.rose) == (55.0, 1660.0)  # a lower bound, still a change


def replace_last(rhythm: Rhythm, last_life: float) -> Rhythm:
    return dataclasses.replace(rhythm, last_life=last_life)


@pytest.mark.parametrize(
    ("until_limit", "due", "expected_look"),
    [
        (15.0, math.inf, 5.0),  # far from the limit: the fixed period
        (3.2, math.inf, 3.2),  # woken when the silence limit would expire
        (0.1, math.inf, hanglearn.COARSE_LEAST_LOOK_S),  # never busier than that
        (15.0, 1.5, 1.5),  # woken when the iteration limit expires
    ],
)
def test_in_the_coarse_phase_the_loop_samples_at_each_look_and_wakes_when_the_limit_expires(
    until_limit: float, due: float, expected_look: float
) -> None:
    got = hanglearn.pace(DEFAULT, 5.0, 5.0, 0.0, None, due, until_limit=until_limit)
    assert got == hanglearn.Pace(pytest.approx(expected_look), pytest.approx(expected_look), False, True)
    # node 0 of several: the peer monitor's samples keep the fine grain, nothing changes
    assert not hanglearn.pace(PEERED, 2.0, 5.0, 0.0, 1.0, due, until_limit=until_limit).bounds


@pytest.mark.parametrize(("interval", "found_within"), [(0.2, 30.0), (1.0, 30.0), (10.0, 100.0)])
def test_in_the_coarse_phase_a_hang_is_still_found_within_the_goal(
    interval: float, found_within: float
) -> None:
    """The limit was learned in the fine phase (gaps read up to 2 s long); the silence is
    timed from the last sample that saw bytes (up to 5 s after the last write) and the loop
    wakes when the limit expires (at most half a second late)."""
    fine_read = interval + hanglearn.LEARN_PERIOD_S
    lateness = 5.0 + hanglearn.COARSE_LEAST_LOOK_S
    assert hanglearn.learned(DEFAULT, fine_read) + lateness <= found_within
