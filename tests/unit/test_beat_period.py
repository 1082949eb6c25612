"""The heart-beat stretched for big jobs (issue 45): node 0 serves at most a budget of
beats, and reads at most as many beat keys, a second; small jobs beat and look exactly as
configured; and the slack a stalled beat has before node 0 counts its peer lost stays what
it was configured to be."""

from __future__ import annotations

import math

import pytest

from slurm_ft.launch.rendezvous.background import Heartbeat
from slurm_ft.launch.rendezvous.beatperiod import NODE0_BEATS_PER_S, BeatPeriod, beat_period, next_beat_in
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import Keys


@pytest.mark.parametrize("n", [1, 2, 64, 256, NODE0_BEATS_PER_S + 1])
def test_a_job_within_the_budget_beats_and_looks_as_configured(n: int) -> None:
    assert beat_period(n, 1.0, 6.0) == BeatPeriod(interval=1.0, timeout=6.0, look_every=1)
    assert beat_period(min(n, 8), 0.02, 3.0) == BeatPeriod(interval=0.02, timeout=3.0, look_every=1)


@pytest.mark.parametrize("n", [NODE0_BEATS_PER_S + 2, 1024, 4096, 16384])
def test_node0_serves_at_most_the_budget_and_the_slack_is_kept(n: int) -> None:
    p = beat_period(n, 1.0, 6.0)
    peers = n - 1
    assert peers / p.interval == pytest.approx(NODE0_BEATS_PER_S)  # beats a second
    assert peers / p.look_every <= NODE0_BEATS_PER_S  # beat keys read a second (a wake a second)
    # the latest a live peer's beat can be seen: a beat period, then a look's
    assert p.timeout - (p.interval + p.look_every * 1.0) == pytest.approx(6.0 - 2.0)


def test_the_figures_the_scale_page_states() -> None:
    assert beat_period(1024, 1.0, 6.0) == BeatPeriod(1023 / 512, 6 + 1023 / 512, 2)
    for n, interval, timeout, every in [(1024, 2, 8, 2), (4096, 8, 20, 8), (16384, 32, 68, 32)]:
        p = beat_period(n, 1.0, 6.0)
        assert (round(p.interval), round(p.timeout), p.look_every) == (interval, timeout, every)


def test_a_configured_interval_longer_than_the_stretch_is_kept() -> None:
    assert beat_period(4096, 10.0, 60.0) == BeatPeriod(10.0, 60.0, 1)
    assert beat_period(4096, 4.0, 30.0) == BeatPeriod(4095 / 512, 30.0 + 4095 / 512 - 4.0 + 4.0, 2)


@pytest.mark.parametrize("n", [2, 64, 1024, 4096])
def test_beats_started_together_come_in_a_group_a_second(n: int) -> None:
    """Every launcher starts its heart-beat within 50 ms of the others (a job's start):
    its next beats then come in one group at the start of each second of the period, each
    group the budget's share at most, not a burst of all of them (before: each beat a
    period after the last kept the start's phase)."""
    p = beat_period(n, 1.0, 6.0)
    start = 1_000_000.0
    groups: dict[float, int] = {}
    for k in range(1, n):
        began = start + 0.05 * k / n
        second_beat = began + next_beat_in(began, p.interval, k / n)
        assert began < second_beat <= began + p.interval  # never later than a period
        at = round(second_beat, 6)  # a second's start in the period's grid of the wall clock
        groups[at] = groups.get(at, 0) + 1
    assert len(groups) == min(n - 1, math.ceil(p.interval - 1e-9)), groups
    assert max(groups.values()) <= min(n - 1, NODE0_BEATS_PER_S + 1), groups


def test_a_slot_starts_the_phase_s_second_and_a_wall_clock_jump_never_stretches_the_wait() -> None:
    assert next_beat_in(1003.0, 10.0, 0.5) == pytest.approx(2.0)  # slots at ...995, 1005, 1015
    assert next_beat_in(1005.0, 10.0, 0.5) == pytest.approx(10.0)  # on a slot: the next one
    assert next_beat_in(1005.5, 10.0, 0.5) == pytest.approx(9.5)
    assert next_beat_in(1003.0, 10.0, 0.55) == pytest.approx(2.0)  # the same second's group
    assert next_beat_in(1003.0, 10.0, 0.62) == pytest.approx(3.0)  # the next second's
    for jumped in (-3600.0, 0.0, 7.25, 1e9):  # wherever the clock jumps, within a period
        assert 0.0 < next_beat_in(1003.0 + jumped, 10.0, 0.5) <= 10.0


def test_the_heartbeat_waits_for_its_slot() -> None:
    beat = Heartbeat(Client.local(Keys("r", "n")), 3, 10.0, 60.0, phase=0.25, wall=lambda: 1003.0)
    assert beat.next_in() == pytest.approx(9.0)  # its second's start: ...992, 1002, 1012
