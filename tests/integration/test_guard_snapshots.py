"""The no-progress guard of a real run whose store host stands by (#44's lose-node runs):
node 0 is retired as a suspect after the first failure, the spare takes node rank 0, and
the job's snapshots move on elsewhere while its checkpoint never does. The guard read node
0's own memory, which stayed at the step of its last active cycle, so two trained cycles
in a row counted as no progress and the job was stopped for good (93)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.launch_cluster import SimJob
from tests.integration.test_snapshots_launch import BASE, trainer, unique

pytestmark = pytest.mark.torch

STEPS = 50


@pytest.mark.timeout(300)
def test_the_guard_counts_the_snapshots_of_node_rank_0_when_node_0_stands_by(tmp_path: Path) -> None:
    iteration = tmp_path / "iteration.txt"
    iteration.write_text("5\n")  # a checkpoint that never moves
    guard = ["--checkpoint-iteration-file", str(iteration), "--max-no-progress-cycles", "2"]
    spares = ["--spare-nodes", "1", "--suspect-after", "1"]
    job = SimJob(
        tmp_path,
        3,
        [*BASE, "--max-restarts", "3", *spares, *guard],
        trainer(
            tmp_path,
            *("--steps", str(STEPS), "--step-time", "0.1", "--ckpt-every", "1000"),
            # rank 0 (the rank whose node is node rank 0) further in each cycle, wherever
            # it resumed from: node 0 hosts it first, is suspect and stands by from then on
            *("--fault", "kill", "--fault-rank", "0,0,0", "--fault-step", "6,20,34"),
        ),
        job_id=unique("44444"),
    ).start()
    try:
        codes = job.wait(240)
    finally:
        job.kill()
    ledger = json.loads((job.state / "ledger.json").read_text())
    for cycle in (1, 2):  # node 0 stood by while the others trained from memory
        placed = job.cycle_record(cycle)
        assert "node0" not in placed["active_nodes"], placed
    assert codes == [0, 0, 0], (ledger, job.dump())
    assert [c["progressed"] for c in ledger["cycles"][:3]] == [True, True, True], ledger
    ends = [c["snapshot_end"] for c in ledger["cycles"][:3]]
    assert ends[0] < ends[1] < ends[2], ledger  # the job's steps, not node 0's
    assert ledger["stopped"] is None
