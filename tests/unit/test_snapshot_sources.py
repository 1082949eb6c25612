"""Where each node's state comes from after a lost node (pure): the newest step every
needed key is held at somewhere, own memory first, never a mix of steps."""

from __future__ import annotations

from slurm_ft.launch.snapshots.sources import Source, Via, plan, replica_target, says

R = "replicated"


def test_own_memory_first_then_the_lowest_peer_holding_that_step() -> None:
    p = plan({0: {R: [9, 8]}, 2: {R: [9]}}, {0: [R], 1: [R], 2: [R]})
    assert p.step == 9
    assert p.sources == {
        0: (Source(R, Via.OWN, 0),),
        1: (Source(R, Via.PEER, 0),),
        2: (Source(R, Via.OWN, 2),),
    }
    assert says(p, 1) == "snapshots: the cycle resumes at step 9: replicated from node 0's memory"
    assert says(p, 0) == "snapshots: the cycle resumes at step 9: replicated from own memory"


def test_a_replica_behind_pulls_every_rank_back_to_the_step_all_have() -> None:
    held = {0: {"rank-00000": [12, 11], "rank-00001": [11, 10]}}
    p = plan(held, {0: ["rank-00000"], 1: ["rank-00001"]})
    assert p.step == 11
    assert p.sources[0] == (Source("rank-00000", Via.OWN, 0),)
    assert p.sources[1] == (Source("rank-00001", Via.PEER, 0),)


def test_a_shard_nobody_holds_sends_everyone_to_the_checkpoint() -> None:
    p = plan({0: {"rank-00000": [5]}}, {0: ["rank-00000"], 1: ["rank-00001"]})
    assert p.step is None
    assert p.sources[0] == (Source("rank-00000", Via.NONE),)
    assert says(p, 0) == "snapshots: no step is held for every rank; the workers start from the checkpoint"


def test_no_common_step_even_where_each_key_is_held() -> None:
    assert (
        plan(
            {0: {"rank-00000": [4, 3]}, 1: {"rank-00001": [6, 5]}}, {0: ["rank-00000"], 1: ["rank-00001"]}
        ).step
        is None
    )


def test_the_replica_ring_survives_any_one_lost_node() -> None:
    active = [0, 2, 3, 5]
    targets = {n: replica_target(n, active) for n in active}
    assert targets == {0: 2, 2: 3, 3: 5, 5: 0}
    assert all(targets[n] != n for n in active)
    assert replica_target(0, [0]) is None and replica_target(4, active) is None
