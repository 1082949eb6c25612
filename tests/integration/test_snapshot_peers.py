"""A lost node loses no snapshot (#44): launchers' snapshot services on simulated nodes
(one area and one process each), real sockets, real trainers restoring what arrived.

The state a spare resumes from must be the state the lost node had at that step: the
trainer stand-in checks every tensor and value says the step (WHOLE), and the shipped
payload must be byte for byte the holder's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_ft.launch.snapshots import peer, sources
from slurm_ft.snapshot import area as areas
from slurm_ft.snapshot import layout, reader
from tests.support.snaptrainer import ROOT, Trainer, start
from tests.support.waiting import wait_until

pytestmark = pytest.mark.torch
SECRET = b"0123456789abcdef0123456789abcdef-job"
REPLICATED = layout.REPLICATED


class Node:
    """Another node's launcher: its snapshot service in a process of its own."""

    def __init__(self, where: Path, *extra: str, secret: bytes = SECRET) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.snapshot_peer", str(where), *extra],
            cwd=ROOT,
            env={**os.environ, "SLURM_FT_JOB_SECRET": secret.decode()},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().split()
        assert line[:1] == ["port"], line
        self.address = peer.Address("127.0.0.1", int(line[1]))

    def finish(self) -> tuple[int, list[str]]:
        try:
            _, err = self.proc.communicate(b"", timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err.decode().splitlines()


@pytest.fixture
def nodes() -> Iterator[list[Node]]:
    started: list[Node] = []
    yield started
    for n in started:
        if n.proc.poll() is None:
            n.proc.kill()
        n.proc.communicate()


def _area(tmp_path: Path, name: str) -> Path:
    made = tmp_path / name
    made.mkdir(mode=0o700)
    return made


def _payload(info: reader.SnapshotInfo) -> bytes:
    return info.path.read_bytes()[layout.HEADER_SIZE : info.header.file_size]


def _held(area: Path) -> dict[str, list[int]]:
    return reader.held_steps(area)


def test_a_spare_resumes_ddp_state_from_a_surviving_node_at_the_step_every_node_has(
    tmp_path: Path, trainers: list[Trainer], nodes: list[Node]
) -> None:
    # node 0 was lost; node 1 holds steps 6 and 5, node 2 lagged and holds 5 and 4
    one, two, spare = (_area(tmp_path, n) for n in ("n1", "n2", "spare"))
    for where, steps in ((one, (5, 6)), (two, (4, 5))):
        t = start(trainers, where, rank=0, world=3, cycle=1)
        assert [t.ask(f"snap {s} replicated") for s in steps] == [f"snap {s} True" for s in steps]
        t.finish()
    held = {1: _held(one), 2: _held(two)}
    needs = {n: [REPLICATED] for n in (0, 1, 2)}
    chosen = sources.plan(held, needs)
    assert chosen.step == 6
    assert chosen.sources[0] == (sources.Source(REPLICATED, sources.Via.PEER, 1),)
    assert chosen.sources[2] == (sources.Source(REPLICATED, sources.Via.PEER, 1),)
    assert (
        sources.says(chosen, 0) == "snapshots: the cycle resumes at step 6: replicated from node 1's memory"
    )
    holder = Node(one)
    nodes.append(holder)
    got = peer.fetch(holder.address, SECRET, REPLICATED, 6, spare, max_size=1 << 30)
    assert (got.step, got.header.origin) == (6, layout.Origin.PEER)
    [theirs] = [i for i in reader.complete_slots(one, REPLICATED) if i.step == 6]
    assert _payload(got) == _payload(theirs)
    # node 2 takes step 6 too: nobody resumes from its own step 5
    peer.fetch(holder.address, SECRET, REPLICATED, 6, two, max_size=1 << 30)
    for where in (spare, two):
        t = start(trainers, where, rank=0, world=3, cycle=2, resume_step=6)
        assert t.ask("restore") == "restored 6 peer-memory True"


def test_with_replicas_a_lost_nodes_shard_comes_from_its_successor_at_the_newest_common_step(
    tmp_path: Path, trainers: list[Trainer], nodes: list[Node]
) -> None:
    zero, one, spare = (_area(tmp_path, n) for n in ("n0", "n1", "spare"))
    r0 = start(trainers, zero, rank=0, world=2, cycle=1)
    r1 = start(trainers, one, rank=1, world=2, cycle=1)
    assert sources.replica_target(1, [0, 1]) == 0 and sources.replica_target(0, [0, 1]) == 1
    node0, node1 = Node(zero), Node(one)
    nodes.extend((node0, node1))
    for s in (1, 2):
        assert r0.ask(f"snap {s}") == f"snap {s} True"
        assert r1.ask(f"snap {s}") == f"snap {s} True"
        for rank, area, target in ((0, zero, node1), (1, one, node0)):
            info = reader.newest(area, layout.rank_key(rank))
            assert info is not None
            peer.push(target.address, SECRET, info)
    assert r0.ask("snap 3") == "snap 3 True"  # node 1 is lost before its step 3 and before any replica of 3
    lost = _payload(next(i for i in reader.complete_slots(one, layout.rank_key(1)) if i.step == 2))
    r1.kill()
    node1.proc.kill()
    held = {0: _held(zero)}
    assert held[0] == {"rank-00000": [3, 2], "rank-00001": [2, 1]}
    chosen = sources.plan(held, {0: ["rank-00000"], 1: ["rank-00001"]})
    assert chosen.step == 2  # the replica is behind: the newest step every rank has
    assert chosen.sources[1] == (sources.Source("rank-00001", sources.Via.PEER, 0),)
    got = peer.fetch(node0.address, SECRET, "rank-00001", 2, spare, max_size=1 << 30)
    assert got.header.origin is layout.Origin.REPLICA
    assert _payload(got) == lost
    r0.finish()
    again0 = start(trainers, zero, rank=0, world=2, cycle=2, resume_step=2)
    again1 = start(trainers, spare, rank=1, world=2, cycle=2, resume_step=2)
    assert again0.ask("restore") == "restored 2 memory True"
    assert again1.ask("restore") == "restored 2 replica True"


def test_the_only_holder_dying_mid_transfer_leaves_nothing_used_and_the_checkpoint_is_said(
    tmp_path: Path, trainers: list[Trainer], nodes: list[Node]
) -> None:
    one, spare = _area(tmp_path, "n1"), _area(tmp_path, "spare")
    t = start(trainers, one, rank=0, world=2, cycle=1, mib=4)
    assert t.ask("snap 7 replicated") == "snap 7 True"
    t.finish()
    holder = Node(one, "--die-mid-send")
    nodes.append(holder)
    with pytest.raises(peer.PeerError, match=r"is not used: the stream ended after \d+ of \d+ bytes"):
        peer.fetch(holder.address, SECRET, REPLICATED, 7, spare, max_size=1 << 30, timeout=30)
    assert holder.proc.wait(timeout=30) == -9
    assert reader.describe(spare) == []
    chosen = sources.plan({}, {0: [REPLICATED], 1: [REPLICATED]})  # the holder is gone too
    assert chosen.step is None and chosen.sources[0] == (sources.Source(REPLICATED, sources.Via.NONE),)
    assert sources.says(chosen, 0) == (
        "snapshots: no step is held for every rank; the workers start from the checkpoint"
    )
    t = start(trainers, spare, rank=0, world=2, cycle=2)
    assert t.ask("restore") == "restored None"


@pytest.mark.parametrize(
    ("how", "said"),
    [
        ("--stall-mid-send", r"is not used: timed out"),  # a frozen peer: the idle timeout
        ("--trickle", r"is not used: the transfer was not done within 1 s"),  # a dying link: the bound
    ],
)
def test_a_holder_that_stalls_or_trickles_mid_transfer_is_given_up_within_its_bound(
    tmp_path: Path, trainers: list[Trainer], nodes: list[Node], how: str, said: str
) -> None:
    one, spare = _area(tmp_path, "n1"), _area(tmp_path, "spare")
    t = start(trainers, one, rank=0, world=2, cycle=1, mib=4)
    assert t.ask("snap 7 replicated") == "snap 7 True"
    t.finish()
    holder = Node(one, how)
    nodes.append(holder)
    t0 = time.monotonic()
    with pytest.raises(peer.PeerError, match=said):
        peer.fetch(holder.address, SECRET, REPLICATED, 7, spare, max_size=1 << 30, timeout=1.0)
    took = time.monotonic() - t0
    # the bound: 1 s (+ 4 MiB at the floor rate, 0.06 s) past the handshake; generous for a shared machine
    assert took < peer.bound(1.0).seconds(8 << 20) + 5.0, took
    assert reader.describe(spare) == [] and areas.held(spare) == 0  # nothing kept, the memory given back
    code, _ = holder.finish()
    assert code == 0


def test_a_replica_superseded_while_it_is_sent_is_dropped_at_both_ends_without_a_word(
    tmp_path: Path, trainers: list[Trainer]
) -> None:
    mine, theirs = _area(tmp_path, "n0"), _area(tmp_path, "n1")
    lines: list[str] = []
    server = peer.PeerServer(theirs, SECRET, host="127.0.0.1", max_size=1 << 30, event=lines.append)
    try:
        t = start(trainers, mine, rank=0, world=2, cycle=1, mib=4)
        assert t.ask("snap 1") == "snap 1 True"
        stale = reader.newest(mine, "rank-00000")
        assert [t.ask(f"snap {s}") for s in (2, 3)] == ["snap 2 True", "snap 3 True"]  # its slot holds 3
        assert stale is not None
        there = peer.Address("127.0.0.1", server.port)
        assert peer.push(there, SECRET, stale) is peer.Pushed.SUPERSEDED
        fresh = reader.newest(mine, "rank-00000")
        assert fresh is not None and peer.push(there, SECRET, fresh) is peer.Pushed.KEPT
    finally:
        server.close()
    assert [(i.step, i.header.origin) for i in reader.complete_slots(theirs, "rank-00000")] == [
        (3, layout.Origin.REPLICA)
    ]
    assert areas.held(theirs) == fresh.header.file_size  # the dropped copy's memory was given back
    assert lines == []  # a superseded replica is not a fault: the launcher log stays quiet
    t.finish()


def test_the_pusher_sends_only_the_newest_snapshot_at_the_lowest_priority(
    tmp_path: Path, trainers: list[Trainer]
) -> None:
    from slurm_ft.launch.snapshots.replicas import ReplicaPusher

    mine, theirs = _area(tmp_path, "n0"), _area(tmp_path, "n1")
    server = peer.PeerServer(theirs, SECRET, host="127.0.0.1", max_size=1 << 30, event=print)
    pusher = ReplicaPusher(mine, SECRET, event=print)
    try:
        t = start(trainers, mine, rank=0, world=2, cycle=1, mib=4)
        assert [t.ask(f"snap {s}") for s in (1, 2, 3)] == [f"snap {s} True" for s in (1, 2, 3)]
        pusher.aim(peer.Address("127.0.0.1", server.port))  # 1 and 2 were superseded before it had a target
        wait_until(lambda: pusher.counts.kept == 1, 30, message="the replica of step 3")
        assert [(i.step, i.header.origin) for i in reader.complete_slots(theirs, "rank-00000")] == [
            (3, layout.Origin.REPLICA)
        ]
        assert (pusher.counts.superseded, pusher.counts.failed) == (0, 0)
        assert pusher.native_id is not None and os.getpriority(os.PRIO_PROCESS, pusher.native_id) == 19
        t.finish()
    finally:
        pusher.close()
        server.close()


def test_replicas_land_while_the_trainer_snapshots_many_times_during_each_copy(
    tmp_path: Path, trainers: list[Trainer]
) -> None:
    """Issue #44: a copy slower than the interval between snapshots used to be superseded
    every time (no replica ever landed). The slot being sent is held still, the trainer
    snapshotting into a new file in its place, so each copy lands, whole, and the
    replica's step advances."""
    from slurm_ft.launch.snapshots.replicas import ReplicaPusher
    from tests.integration.snapshot_worker import whole
    from tests.support.slowlink import SlowLink

    mine, theirs = _area(tmp_path, "n0"), _area(tmp_path, "n1")
    lines: list[str] = []
    server = peer.PeerServer(theirs, SECRET, host="127.0.0.1", max_size=1 << 30, event=lines.append)
    link = SlowLink(peer.Address("127.0.0.1", server.port), bytes_per_s=8 << 20)  # 4 MiB: 0.5 s a copy
    pusher = ReplicaPusher(mine, SECRET, poll_s=0.001, event=lines.append)
    try:
        t = start(trainers, mine, rank=0, world=2, cycle=1, mib=4)
        pusher.aim(link.address)
        landed: list[int] = []
        step, taken = 0, 0
        deadline = time.monotonic() + 120
        while pusher.counts.kept < 4 and time.monotonic() < deadline:
            words = t.ask(f"run {step + 1} {step + 10}").split()  # ten snapshots back to back
            step, taken = step + 10, taken + int(words[2])
            replica = reader.newest(theirs, "rank-00000")
            if replica is not None and (not landed or replica.step != landed[-1]):
                landed.append(replica.step)
        assert pusher.counts.kept >= 4, (landed, step, pusher.counts)
        assert landed == sorted(set(landed)) and len(landed) >= 2  # the replica's step advances
        assert taken == step  # the trainer never skipped a snapshot for a send
        # copies that spanned three snapshots or more (both slots rewritten meanwhile) landed:
        # without the hold every one of them was superseded
        assert pusher.counts.behind >= 2, pusher.counts
        assert [i.step for i in reader.complete_slots(mine, "rank-00000")] == [step, step - 1]
        pusher.close()  # no replica lands while they are read: a landing replaces the slot's file
        for info in reader.complete_slots(theirs, "rank-00000"):  # both replicas whole, of their step
            assert info.header.origin is layout.Origin.REPLICA
            assert whole(info.step, reader.load(info, copy=True))
        t.finish()
    finally:
        pusher.close()
        link.close()
        server.close()
    assert [line for line in lines if "fall behind" not in line] == []


def test_a_replica_torn_mid_copy_is_never_used(tmp_path: Path, trainers: list[Trainer]) -> None:
    mine, theirs = _area(tmp_path, "n0"), _area(tmp_path, "n1")
    lines: list[str] = []
    server = peer.PeerServer(theirs, SECRET, host="127.0.0.1", max_size=1 << 30, event=lines.append)
    try:
        t = start(trainers, mine, rank=0, world=2, cycle=1, mib=4)
        assert t.ask("snap 1") == "snap 1 True"
        first = reader.newest(mine, "rank-00000")
        assert first is not None
        peer.push(peer.Address("127.0.0.1", server.port), SECRET, first)
        assert t.ask("snap 2") == "snap 2 True"
        dying = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.integration.snapshot_peer",
                str(mine),
                "--push",
                f"127.0.0.1:{server.port}",
                "rank-00000",
            ],
            cwd=ROOT,
            env={**os.environ, "SLURM_FT_JOB_SECRET": SECRET.decode()},
            timeout=60,
            check=False,
        )
        assert dying.returncode == -9
        wait_until(lambda: any("was not kept" in line for line in lines), 30, message="the refusal")
    finally:
        server.close()
    assert [(i.step, i.header.origin) for i in reader.complete_slots(theirs, "rank-00000")] == [
        (1, layout.Origin.REPLICA)
    ]
    assert any(
        line.startswith(
            "snapshots: a transfer with 127.0.0.1 failed: the replica from 127.0.0.1 "
            "was not kept: the stream ended after"
        )
        for line in lines
    ), lines
    t.finish()
    spare = start(trainers, theirs, rank=0, world=2, cycle=2)
    assert spare.ask("restore") == "restored 1 replica True"


