"""A plan part that is not sealed with the job secret (#44): on real launchers of the cycle
harness (one in-memory store, real snapshot areas and peer services), an outsider's value
replaces node 1's part of cycle 0 as node 0 writes it. Node 1 must not let its workers
resume from its own newest (the others resume from the planned step): it says so, removes
its slots, starts no worker, and ends the cycle; the next cycle plans again and node 1
fetches the step from a peer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from slurm_ft.launch.rendezvous.localstore import LocalConnection
from tests.support import nodefiles
from tests.unit.test_snapshot_plan_reads import NODES, CountingConnection, CountingStore, SnapshotCycle

FORGED = b"sft1:" + b"0" * 64 + b':{"acts": true, "step": 3, "sources": [], "holders": {}, "target": null}'


class ForgingStore(CountingStore):
    """Node 0's first write of node 1's part is replaced by an outsider's value."""

    forged = False

    def connect(self) -> LocalConnection:
        return ForgingConnection(self)


class ForgingConnection(CountingConnection):
    store: ForgingStore

    def multi_set(self, keys: Sequence[str], values: Sequence[str | bytes]) -> None:
        out = list(values)
        for n, key in enumerate(keys):
            if key.endswith("/c0/snapplan/1") and not self.store.forged:
                out[n], self.store.forged = FORGED, True
        super().multi_set(keys, out)


def test_a_forged_plan_part_starts_no_worker_on_its_node_and_the_next_cycle_plans_again(
    tmp_path: Path,
) -> None:
    c = SnapshotCycle(tmp_path, held=5)
    c.store = ForgingStore()
    c.epochs = {0: c.store}
    c.start()
    assert c.finish() == [0] * NODES
    one = c.node(1).events()
    assert "ignored a value of store key" in one and "/c0/snapplan/1" in one, one
    assert (
        "snapshots: node 0's plan for this node could not be read (not sealed with this job's secret); "
        "this node's ranks start from the checkpoint and the cycle ends so the next one plans again"
    ) in one
    cycle0 = nodefiles.processes(c.state, "node1", 0)
    assert cycle0["workers"] == [], cycle0  # no rank of a cycle that cannot know its step
    assert nodefiles.processes(c.state, "node2", 0)["workers"]
    assert "snapshots: the cycle resumes at step 5: replicated from node 0's memory" in one, one
    assert "snapshots: replicated of step 5 fetched from node 0 (peer memory)" in one, one
    for k in range(2, NODES):
        assert "snapshots: the cycle resumes at step 5: replicated from own memory" in c.node(k).events()
