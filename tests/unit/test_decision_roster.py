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
    wire, placement = roster.split(decision(roster.INLINE_MAX))
    assert placement is None and wire == decision(roster.INLINE_MAX)


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
    # a spare takes node rank 5: a new placement, read once
    third = dataclasses.replace(first, cycle=3, active=(*range(5), 4094, *range(6, 4094)), spares=(5, 4095))
    host.publish_decision(3, third)
    assert peer.wait_decision(3, deadline=1e12, abort=lambda: False) == third


def test_a_placement_that_is_not_the_one_the_decision_names_is_never_used() -> None:
    wire, placement = roster.split(decision(100))
    assert placement is not None
    assert roster.joined(wire, roster.placement(wire.roster, placement.encode())) == decision(100)
    other = json.dumps({"nodes": [f"node{k}" for k in range(100)], "active": list(range(99))})
    for raw in (other.encode(), b"[1, 2]", b"\xff", placement.encode() + b" "):
        with pytest.raises(proto.Malformed):
            roster.placement(wire.roster, raw)


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
