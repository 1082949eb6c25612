"""Replicas on the job-wide grid (#44), with real trainers, real pushers, the planner's
service and a slow link: a replica many steps behind the trainer is still of a step every
node holds, so a lost node resumes at one recent step; and a reader of a replica's slot
reads again when a landing replica replaces the file it was reading."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import pytest

from slurm_ft.launch.snapshots import grid, peer, sources
from slurm_ft.launch.snapshots.replicas import GridAim, ReplicaPusher
from slurm_ft.snapshot import layout, reader, ship
from tests.integration.snapshot_worker import whole
from tests.support.slowlink import SlowLink
from tests.support.snaptrainer import Trainer, start
from tests.support.waiting import wait_until

pytestmark = pytest.mark.torch
SECRET = b"0123456789abcdef0123456789abcdef-job"
KEYS = ("rank-00000", "rank-00001")


def _area(tmp_path: Path, name: str) -> Path:
    made = tmp_path / name
    made.mkdir(mode=0o700)
    return made


def _whole_at(area: Path, key: str, step: int) -> bool:
    got = reader.load_newest(area, key, copy=True, step=step)
    return got is not None and whole(step, got[1])


def test_a_replica_many_steps_behind_is_of_a_step_every_node_still_holds(
    tmp_path: Path, trainers: list[Trainer]
) -> None:
    """Two nodes in a ring over links slower than the trainers (a 4 MiB shard at 8 MiB/s:
    a copy spans many steps). Each node keeps its snapshot of the agreed step (``.2``)
    beside its two newest; a receiver never puts a replica in that step's place. Node 1
    lost at any moment: node 0 still holds its own shard and node 1's replica at one step,
    whole, where its two newest are far ahead."""
    areas = [_area(tmp_path, "n0"), _area(tmp_path, "n1")]
    lines: list[str] = []
    servers = [
        peer.PeerServer(a, SECRET, host="127.0.0.1", max_size=1 << 30, event=lines.append) for a in areas
    ]
    coordinator = grid.Coordinator()
    servers[0].coordinator = coordinator
    coordinator.reset(epoch=1, nodes=2)
    planner = peer.Address("127.0.0.1", servers[0].port)
    links = [SlowLink(peer.Address("127.0.0.1", s.port), bytes_per_s=8 << 20) for s in servers]
    pushers = [ReplicaPusher(a, SECRET, poll_s=0.005, event=lines.append) for a in areas]
    try:
        ts = [start(trainers, a, rank=r, world=2, cycle=1, mib=4) for r, a in enumerate(areas)]
        for r, p in enumerate(pushers):
            p.aim(links[1 - r].address, GridAim(planner, 1, r))
        step, checked = 0, 0
        deadline = time.monotonic() + 150
        while checked < 3 and time.monotonic() < deadline:
            step += 1
            assert [t.ask(f"snap {step}") for t in ts] == [f"snap {step} True"] * 2
            agreed = pushers[0].agreed
            if agreed is None or agreed > step - 4 or agreed != pushers[1].agreed:
                continue
            # the moment: replicas lag at least four steps; node 1 is lost now
            held = {0: reader.held_steps(areas[0])}
            plan = sources.plan(held, {0: ["rank-00000"], 2: ["rank-00001"]})
            assert plan.step is not None and plan.step >= agreed, (held, agreed)
            assert plan.sources[2] == (sources.Source("rank-00001", sources.Via.PEER, 0),)
            assert _whole_at(areas[0], "rank-00000", plan.step) and _whole_at(
                areas[0], "rank-00001", plan.step
            )
            own = reader.complete_slots(areas[0], "rank-00000")
            assert [i.step for i in own][:2] == [step, step - 1]  # the trainer's two newest, as ever
            kept = reader.read_header(layout.kept_paths(areas[0], "rank-00000")[0])
            assert kept is not None and kept.header.step == agreed
            replica = [i for i in reader.complete_slots(areas[0], "rank-00001") if i.step == agreed]
            assert replica and replica[0].header.origin is layout.Origin.REPLICA
            checked += 1
            step_at = step
            while pushers[0].agreed == agreed and time.monotonic() < deadline:  # the next round, then again
                step += 1
                assert [t.ask(f"snap {step}") for t in ts] == [f"snap {step} True"] * 2
                time.sleep(0.02)
            assert step > step_at
        assert checked == 3, (step, pushers[0].agreed, pushers[0].counts, lines)
        # today's rule (the two newest of every rank, and the replica's newest) finds no common step
        two_newest = {
            0: {"rank-00000": [step, step - 1], "rank-00001": [reader.newest(areas[0], "rank-00001").step]}
        }  # type: ignore[union-attr]
        assert sources.plan(two_newest, {0: ["rank-00000"], 2: ["rank-00001"]}).step is None
        for t in ts:
            assert t.finish()[0] == 0
    finally:
        for p in pushers:
            p.close()
        for link in links:
            link.close()
        for s in servers:
            s.close()
    assert [line for line in lines if "fall behind" not in line] == []  # said once: copies span steps here


def test_a_reader_of_replicas_reads_again_when_a_landing_replica_replaces_its_file(
    tmp_path: Path, trainers: list[Trainer]
) -> None:
    """A replica lands in place of its key's older slot: a reader that looked at the slots
    just before opens a file that is gone, or reads one that is replaced. It reads the
    newest complete snapshot again (a bounded number of times), and a fetch's sender holds
    the step's file again, so neither ever gives a torn snapshot or falls back."""
    mine, theirs, third = _area(tmp_path, "n0"), _area(tmp_path, "n1"), _area(tmp_path, "n2")
    lines: list[str] = []
    server = peer.PeerServer(theirs, SECRET, host="127.0.0.1", max_size=1 << 30, event=lines.append)
    pusher = ReplicaPusher(mine, SECRET, poll_s=0.001, event=lines.append)
    t = start(trainers, mine, rank=0, world=2, cycle=1, mib=1)
    stop = threading.Event()
    taken: list[int] = []

    def train() -> None:
        step = 0
        while not stop.is_set():
            words = t.ask(f"run {step + 1} {step + 5}").split()
            step += 5
            taken.append(int(words[2]))

    trainer = threading.Thread(target=train)
    try:
        pusher.aim(peer.Address("127.0.0.1", server.port))
        trainer.start()
        reads = sends = 0
        deadline = time.monotonic() + 120
        while (reads < 200 or pusher.counts.kept < 50) and time.monotonic() < deadline:
            got = reader.load_newest(theirs, "rank-00000", copy=True)
            if got is not None:
                info, state = got
                assert info.header.origin is layout.Origin.REPLICA and whole(info.step, state), info
                reads += 1
                with ship.held_step(theirs, "rank-00000", info.step) as held:
                    if held is not None:  # None: that step was replaced meanwhile, and said so
                        out = io.BytesIO()
                        assert ship.send(held, out).whole  # type: ignore[arg-type]
                        out.seek(0)
                        arrived = ship.receive(third, out, origin=layout.Origin.PEER, max_size=1 << 30)  # type: ignore[arg-type]
                        assert arrived.step == info.step and _whole_at(third, "rank-00000", info.step)
                        sends += 1
        assert reads >= 200 and pusher.counts.kept >= 50, (reads, pusher.counts)
        assert sends >= 100, sends
        # the race, made certain: a reader that looked, then two replicas landed meanwhile
        looked = reader.newest(theirs, "rank-00000")
        assert looked is not None
        kept = pusher.counts.kept
        wait_until(lambda: pusher.counts.kept >= kept + 2, 60, message="two more replicas")
        with pytest.raises(reader.Torn):  # its file gone, or another in its place
            reader.load(looked, copy=True)  # what a reader used to meet
        got = reader.load_newest(theirs, "rank-00000", copy=True, looked=looked)
        assert got is not None and got[0].step > looked.step and whole(got[0].step, got[1])
    finally:
        stop.set()
        trainer.join(60)
        pusher.close()
        server.close()
    assert t.finish()[0] == 0
    assert [line for line in lines if "fall behind" not in line] == []
