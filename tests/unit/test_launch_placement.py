"""Placement of node ranks on launchers with spare nodes (``policy.place``), as data."""

from __future__ import annotations

import dataclasses

import pytest

from slurm_ft.launch.policy import Placement, Replacement, place
from slurm_ft.records import FailureKind

LOST = "lost"
SICK = "unhealthy: storage: /x missing"


@pytest.mark.parametrize(
    ("active", "launchers", "bad", "segment", "expected"),
    [
        # nothing bad: the placement stays, whatever the spares' state
        ((0, 1, 2), 4, {}, 1, Placement((0, 1, 2))),
        ((0, 1, 2), 4, {3: LOST}, 1, Placement((0, 1, 2))),
        # a bad active node: its node rank goes to the lowest healthy spare, the others stay
        ((0, 1, 2), 4, {1: LOST}, 1, Placement((0, 3, 2), (Replacement(1, 1, 3, LOST),))),
        ((0, 1, 2), 5, {1: LOST}, 1, Placement((0, 3, 2), (Replacement(1, 1, 3, LOST),))),
        ((0, 1, 2), 5, {1: LOST, 3: SICK}, 1, Placement((0, 4, 2), (Replacement(1, 1, 4, LOST),))),
        # node 0 (the store host) unhealthy: its node rank moves too
        ((0, 1), 3, {0: SICK}, 1, Placement((2, 1), (Replacement(0, 0, 2, SICK),))),
        # a placement from an earlier replacement is kept (the replaced launcher stays bad)
        ((0, 3, 2), 5, {1: LOST, 2: LOST}, 1, Placement((0, 3, 4), (Replacement(2, 2, 4, LOST),))),
        # two bad nodes, two spares: in node-rank order
        (
            (0, 1, 2),
            5,
            {2: LOST, 1: SICK},
            1,
            Placement((0, 3, 4), (Replacement(1, 1, 3, SICK), Replacement(2, 2, 4, LOST))),
        ),
        # not enough spares: the ranks left over are unfilled (the attempt ends)
        ((0, 1, 2), 4, {1: LOST, 2: LOST}, 1, Placement((0, 3, 2), (Replacement(1, 1, 3, LOST),), (2,))),
        ((0, 1, 2), 3, {0: SICK}, 1, Placement((0, 1, 2), (), (0,))),
        # segments of 2: the whole segment moves, each rank to the same offset
        (
            (0, 1, 2, 3),
            6,
            {3: LOST},
            2,
            Placement(
                (0, 1, 4, 5),
                (
                    Replacement(2, 2, 4, "in the segment of launcher 3 (lost)"),
                    Replacement(3, 3, 5, LOST),
                ),
            ),
        ),
        # a segment with one bad node is no spare segment
        (
            (0, 1),
            6,
            {0: LOST, 2: SICK},
            2,
            Placement(
                (4, 5),
                (Replacement(0, 0, 4, LOST), Replacement(1, 1, 5, "in the segment of launcher 0 (lost)")),
            ),
        ),
        ((0, 1), 4, {0: LOST, 2: SICK}, 2, Placement((0, 1), (), (0,))),
    ],
)
def test_place(active, launchers, bad, segment, expected):
    assert place(active, launchers, bad, segment) == expected


def test_with_every_rank_filled_bad_nodes_and_a_lost_launcher_do_not_stop_the_attempt():
    from slurm_ft.launch.policy import decide
    from slurm_ft.records import Failure, FailureKind

    lost = Failure(FailureKind.LOST_NODE, "node1", 1, 0.0, detail="silent")
    filled = Placement((0, 2), (Replacement(1, 1, 2, LOST),))
    common = {"restart": 1, "max_restarts": 3, "previous_failure": lost, "unhealthy": (), "missing": ()}
    assert decide(**common, lost=["node1"], placement=filled).run
    assert not decide(**common, lost=["node1"]).run  # without spares: as before
    short = Placement((0, 1), (), (1,))
    v = decide(**common, lost=["node1"], placement=short)
    assert (v.run, v.exit_code) == (False, 1)
    v = decide(**{**common, "unhealthy": [("node2", "gpu: gone")]}, lost=["node1"], placement=short)
    assert (v.exit_code, v.reason) == (
        94,
        "no healthy spare left for node rank(s) 1; unhealthy: node2: gpu: gone",
    )
    v = decide(**{**common, "previous_failure": None}, lost=[], suspect=["node1"], placement=short)
    assert (v.exit_code, v.reason) == (1, "no healthy spare left for node rank(s) 1; suspect: node1")


def _failure_on(launcher: int):
    from slurm_ft.records import Failure, FailureKind

    return Failure(FailureKind.WORKER, f"node{launcher}", launcher, 0.0, rank=launcher, exit_code=3)


def _join(k: int, unhealthy: str | None = None, stuck: str | None = None):
    from slurm_ft.launch.rendezvous.protocol import JoinInfo

    return JoinInfo(k, f"node{k}", "h", 1, unhealthy, stuck)


def test_spare_book_retires_suspect_stuck_and_unhealthy_nodes_and_charges_extra_replacements():
    from slurm_ft.launch.spares import SpareBook, Why

    book = SpareBook.for_job(5, 2, 1, 2)
    assert (book.active, book.spares) == ((0, 1, 2), (3, 4))
    everyone = [_join(k) for k in range(5)]
    # the first failure on node 1 twice in a row: suspect
    book.note_failure(_failure_on(1), explained=False)
    assert not book.retired
    book.note_failure(_failure_on(1), explained=False)
    assert book.retired[1].why is Why.SUSPECT
    assert book.plan(2).active == (0, 3, 2) and book.charged == 0  # the failed cycle's restart
    # a failure explained by a node lost at the same join counts for no one
    book.note_failure(_failure_on(2), explained=False)
    book.note_failure(_failure_on(2), explained=True)
    book.note_failure(_failure_on(2), explained=False)
    assert 2 not in book.retired
    # a hang names whichever node's detector fired first: it counts for no one either
    book.note_failure(dataclasses.replace(_failure_on(2), kind=FailureKind.HANG), explained=False)
    book.note_failure(_failure_on(2), explained=False)
    assert 2 not in book.retired
    # a worker that could not be killed (the bounded stop's report) and an unhealthy spare
    joins = [*everyone[:2], _join(2, stuck="rank 2 survived SIGKILL"), everyone[3], _join(4, "gpu: gone")]
    assert book.note_roster(joins, lost=()) is True
    assert (book.retired[2].why, book.retired[4].why) == (Why.STUCK, Why.UNHEALTHY)
    placement = book.plan(3)
    # no healthy spare left: the suspect node 1 takes the node rank again rather than the
    # attempt ending (and the job waiting in the queue for a resubmission without it)
    assert placement.unfilled == () and book.active == (0, 3, 1) and 1 not in book.retired
    # its next first failure retires it for good: no second reprieve
    book.note_failure(_failure_on(1), explained=False)
    assert book.retired[1].why is Why.SUSPECT
    assert book.plan(4).unfilled == (2,) and book.active == (0, 3, 1)


def test_replacements_at_the_first_join_each_cost_a_restart():
    from slurm_ft.launch.spares import SpareBook

    book = SpareBook.for_job(4, 2, 1, 2)
    book.note_roster([_join(0, "storage: x"), _join(1, "storage: y"), _join(2), _join(3)], lost=())
    assert book.plan(0).active == (2, 3) and book.charged == 2
