"""A successor notes its store's port for the followers only once that store holds the run
(``handover.lead``): a follower that read the note earlier found a store without the run,
gave up on that connection after its slice, probed every port of the job's sequence and
connected again, all of it taken by the successor's one store thread while it prepared
the store (issue 45)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurm_ft.launch.books.bookkeeper import Bookkeeper
from slurm_ft.launch.hostprobe import free_port
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.rendezvous import reads, stores
from slurm_ft.launch.rendezvous.protocol import Action, Base, Decision, Keys, next_epoch
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.succession import handover, rule
from tests.unit.test_launch_cycle import Cycle


def test_the_port_is_noted_once_the_store_holds_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cycle = Cycle(tmp_path, 3, "true", **{"launch.spare_nodes": 1})
    cfg = dataclasses.replace(cycle.config(1), rdzv_ports=(free_port(),))
    keys = next_epoch(Keys(cfg.run_id))
    base = Base(0, "run-a", keys.epoch, 1, 2)
    last = Decision(Action.RUN, 1, master_port=29500, start_time=0.0, nodes=("node0", "node1", "node2"))
    seen_at_note: list[bytes | None] = []
    noted = rule.publish_port

    def note(path: Path, port: int) -> None:  # what a follower reading the note would find
        store = stores.reconnect("127.0.0.1", port, 10.0)
        seen_at_note.append(reads.probe(store, keys.base))
        noted(path, port)

    monkeypatch.setattr(rule, "publish_port", note)
    events = EventLog(None, "node1", quiet=True)
    books = Bookkeeper.for_launcher(cfg, lambda: 0.0, events.event, lambda: False)
    led = handover.lead(cfg, keys, Sealer(None), books, events, base, last, 0, clock=lambda: 0.0)
    assert len(seen_at_note) == 1
    assert seen_at_note[0] is not None  # the run was there when a follower could read the note
    path = cfg.state.succession_port(cfg.run_id, keys.epoch)
    assert rule.await_port(path, cfg.rdzv_ports, until=0.0, abort=lambda: False) == led.client.port
