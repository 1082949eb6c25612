"""A big job's decision names its placement by a digest, and the placement travels under a
key of its own, read once per change (issue 45): node 0 sent every launcher every node's
name every cycle (295 MB a decision at 4,096 nodes) and each launcher decoded them all."""

from __future__ import annotations

import dataclasses
import json

import pytest

from slurm_ft.launch.rendezvous import localstore, roster
from slurm_ft.launch.rendezvous import protocol as proto
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.sealing import Sealer
from tests.unit.test_decision_wait import Counting

SEALER = Sealer(b"r" * 32)
KEYS = proto.Keys("roster-a0", SEALER.namespace)


def decision(n: int, cycle: int = 1, active: tuple[int, ...] | None = None) -> proto.Decision:
    return proto.Decision(
        proto.Action.RUN,
        cycle,
        master_port=1234,
        nodes=tuple(f"node{k}" for k in range(n)),
        active=tuple(range(n - 2)) if active is None else active,
        spares=(n - 2, n - 1),
        master_addr="node0",
    )


def pair() -> tuple[localstore.LocalStore, Client, Client, list[str]]:
    store, calls = localstore.LocalStore(), []
    host = Client(store.connect(), KEYS, sealer=SEALER)
    return store, host, Client(Counting(store, calls), KEYS, sealer=SEALER), calls


def test_a_small_jobs_decision_travels_whole_as_before() -> None:
    wire, written = roster.split(decision(roster.INLINE_MAX))
    assert written is None and wire == decision(roster.INLINE_MAX)


def test_a_big_jobs_decision_is_read_whole_and_its_placement_once_per_change() -> None:
    store, host, peer, calls = pair()
    first = decision(4096)
    host.publish_decision(1, first)
    raw = store.data[KEYS.decision(1)]  # what every launcher fetches each cycle
    assert len(raw) < 1000 and b"node4095" not in raw
    assert peer.wait_decision(1, deadline=1e12, abort=lambda: False) == first
    reads = len(calls)
    second = dataclasses.replace(first, cycle=2)  # the same placement: not read again
    host.publish_decision(2, second)
    calls.clear()
    assert peer.wait_decision(2, deadline=1e12, abort=lambda: False) == second
    assert len(calls) < reads  # the decision's key alone
    # a launcher new to the job (a spare's first cycle) reads the placement, once
    newcomer = Client(store.connect(), KEYS, sealer=SEALER)
    assert newcomer.wait_decision(2, deadline=1e12, abort=lambda: False) == second


def spare_takes_rank_5(first: proto.Decision) -> proto.Decision:
    return dataclasses.replace(first, cycle=3, active=(*range(5), 4094, *range(6, 4094)), spares=(5, 4095))


def test_a_changed_placement_is_made_from_the_decisions_patch_and_not_read() -> None:
    store, host, peer, _ = pair()
    first = decision(4096)
    host.publish_decision(1, first)
    assert peer.wait_decision(1, deadline=1e12, abort=lambda: False) == first
    third = spare_takes_rank_5(first)
    host.publish_decision(3, third)
    raw = store.data[KEYS.decision(3)]
    assert len(raw) < 1000 and b"node4095" not in raw
    del store.data[KEYS.placement(3)]  # never asked for
    assert peer.wait_decision(3, deadline=1e12, abort=lambda: False) == third
    # the next decision of the same placement: from memory
    host.publish_decision(4, dataclasses.replace(third, cycle=4))
    assert peer.wait_decision(4, deadline=1e12, abort=lambda: False) == dataclasses.replace(third, cycle=4)


def test_a_launcher_without_the_patchs_base_reads_the_whole_placement() -> None:
    store, host, _, _ = pair()
    first = decision(4096)
    host.publish_decision(1, first)
    host.publish_decision(3, spare_takes_rank_5(first))
    newcomer = Client(store.connect(), KEYS, sealer=SEALER)  # never held cycle 1's
    assert newcomer.wait_decision(3, deadline=1e12, abort=lambda: False) == spare_takes_rank_5(first)
    del store.data[KEYS.placement(3)]
    late = Client(store.connect(), KEYS, sealer=SEALER)
    assert late.wait_decision(3, deadline=0.0, abort=lambda: False) is None  # waits for it


