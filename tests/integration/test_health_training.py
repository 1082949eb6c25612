"""Health during training (issue 34, item 3): real launcher processes on simulated nodes,
the torch-free dead-mount worker (it prints until told to finish). A GPU fault (NVML, the
one boundary replaced: ``fake_gpu_launch.py``) or a storage path that goes bad while the
workers train is found by the periodic check (``--health-check-interval``), ends the cycle
as ``unhealthy`` naming the node, and then, as after a failed check before a join: without
spares the attempt ends with 94 naming the node; with a spare, the spare takes its node
rank and training goes on. A mount that stops answering is bounded by the health deadline
and never freezes the launcher."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from tests.integration.launch_cluster import SimJob
from tests.support.hungfs import StoppableFs
from tests.support.waiting import wait_until

WORKER = str(Path(__file__).with_name("deadmount_worker.py"))
FAKE_LAUNCH = [sys.executable, str(Path(__file__).with_name("fake_gpu_launch.py"))]
INTERVAL = 0.5
DEADLINE = 2.0
# Fault to cycle failed: one interval, one run (bounded by the deadline), the wake-up.
FOUND_WITHIN = INTERVAL + DEADLINE + 2.0
FAULTS = {
    "xid": {"recovery_action": 1},  # an Xid that asks for a GPU reset
    "ecc": {"volatile_uncorrected_ecc": 2},
    "gone": None,  # the GPU fell off the bus: NVML counts one GPU fewer
}


def job_of(tmp: Path, nodes: int, *args: str, fake_gpus: bool = False) -> SimJob:
    ctl = tmp / "ctl"
    ctl.mkdir(exist_ok=True)
    job = SimJob(
        tmp,
        nodes,
        [
            "--nproc-per-node", "1", "--monitor-interval", "0.2", "--max-restarts", "3",
            "--health-check-interval", str(INTERVAL), *args,
        ],
        [WORKER],
    )  # fmt: skip
    job.extra_env.update(
        {
            "DEADMOUNT_CTL": str(ctl),
            "SLURM_FT_HEALTH_DEADLINE": str(DEADLINE),
            "SLURM_FT_HEALTH_DISCOVER_MOUNTS": "false",
            "SLURM_FT_LAUNCH_HEARTBEAT_INTERVAL": "0.2",
            "SLURM_FT_LAUNCH_HEARTBEAT_TIMEOUT": "3",
        }
    )
    if fake_gpus:
        job.extra_env["FAKE_NVML_DIR"] = str(tmp / "nvml")
        job.launch = list(FAKE_LAUNCH)
    return job


def set_gpus(tmp: Path, node: str, gpus: list[dict]) -> None:
    """The node's GPUs as NVML will answer from its next open on (written whole)."""
    folder = tmp / "nvml"
    folder.mkdir(exist_ok=True)
    part = folder / f".{node}.tmp"
    part.write_text(json.dumps(gpus))
    os.replace(part, folder / f"{node}.json")


def starts(tmp: Path) -> list[dict]:
    path = tmp / "ctl" / "starts.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def wait_started(tmp: Path, restart: int, world: int, job: SimJob) -> None:
    wait_until(
        lambda: len({s["rank"] for s in starts(tmp) if s["restart"] == restart}) == world,
        60,
        message=f"restart {restart}'s {world} workers started\n" + job.dump(),
    )


