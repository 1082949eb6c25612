"""The state dir a real job leaves (#45): what a cycle adds goes into each node's own
directory (``nodes/<node>/``), never into a directory that every node writes into per
cycle, and every reader of those files finds them there: the drill's targets, a
successor's fence, ``slurm-ft-logs --failure``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from slurm_ft.drill import targets
from slurm_ft.launch.succession import fence
from slurm_ft.statedir import StateDir
from tests.integration.launch_cluster import ECHO, SimJob, clean_env
from tests.support import nodefiles

BASE = ["--nproc-per-node", "2", "--health-checks", "none", "--monitor-interval", "0.05"]


@pytest.fixture(scope="module")
def crashed_once(tmp_path_factory) -> SimJob:
    """Two simulated nodes, two ranks each; rank 2 (node1) writes its error file and
    fails in cycle 0, cycle 1 succeeds."""
    tmp = tmp_path_factory.mktemp("layout")
    worker = [str(ECHO), "--out", str(tmp / "out"), "--crash-rank", "2", "--crash-restart", "0", "--record"]
    job = SimJob(tmp, 2, [*BASE, "--applog-prefix", str(tmp / "logs" / "job.log")], worker).start()
    try:
        assert job.wait(90) == [0, 0], job.dump()
    finally:
        job.kill()
    job.assert_no_orphans()
    return job


def _dirs(root) -> set[str]:
    return {os.path.relpath(d, root) for d, _, _ in os.walk(root)} - {"."}


@pytest.mark.timeout(120)
def test_a_cycle_adds_no_directory_and_writes_only_into_each_nodes_own(crashed_once):
    state = crashed_once.state
    assert _dirs(state) == {"cycles", "outcomes", "nodes", "nodes/node0", "nodes/node1"}, _dirs(state)
    for k in range(2):
        lines = (state / "nodes" / f"node{k}" / "processes.jsonl").read_text().splitlines()
        docs = [json.loads(line) for line in lines]
        assert [(d["cycle"], d["node"]) for d in docs] == [(0, f"node{k}"), (1, f"node{k}")]
        assert [[w["rank"] for w in d["workers"]] for d in docs] == [[2 * k, 2 * k + 1]] * 2
    own = sorted(os.listdir(state / "nodes" / "node1"))
    assert own == ["cycle0-rank2.error.json", "processes.jsonl"], own  # rank 2's @record
    assert os.listdir(state / "nodes" / "node0") == ["processes.jsonl"]


@pytest.mark.timeout(60)
def test_the_drill_and_the_fence_find_the_pids_each_node_appended(crashed_once):
    state = StateDir(crashed_once.state)
    shape = targets.newest_shape(state)
    assert shape is not None
    assert (shape.cycle, shape.active_nodes, sorted(shape.processes)) == (
        1,
        ("node0", "node1"),
        ["node0", "node1"],
    )
    newest = nodefiles.processes(state, "node1", 1)
    assert [w.pid for w in shape.processes["node1"].workers] == [w["pid"] for w in newest["workers"]]
    run_uuid = newest["run_uuid"]
    found = fence.recorded(state, "node1", [1, 0], run_uuid)
    assert found is not None and (found.cycle, found.launcher_pid) == (1, newest["launcher_pid"])
    assert fence.recorded(state, "node1", [0], run_uuid).cycle == 0  # type: ignore[union-attr]
    assert fence.recorded(state, "node1", [1], "another run") is None


@pytest.mark.timeout(60)
def test_logs_failure_names_the_error_file_in_the_failing_nodes_directory(crashed_once):
    cmd = [sys.executable, "-m", "slurm_ft.cli.logs", "--state-dir", str(crashed_once.state)]
    res = subprocess.run(
        [*cmd, "--cycle", "0", "--failure", "--json"],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert (doc["failure"]["rank"], doc["failure"]["node"]) == (2, "node1")
    err = crashed_once.state / "nodes" / "node1" / "cycle0-rank2.error.json"
    assert {"path": str(err), "size": err.stat().st_size} in doc["files"]