def test_a_patch_that_does_not_make_the_named_placement_is_not_used() -> None:
    first, third = decision(4096), spare_takes_rank_5(decision(4096))
    _, written = roster.split(first)
    assert written is not None
    wire, _ = roster.split(third, (written.digest, written.placement))
    assert wire.roster_from == written.digest and len(wire.roster_active) == 1
    assert roster.patched(wire, written.placement) == proto.Placement(third.nodes, third.active)
    other = proto.Placement(first.nodes, tuple(reversed(first.active)))  # not the base
    assert roster.patched(wire, other) is None
    for cut in ((0, 0, 5, 9000), (-1, 4096, 5, 4088), (0, 4096, 5)):
        assert roster.patched(dataclasses.replace(wire, roster_cut=cut), written.placement) is None
    # a change everywhere: no patch, the placement is read
    shuffled = dataclasses.replace(first, active=tuple(reversed(first.active)))
    wire, _ = roster.split(shuffled, (written.digest, written.placement))
    assert wire.roster_from == "" and wire.roster_cut == () and wire.roster_active == ()


def test_a_succession_makes_the_successors_first_placement_from_the_last_one() -> None:
    """Node 0 lost: the successor's first decision names every node but node 0; each
    survivor's new connection makes its placement from the one its old connection held."""
    store, host, peer, _ = pair()
    successor_old = Client(store.connect(), KEYS, sealer=SEALER)
    first = decision(4096, active=tuple(range(4096)))
    host.publish_decision(1, first)
    for launcher in (peer, successor_old):
        assert launcher.wait_decision(1, deadline=1e12, abort=lambda: False) == first
    epoch = proto.next_epoch(KEYS)
    new_store = localstore.LocalStore()
    successor = Client(new_store.connect(), epoch, sealer=SEALER)
    follower = Client(new_store.connect(), epoch, sealer=SEALER)
    successor.inherit_placements(successor_old)
    follower.inherit_placements(peer)
    survivors = dataclasses.replace(
        first, cycle=2, nodes=first.nodes[1:], active=tuple(range(1, 4096)), spares=()
    )
    successor.publish_decision(2, survivors)
    raw = new_store.data[epoch.decision(2)]
    assert len(raw) < 1000
    del new_store.data[epoch.placement(2)]  # never asked for
    assert follower.wait_decision(2, deadline=1e12, abort=lambda: False) == survivors


def test_a_placement_that_is_not_the_one_the_decision_names_is_never_used() -> None:
    wire, written = roster.split(decision(100))
    assert written is not None
    placement = written.text
    assert roster.joined(wire, roster.placement(wire.roster, placement.encode())) == decision(100)
    names = [f"node{k}" for k in range(100)]
    others = [
        {"nodes": names, "active": list(range(99))},
        {"nodes": [*names[:5], "nodeX", *names[6:]], "active": list(range(98))},
        # the same names joined by NUL: NUL is no host name's, so none is the named one
        {"nodes": [names[0] + "\0" + names[1], *names[2:], ""], "active": list(range(98))},
        {"nodes": names, "active": [*range(97), 2**64]},
    ]
    for raw in (*(json.dumps(o).encode() for o in others), b"[1, 2]", b"\xff"):
        with pytest.raises(proto.Malformed):
            roster.placement(wire.roster, raw)
    # the digest is the placement's, not its text's: the same one written otherwise is it
    assert roster.placement(wire.roster, placement.encode() + b" ") == roster.placement(
        wire.roster, placement.encode()
    )


def test_placements_that_differ_have_different_digests() -> None:
    def digest(nodes: tuple[str, ...], active: tuple[int, ...]) -> str | None:
        return roster._digest(proto.Placement(nodes, active))

    seen = [
        digest(("a", "b"), (0, 1)),
        digest(("a", "b"), (1, 0)),
        digest(("b", "a"), (0, 1)),
        digest(("ab",), (0, 1)),
        digest(("a", "b", ""), (0, 1)),
        digest(("a",), (0, 1)),
        digest(("a", "b"), (0,)),
        digest((), ()),
    ]
    assert None not in seen and len(set(seen)) == len(seen)
    assert digest(("a\0b",), (0,)) is None and digest(("a",), (2**63,)) is None
    # a name's bytes never run into the launchers' (the names' length comes first)
    assert digest(("a" + "\x01" * 8,), (0,)) != digest(("a",), (1, 0))


def test_a_forged_placement_waits_for_node0s_own() -> None:
    store, host, peer, _ = pair()
    host.publish_decision(1, decision(100))
    key = KEYS.placement(1)
    good = store.data[key]
    store.data[key] = b"forged"
    assert peer.wait_decision(1, deadline=0.0, abort=lambda: False) is None  # never a mix
    host.reassert()  # node 0 writes what it published again (every second)
    assert store.data[key] == good
    assert peer.wait_decision(1, deadline=1e12, abort=lambda: False) == decision(100)
