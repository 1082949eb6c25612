"""What snapshots between nodes (#44) cost the store per cycle, counted on real launchers
(the cycle harness of ``test_launch_cycle``: several launchers in one process over one
in-memory store, real workers, real snapshot areas and peer services): node 0 alone reads
what the launchers hold, each launcher reads its own part of the plan (one key), and a
job whose nodes hold nothing writes and reads no snapshot key at all, nor a snapshot
record per node and cycle. Before, every
launcher read every launcher's holdings: N^2 key reads at node 0 per cycle."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import torch

from slurm_ft import procident
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.rendezvous.jobsecret import StoreAuth
from slurm_ft.launch.rendezvous.localstore import LocalConnection, LocalStore
from slurm_ft.snapshot import layout, writer
from tests.unit.test_launch_cycle import EXIT0, Cycle, Node

NODES = 6
SECRET = b"s" * 32


class CountingStore(LocalStore):
    """The in-memory store, remembering every key any connection asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []
        self.written: list[str] = []
        self._count_lock = threading.Lock()

    def connect(self) -> LocalConnection:
        return CountingConnection(self)

    def note(self, asked: Sequence[str] = (), written: Sequence[str] = ()) -> None:
        with self._count_lock:
            self.asked.extend(asked)
            self.written.extend(written)

    def count(self, keys: list[str], part: str) -> int:
        with self._count_lock:
            return sum(1 for k in keys if f"/{part}/" in k)


class CountingConnection(LocalConnection):
    store: CountingStore

    def get(self, key: str) -> bytes:
        self.store.note(asked=[key])
        return super().get(key)

    def check(self, keys: Sequence[str]) -> bool:
        self.store.note(asked=keys)
        return super().check(keys)

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        self.store.note(asked=keys)
        return super().multi_get(keys)

    def set(self, key: str, value: str | bytes) -> None:
        self.store.note(written=[key])
        super().set(key, value)

    def multi_set(self, keys: Sequence[str], values: Sequence[str | bytes]) -> None:
        self.store.note(written=keys)
        super().multi_set(keys, values)


class SnapshotCycle(Cycle):
    """Launchers with a job secret; with ``held``, each node's area holds a replicated
    snapshot of that step before its launcher starts (as a previous cycle's workers left it)."""

    def __init__(self, tmp: Path, held: int | None) -> None:
        super().__init__(tmp, NODES, EXIT0)
        self.store = CountingStore()
        self.epochs = {0: self.store}
        self.held = held

    def config(self, node: int) -> AgentConfig:
        return dataclasses.replace(super().config(node), auth=StoreAuth(SECRET, "test"))

    def _drive(self, node: Node) -> None:  # type: ignore[override]
        area = node.agent.snapshots.path
        assert area is not None and node.agent.lost_nodes is None  # made once node 0 is reached
        if self.held is not None:
            pid = os.getpid()
            k = node.agent.cfg.job.node_rank
            me = writer.Identity(NODES, k, k, 0, 1, 0, pid, procident.start_ticks(pid))
            done = writer.SlotWriter(area, layout.REPLICATED, me, None).write(self.held, {"w": torch.ones(4)})
            assert done.outcome is writer.Outcome.KEPT, done
        Cycle._drive(node)


def test_node0_alone_reads_the_holdings_and_each_launcher_its_own_part(tmp_path: Path) -> None:
    c = SnapshotCycle(tmp_path, held=5).start()
    assert c.finish() == [0] * NODES
    store = c.store
    assert isinstance(store, CountingStore)
    # node 0: one check and one multi-get of the N holdings; each launcher: its one part
    assert store.count(store.asked, "snap") == 2 * NODES
    assert store.count(store.asked, "snapplan") == 2 * NODES
    assert store.count(store.written, "snap") == NODES
    assert store.count(store.written, "snapplan") == NODES
    for k in range(NODES):
        assert "snapshots: the cycle resumes at step 5: replicated from own memory" in c.node(k).events()


def test_workers_that_never_snapshot_cost_no_snapshot_key_or_record(tmp_path: Path) -> None:
    c = SnapshotCycle(tmp_path, held=None).start()
    assert c.finish() == [0] * NODES
    store = c.store
    assert isinstance(store, CountingStore)
    assert store.count(store.written, "snap") == store.count(store.written, "snapplan") == 0
    assert store.count(store.asked, "snapplan") == store.count(store.asked, "snap") == 0
    for k in range(NODES):  # workers that never touched their area: no service, line or record
        assert "snapshots: serving" not in c.node(k).events()
        assert "newest snapshot here" not in c.node(k).events()
        assert not c.state.node_snapshots(f"node{k}").exists()
