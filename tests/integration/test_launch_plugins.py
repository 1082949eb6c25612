"""The pieces plugged into the cycle loop: per-cycle application log, health checks before
each join (exit 94 everywhere), the no-progress guard (exit 93)."""

from __future__ import annotations

import json

import pytest

from tests.integration.launch_cluster import ECHO, SimJob

BASE = ["--nproc-per-node", "2", "--monitor-interval", "0.05"]


@pytest.mark.timeout(90)
def test_application_log_per_cycle_with_rank_prefixes(tmp_path):
    prefix = tmp_path / "logs" / "job.log"
    args = [*BASE, "--health-checks", "none", "--applog-prefix", str(prefix)]
    worker = [
        str(ECHO),
        "--out",
        str(tmp_path / "out"),
        "--crash-rank",
        "1",
        "--crash-restart",
        "0",
        "--sync",
    ]
    job = SimJob(tmp_path, 2, args, worker).start()
    try:
        assert job.wait(60) == [0, 0], job.dump()
        c0 = (tmp_path / "logs" / "job_cycle0.log").read_text().splitlines()
        c1 = (tmp_path / "logs" / "job_cycle1.log").read_text().splitlines()
        assert "1: rank 1: crashing at step 1" in c0
        for rank in range(4):
            assert f"{rank}: rank {rank}: start restart=1 cycle=1" in c1
            assert f"{rank}: rank {rank}: done" in c1
        # worker output went to the files, not to the launchers' stdout
        assert job.node(0).out() == "" and job.node(1).out() == ""
        job.assert_no_orphans()
    finally:
        job.kill()


@pytest.mark.timeout(90)
def test_unhealthy_node_ends_the_attempt_with_94_everywhere(tmp_path):
    (tmp_path / "scratch" / "node0").mkdir(parents=True)  # node1's path is missing
    args = [
        *BASE,
        "--health-checks",
        "storage",
        "--paths",
        str(tmp_path / "scratch" / "%n"),
        "--join-timeout",
        "60",
    ]
    job = SimJob(tmp_path, 2, args, [str(ECHO), "--out", str(tmp_path / "out")]).start()
    try:
        assert job.wait(30) == [94, 94], job.dump()
        assert job.starts() == []  # no worker started anywhere
        out = job.outcome()
        assert (out["exit_code"], out["outcome"], out["unhealthy_nodes"], out["cycles"]) == (
            94,
            "unhealthy",
            ["node1"],
            0,
        )
        assert out["reason"].startswith("unhealthy: node1: storage")
        rec = json.loads((job.state / "unhealthy" / "node1.json").read_text())
        assert rec["node"] == "node1" and rec["reason"].startswith("storage")
        assert "node unhealthy: storage" in job.node(1).err()
        job.assert_no_orphans()
    finally:
        job.kill()


@pytest.mark.timeout(120)
def test_no_progress_guard_stops_with_93(tmp_path):
    it = tmp_path / "latest_checkpointed_iteration.txt"
    it.write_text("100\n")  # never moves: the worker crashes before any checkpoint
    args = [
        *BASE,
        "--health-checks",
        "none",
        "--max-restarts",
        "5",
        "--checkpoint-iteration-file",
        str(it),
        "--max-no-progress-cycles",
        "2",
    ]
    job = SimJob(
        tmp_path, 2, args, [str(ECHO), "--out", str(tmp_path / "out"), "--crash-rank", "0", "--sync"]
    ).start()
    try:
        assert job.wait(90) == [93, 93], job.dump()
        out = job.outcome()
        assert (out["exit_code"], out["outcome"], out["cycles"]) == (93, "no-progress", 2)
        assert {s["restart"] for s in job.starts()} == {0, 1}
        job.assert_no_orphans()
    finally:
        job.kill()
