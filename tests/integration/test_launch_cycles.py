"""Whole launcher runs on simulated nodes with torch-free workers: success, restarts, budget."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.integration.launch_cluster import ECHO, SimJob

BASE = ["--nproc-per-node", "2", "--health-checks", "none", "--monitor-interval", "0.05"]


def echo(job_tmp, *extra: str) -> list[str]:
    return [str(ECHO), "--out", str(job_tmp / "out"), *extra]


@pytest.mark.timeout(90)
def test_success_two_nodes_torchrun_environment(tmp_path):
    job = SimJob(tmp_path, 2, BASE, echo(tmp_path)).start()
    try:
        assert job.wait(60) == [0, 0], job.dump()
        starts = sorted(job.starts(), key=lambda s: s["rank"])
        assert [s["rank"] for s in starts] == [0, 1, 2, 3]
        for s in starts:
            env = s["env"]
            rank = s["rank"]
            assert env["WORLD_SIZE"] == "4"
            assert env["LOCAL_RANK"] == str(rank % 2)
            assert env["GROUP_RANK"] == str(rank // 2)
            assert env["GROUP_WORLD_SIZE"] == "2"
            assert env["LOCAL_WORLD_SIZE"] == "2"
            assert env["ROLE_RANK"] == str(rank)
            assert env["ROLE_WORLD_SIZE"] == "4"
            assert env["ROLE_NAME"] == "default"
            assert env["MASTER_ADDR"] == "127.0.1.1"
            assert env["TORCHELASTIC_RESTART_COUNT"] == "0"
            assert env["TORCHELASTIC_MAX_RESTARTS"] == "3"
            assert env["TORCHELASTIC_RUN_ID"] == "4242-a0"
            assert env["OMP_NUM_THREADS"] == "1"
            assert env["SLURM_FT_CYCLE"] == "0"
            assert env["SLURM_FT_CYCLE_INFO"] == str(job.state / "cycles" / "cycle0.json")
            own = job.state / "nodes" / f"node{env['GROUP_RANK']}"  # each node's own directory
            assert env["TORCHELASTIC_ERROR_FILE"] == str(own / f"cycle0-rank{rank}.error.json")
        assert len({s["env"]["MASTER_PORT"] for s in starts}) == 1
        rec = job.cycle_record(0)
        assert rec["outcome"] == "succeeded"
        assert rec["nodes"] == ["node0", "node1"]
        assert rec["world_size"] == 4
        assert rec["master_port"] == int(starts[0]["env"]["MASTER_PORT"])
        out = job.outcome()
        assert (out["exit_code"], out["outcome"], out["cycles"], out["unhealthy_nodes"]) == (
            0,
            "finished",
            1,
            [],
        )
        assert "cycle 0: all workers on all nodes finished" in job.node(1).err()
        job.assert_no_orphans()
    finally:
        job.kill()


@pytest.mark.timeout(120)
def test_crash_once_three_nodes_then_all_succeed(tmp_path):
    job = SimJob(
        tmp_path, 3, BASE, echo(tmp_path, "--crash-rank", "3", "--crash-restart", "0", "--record", "--sync")
    ).start()
    try:
        assert job.wait(90) == [0, 0, 0], job.dump()
        starts = job.starts()
        second = sorted(s["rank"] for s in starts if s["restart"] == 1)
        assert second == [0, 1, 2, 3, 4, 5]
        assert all(s["env"]["TORCHELASTIC_RESTART_COUNT"] == "1" for s in starts if s["restart"] == 1)
        assert all(s["env"]["SLURM_FT_CYCLE"] == "1" for s in starts if s["restart"] == 1)
        # A fresh MASTER_PORT each cycle.
        ports = {s["restart"]: s["env"]["MASTER_PORT"] for s in starts}
        assert ports[0] != ports[1]
        rec0 = job.cycle_record(0)
        assert rec0["outcome"] == "failed"
        f = rec0["first_failure"]
        assert (
            f["kind"],
            f["node"],
            f["node_rank"],
            f["rank"],
            f["local_rank"],
            f["exit_code"],
            f["signal"],
        ) == (
            "worker",
            "node1",
            1,
            3,
            1,
            3,
            None,
        )
        # Root cause from the TORCHELASTIC_ERROR_FILE the worker wrote, in the record and the log.
        assert f["message"] == "injected failure on rank 3 at step 1"
        assert "_write_error_file" in f["traceback"]
        assert (
            "cycle 0 failed: rank 3 (local 1) on node1 (node 1): exit code 3: injected failure"
            in job.node(0).err()
        )
        assert job.cycle_record(1)["outcome"] == "succeeded"
        assert job.cycle_record(1)["restart"] == 1
        out = job.outcome()
        assert (out["exit_code"], out["cycles"], out["first_cycle"], out["last_cycle"]) == (0, 2, 0, 1)
        job.assert_no_orphans()
    finally:
        job.kill()


@pytest.mark.timeout(120)
def test_crash_every_cycle_spends_the_job_wide_budget(tmp_path):
    args = [*BASE, "--max-restarts", "2"]
    job = SimJob(tmp_path, 2, args, echo(tmp_path, "--crash-rank", "0", "--sync")).start()
    try:
        assert job.wait(90) == [1, 1], job.dump()
        starts = job.starts()
        # exactly max_restarts + 1 cycles, on every node
        assert sorted({s["restart"] for s in starts}) == [0, 1, 2]
        for restart in (0, 1, 2):
            assert sorted(s["rank"] for s in starts if s["restart"] == restart) == [0, 1, 2, 3]
        out = job.outcome()
        assert (out["exit_code"], out["outcome"], out["cycles"]) == (1, "restarts-exhausted", 3)
        assert out["reason"].startswith("restart budget spent (2 restart(s), 3 cycle(s) failed)")
        assert out["first_failure"]["rank"] == 0
        for k in (0, 1):
            assert "stopping: restart budget spent" in job.node(k).err()
        assert not (job.state / "cycles" / "cycle3.json").exists()
        job.assert_no_orphans()
    finally:
        job.kill()


@pytest.mark.timeout(90)
def test_worker_killed_by_sigsegv_is_reported_by_signal_name(tmp_path):
    args = [*BASE, "--max-restarts", "0"]
    job = SimJob(tmp_path, 2, args, echo(tmp_path, "--crash-rank", "2", "--segv")).start()
    try:
        assert job.wait(60) == [1, 1], job.dump()
        f = job.cycle_record(0)["first_failure"]
        assert (f["rank"], f["exit_code"], f["signal"]) == (2, None, "SIGSEGV")
        assert "cycle 0 failed: rank 2 (local 0) on node1 (node 1): killed by SIGSEGV" in job.node(0).err()
        job.assert_no_orphans()
    finally:
        job.kill()


@pytest.mark.timeout(120)
def test_cycle_numbers_continue_across_requeues(tmp_path):
    first = SimJob(tmp_path, 2, [*BASE, "--max-restarts", "1"], echo(tmp_path, "--crash-rank", "1")).start()
    try:
        assert first.wait(60) == [1, 1], first.dump()
    finally:
        first.kill()
    second = SimJob(tmp_path / "again", 2, BASE, echo(tmp_path), attempt=1)
    second.tmp.mkdir()
    second.state.symlink_to(tmp_path / "state")
    second.start()
    try:
        assert second.wait(60) == [0, 0], second.dump()
        # The workers of both attempts append to the first job's output file.
        by_run: dict[str, set[str]] = {}
        for s in first.starts():
            by_run.setdefault(s["env"]["TORCHELASTIC_RUN_ID"], set()).add(s["env"]["SLURM_FT_CYCLE"])
        assert by_run == {"4242-a0": {"0", "1"}, "4242-a1": {"2"}}
        out = second.outcome()
        assert (out["attempt"], out["first_cycle"], out["last_cycle"], out["exit_code"]) == (1, 2, 2, 0)
        assert (tmp_path / "state" / "cycles" / "cycle2.json").exists()
    finally:
        second.kill()


@pytest.mark.timeout(120)
def test_a_kernel_without_pidfds_still_restarts_and_finishes(tmp_path):
    """No pidfd_open (tests/integration/no_pidfd_launch.py): exits are looked for instead of
    waited on, and the job runs as anywhere else: a crash, a restart, a success, one line
    saying so, nothing left behind."""
    no_pidfd = [sys.executable, str(Path(__file__).with_name("no_pidfd_launch.py"))]
    job = SimJob(
        tmp_path,
        2,
        BASE,
        echo(tmp_path, "--crash-rank", "2", "--crash-restart", "0", "--record", "--sync"),
        launch=no_pidfd,
    ).start()
    try:
        assert job.wait(90) == [0, 0], job.dump()
        assert sorted(s["rank"] for s in job.starts() if s["restart"] == 1) == [0, 1, 2, 3]
        rec0 = job.cycle_record(0)
        assert (rec0["outcome"], rec0["first_failure"]["rank"], rec0["first_failure"]["exit_code"]) == (
            "failed",
            2,
            3,
        )
        assert job.cycle_record(1)["outcome"] == "succeeded"
        for k in range(2):
            err = job.node(k).err()
            assert err.count("this kernel gives no pidfds") == 1, err
        job.assert_no_orphans()
    finally:
        job.kill()