def wait_failed(job: SimJob, cycle: int, within: float) -> dict:
    path = job.state / "cycles" / f"cycle{cycle}.json"

    def failed() -> dict | None:
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return rec if rec.get("outcome") == "failed" else None

    return wait_until(failed, within, message=f"cycle {cycle} failed\n" + job.dump())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_gpu_fault_while_training_ends_the_cycle_unhealthy_and_the_attempt_with_94(tmp_path, fault):
    healthy = [{}, {}]
    set_gpus(tmp_path, "node0", healthy)
    set_gpus(tmp_path, "node1", healthy)
    job = job_of(tmp_path, 2, "--health-checks", "gpu", fake_gpus=True).start()
    try:
        wait_started(tmp_path, 0, 2, job)
        broken = FAULTS[fault]
        set_gpus(tmp_path, "node1", [{}] if broken is None else [{}, broken])
        t0 = time.time()
        rec = wait_failed(job, 0, FOUND_WITHIN + 5)
        assert job.wait(30) == [94, 94], job.dump()
        first = rec["first_failure"]
        assert (first["kind"], first["node"], first["node_rank"]) == ("unhealthy", "node1", 1), first
        detail = {
            "xid": "gpu:1: recovery action GPU_RESET",
            "ecc": "gpu:1: 2 volatile uncorrected ECC errors",
            "gone": "gpu:count: found 1 GPUs, expected 2",
        }[fault]
        assert first["detail"] == f"health check while training: {detail}"
        assert first["time"] - t0 < FOUND_WITHIN, f"found {first['time'] - t0:.2f} s after the fault"
        out = job.outcome()
        assert (out["exit_code"], out["outcome"], out["unhealthy_nodes"]) == (94, "unhealthy", ["node1"]), out
        assert out["reason"] == f"unhealthy: node1: {detail}"
        record = json.loads((job.state / "unhealthy" / "node1.json").read_text())
        # node1's own record, with its whole report: node 0 writes one on a node's behalf
        # only where the node left none of this finding (its state dir failed it).
        assert record["reason"] == detail and "reported_by" not in record, record
        assert record["report"]["healthy"] is False, record
        assert "node unhealthy while training: " + detail in job.node(1).err()
        assert "health checks while training: gpu every 0.5 s" in job.node(0).err()
        assert {s["restart"] for s in starts(tmp_path)} == {0}, "no worker started on a bad node again"
        job.assert_no_orphans()
    finally:
        job.kill()


@pytest.mark.timeout(120)
def test_a_storage_path_gone_bad_moves_the_node_rank_to_a_spare_and_training_goes_on(tmp_path):
    data = tmp_path / "data"
    for k in range(3):
        (data / f"node{k}").mkdir(parents=True)
    job = job_of(
        tmp_path, 3, "--health-checks", "storage", "--paths", f"{data}/%n", "--spare-nodes", "1"
    ).start()
    try:
        wait_started(tmp_path, 0, 2, job)
        shutil.rmtree(data / "node1")  # node1's file system lost its data
        rec = wait_failed(job, 0, FOUND_WITHIN + 5)
        first = rec["first_failure"]
        assert (first["kind"], first["node"]) == ("unhealthy", "node1"), first
        assert first["detail"] == f"health check while training: storage:{data}/node1: does not exist"
        wait_started(tmp_path, 1, 2, job)
        (tmp_path / "ctl" / "finish").touch()
        assert job.wait(60) == [0, 0, 0], job.dump()
        again = job.cycle_record(1)
        assert again["active_nodes"] == ["node0", "node2"], again
        assert again["replacements"] == [
            f"node rank 1: node1 -> node2 (unhealthy: storage:{data}/node1: does not exist)"
        ]
        out = job.outcome()
        assert (out["exit_code"], out["cycles"]) == (0, 2), out
        job.assert_no_orphans()
    finally:
        job.kill()


@pytest.mark.timeout(120)
def test_a_mount_that_stops_answering_is_unhealthy_within_the_deadline_and_freezes_nothing(
    tmp_path, stoppable_fs
):
    fs: StoppableFs = stoppable_fs()
    (fs.root / "data").mkdir()
    job = job_of(tmp_path, 1, "--health-checks", "storage", "--paths", str(fs.mount / "data")).start()
    try:
        wait_started(tmp_path, 0, 1, job)
        fs.stop()  # from now on a stat there sleeps in the kernel, as on a dead Lustre server
        t0 = time.time()
        rec = wait_failed(job, 0, FOUND_WITHIN + 5)
        first = rec["first_failure"]
        assert first["kind"] == "unhealthy", first
        assert first["detail"] == f"health check while training: storage:{fs.mount}/data: timed out after 2 s"
        assert first["time"] - t0 < FOUND_WITHIN
        assert job.wait(30) == [94], job.dump()
        assert job.outcome()["unhealthy_nodes"] == ["node0"]
    finally:
        job.kill()
        fs.go()
    job.assert_no_orphans(timeout=10)
