"""The heart-beat stretched for big jobs (issue 45): node 0 serves at most a budget of
beats, and reads at most as many beat keys, a second; small jobs beat and look exactly as
configured; and the slack a stalled beat has before node 0 counts its peer lost stays what
it was configured to be."""

from __future__ import annotations

import pytest

from slurm_ft.launch.rendezvous.beatperiod import NODE0_BEATS_PER_S, BeatPeriod, beat_period


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
