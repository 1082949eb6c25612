"""Node 0's plan when a launcher's holdings cannot be read (not sealed with the job secret:
an outsider overwrote or deleted them): that launcher counts as holding nothing, and when
nobody's can be read every node is told to start from the checkpoint, never left to
resume from its own newest (which may be a step another node does not have)."""

from __future__ import annotations

from slurm_ft.launch.snapshots import peer
from slurm_ft.launch.snapshots.lostnode import Holdings, Part, parts
from slurm_ft.launch.snapshots.sources import Source, Via

A0, A1 = peer.Address("127.0.0.1", 5000), peer.Address("127.0.0.1", 5001)


def test_when_no_launchers_holdings_can_be_read_every_node_starts_from_the_checkpoint() -> None:
    planned = parts({0: None, 1: None}, (0, 1), 1)
    assert planned == {0: Part(True, None), 1: Part(True, None)}
    assert Part.decode(planned[1].encode()) == Part(True, None)


def test_a_node_whose_holdings_are_forged_takes_the_step_from_the_others_like_a_spare() -> None:
    behind = Holdings(A1, {"replicated": [3, 4]}).encode()
    planned = parts({0: None, 1: behind}, (0, 1), 1)
    assert planned is not None
    sources = {"replicated": [(1, A1)]}
    assert planned[0] == Part(True, 4, (Source("replicated", Via.PEER, 1),), sources, target=A1)
    assert planned[1] == Part(True, 4, (Source("replicated", Via.OWN, 1),))  # node 0's address unknown


def test_a_forged_shard_holder_without_a_replica_sends_every_rank_to_the_checkpoint() -> None:
    mine = Holdings(A0, {"rank-00000": [7, 8]}).encode()
    planned = parts({0: mine, 1: "sft1:forged"}, (0, 1), 1)
    assert planned is not None
    assert [p.step for p in planned.values()] == [None, None]
    assert planned[1].acts and planned[1].sources == (Source("rank-00001", Via.NONE),)


def test_nothing_published_is_nothing_to_plan() -> None:
    assert parts({}, (0, 1), 1) is None


def test_shards_a_step_apart_resume_every_rank_from_the_step_both_have() -> None:
    """Rank 0 was killed while writing step 9: node 0 holds 7 and 8, node 1 holds 8 and 9.
    Each rank's own newest would mix 8 and 9; the plan acts and every rank resumes at 8
    (node 1's step 9 is trimmed)."""
    a = Holdings(A0, {"rank-00000": [7, 8]}).encode()
    b = Holdings(A1, {"rank-00001": [8, 9]}).encode()
    planned = parts({0: a, 1: b}, (0, 1), 1)
    assert planned is not None
    assert {n: (p.acts, p.step) for n, p in planned.items()} == {0: (True, 8), 1: (True, 8)}
    assert planned[1].sources == (Source("rank-00001", Via.OWN, 1),)


def test_shards_all_at_one_newest_step_change_nothing() -> None:
    a = Holdings(A0, {"rank-00000": [8, 9]}).encode()
    b = Holdings(A1, {"rank-00001": [8, 9]}).encode()
    planned = parts({0: a, 1: b}, (0, 1), 1)
    assert planned is not None and not any(p.acts for p in planned.values())
