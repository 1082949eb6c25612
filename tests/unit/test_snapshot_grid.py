"""The job-wide grid of replicated steps (#44): the planner's rounds (pure), its replies
that wait for a round to move (real threads), and the plan's part that names the planner."""

from __future__ import annotations

import threading
import time

import pytest

from slurm_ft.launch.snapshots import grid, peer
from slurm_ft.launch.snapshots.grid import LEAD, Round, reported
from slurm_ft.launch.snapshots.lostnode import Holdings, Part, parts

A0, A1 = peer.Address("127.0.0.1", 5000), peer.Address("127.0.0.1", 5001)


def test_a_step_is_agreed_only_once_every_node_landed_it_and_the_next_candidate_is_ahead() -> None:
    r = Round(epoch=1, nodes=3)
    assert reported(r, 0, None, None, None) == r  # nobody snapshots yet: nothing to name
    r = reported(r, 0, 10, None, None)
    assert (r.agreed, r.candidate) == (None, 10 + LEAD)
    r = reported(r, 1, 11, 12, None)
    r = reported(r, 1, 12, 12, None)  # the same node twice counts once
    assert (r.agreed, r.landed) == (None, frozenset({1}))
    r = reported(r, 2, 13, 11, None)  # a candidate that is not the round's: ignored
    assert r.landed == frozenset({1})
    r = reported(r, 0, 13, 12, None)
    r = reported(r, 2, 14, 12, None)
    assert (r.agreed, r.candidate, r.landed) == (12, 14 + LEAD, frozenset())


def test_a_missed_candidate_is_named_again_further_ahead_and_the_agreed_step_stays() -> None:
    r = Round(epoch=1, nodes=2, agreed=8, candidate=12, landed=frozenset({0}), newest=12)
    r = reported(r, 1, 15, None, 12)  # node 1's trainer was past 12 before it could keep it
    assert (r.agreed, r.candidate, r.landed, r.lead) == (8, 15 + 2 * LEAD, frozenset(), 2 * LEAD)
    for _ in range(10):
        r = reported(r, 1, r.candidate + 1, None, r.candidate)  # type: ignore[operator]
    assert r.lead == grid.MAX_LEAD and r.agreed == 8
    for node in (0, 1):  # a round that completes halves the lead again
        r = reported(r, node, r.candidate, r.candidate, None)
    assert r.agreed is not None and r.agreed > 8 and r.lead == grid.MAX_LEAD // 2


def test_a_node_that_landed_waits_for_the_others_and_learns_the_agreed_step_at_once() -> None:
    coordinator = grid.Coordinator(wait_s=30)
    coordinator.reset(epoch=4, nodes=2)
    assert coordinator.report(3, 0, 5, None, None, (None, None)) == (None, None)  # another cycle's
    assert coordinator.report(4, 0, 5, None, None, (None, None)) == (None, 5 + LEAD)
    got: list[tuple[int | None, int | None]] = []
    first = threading.Thread(target=lambda: got.append(coordinator.report(4, 0, 7, 7, None, (None, 7))))
    t0 = time.monotonic()
    first.start()
    first.join(0.3)
    assert first.is_alive()  # held: node 1 has not landed step 7
    assert coordinator.report(4, 1, 8, 7, None, (None, 7)) == (7, 8 + LEAD)
    first.join(5)
    assert got == [(7, 8 + LEAD)] and time.monotonic() - t0 < 5
    coordinator.reset(epoch=5, nodes=2)  # a new cycle: a held report of the old one is let go
    assert coordinator.report(4, 0, 9, 10, None, (7, 10)) == (None, None)


def test_the_part_names_the_planner_its_cycle_and_how_many_nodes_land_a_step() -> None:
    held = {0: Holdings(A0, {"rank-00000": [3]}).encode(), 1: Holdings(A1, {"rank-00001": [3]}).encode()}
    planned = parts(held, (0, 1), 1, planner=0, epoch=6)
    assert planned is not None
    assert [(p.grid, p.epoch, p.ring, p.target) for p in planned.values()] == [(A0, 6, 2, A1), (A0, 6, 2, A0)]
    assert Part.decode(planned[1].encode()) == planned[1]
    alone = parts({0: held[0]}, (0,), 1, planner=0, epoch=6)
    assert alone is None  # one active node: no ring, no grid, nothing to say
    forged = (
        planned[1].encode().replace('"grid": ["127.0.0.1:5000", 6, 2]', '"grid": ["127.0.0.1:5000", "6", 2]')
    )
    assert Part.decode(forged) is None


def test_newest_snapshots_go_between_candidates_only_while_a_copy_fits_in_a_step() -> None:
    from slurm_ft.launch.snapshots.replicas import Pace

    pace = Pace()
    assert pace.fits(5.0)  # nothing known yet: one copy, to learn how long it takes
    pace.saw(10, now=100.0)
    pace.saw(10, now=100.05)
    pace.saw(12, now=100.2)  # two steps in 0.2 s
    assert pace.step_s == pytest.approx(0.1)
    assert pace.fits(0.05) and not pace.fits(0.3)  # a copy of three steps would miss the candidate
    pace.saw(3, now=101.0)  # a new cycle resumed from an older step: no interval from it
    assert pace.step_s == pytest.approx(0.1) and pace.step == 3