def test_a_transfer_without_the_job_secret_is_refused_both_ways(
    tmp_path: Path, trainers: list[Trainer], nodes: list[Node]
) -> None:
    one, spare = _area(tmp_path, "n1"), _area(tmp_path, "spare")
    t = start(trainers, one, rank=0, world=2, cycle=1)
    assert t.ask("snap 3 replicated") == "snap 3 True"
    holder = Node(one)
    nodes.append(holder)
    with pytest.raises(peer.PeerError, match="refused: not authenticated with this job's secret"):
        peer.fetch(
            holder.address, b"another job's secret, 32 bytes long", REPLICATED, 3, spare, max_size=1 << 30
        )
    info = reader.newest(one, REPLICATED)
    assert info is not None
    with pytest.raises(peer.PeerError, match="refused: not authenticated"):
        peer.push(holder.address, b"x" * 32, info)
    assert reader.describe(spare) == []
    code, err = holder.finish()
    assert code == 0
    assert (
        err.count("snapshots: refused a transfer from 127.0.0.1: not authenticated with this job's secret")
        == 2
    )


def test_a_launcher_whose_only_holder_dies_mid_transfer_says_the_checkpoint_and_keeps_no_snapshot(
    tmp_path: Path, trainers: list[Trainer], nodes: list[Node]
) -> None:
    from slurm_ft.launch.snapshots.lostnode import Holdings, LostNodes, Part, parts

    one, spare = _area(tmp_path, "n1"), _area(tmp_path, "spare")
    t = start(trainers, one, rank=0, world=2, cycle=1, mib=4)
    assert [t.ask(f"snap {s} replicated") for s in (6, 7)] == ["snap 6 True", "snap 7 True"]
    t.finish()
    holder = Node(one, "--die-mid-send")
    nodes.append(holder)
    lines: list[str] = []
    me = LostNodes(spare, SECRET, 2, "127.0.0.1", limit=None, event=lines.append)
    try:
        published = {
            0: None,  # node 0 was lost: it published nothing
            1: Holdings(holder.address, reader.held_steps(one)).encode(),
            2: None,  # the spare holds nothing: it publishes nothing
        }
        assert me.holdings() is None
        planned = parts(published, (2, 1), 1)  # node 0's plan, as the spare reads its part of it
        assert planned is not None
        mine = Part.decode(planned[2].encode())
        assert mine == planned[2]
        failed = me.prepare(mine)
    finally:
        me.close()
    assert lines[0] == "snapshots: the cycle resumes at step 7: replicated from node 1's memory"
    assert lines[1].startswith(
        "snapshots: replicated of step 7 not fetched from node 1: the copy of replicated"
    )
    assert failed is not None and failed.startswith("snapshots: no surviving copy of replicated at step 7")
    assert failed.endswith(
        "this node's ranks start from the checkpoint and the cycle ends "
        "so the next one plans without the lost holder"
    )
    assert reader.describe(spare) == []
    assert Holdings.decode("not json") is None and Holdings.decode('{"address": "x", "held": {}}') is None
    assert Holdings.decode(
        '{"address": null, "held": {"rank-00001": [3, "x"], "replicated": [2]}}'
    ) == Holdings(None, {"replicated": [2]})
