"""Store succession with simulated nodes (real launcher processes, real TCPStores on
loopback addresses): node 0's launcher is SIGKILLed with its workers, or frozen with
SIGSTOP; the lowest surviving launcher hosts the next store, node 0's ranks move to the
spare, and training finishes without a requeue."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.integration.launch_cluster import SimJob
from tests.support import nodefiles, procs
from tests.support.waiting import wait_until

WORKER = Path(__file__).with_name("succession_worker.py")
BASE = [
    "--nproc-per-node", "1", "--health-checks", "none", "--monitor-interval", "0.05",
    "--spare-nodes", "1",
]  # fmt: skip
FAST = {"SLURM_FT_LAUNCH_HEARTBEAT_TIMEOUT": "1", "SLURM_FT_LAUNCH_HEARTBEAT_INTERVAL": "0.1"}


def job_of(tmp: Path, *extra: str) -> SimJob:
    job = SimJob(tmp, 4, BASE, [str(WORKER), str(tmp / "out"), *extra])
    job.extra_env.update(FAST)
    return job


def started(job: SimJob, cycle: int, world: int = 3) -> list[dict]:
    return [s for s in job.starts() if s["cycle"] == cycle][:world] if job.out.exists() else []


def wait_cycle(job: SimJob, cycle: int, world: int = 3) -> list[dict]:
    wait_until(
        lambda: len({s["rank"] for s in job.starts() if s["cycle"] == cycle}) == world,
        60,
        message=f"cycle {cycle}'s {world} workers started\n" + job.dump(),
    )
    return [s for s in job.starts() if s["cycle"] == cycle]


def node0_pids(job: SimJob) -> list[int]:
    doc = nodefiles.processes(job.state, "node0", 0)
    return [doc["launcher_pid"], *(w["pid"] for w in doc["workers"])]


@pytest.mark.timeout(120)
def test_sigkill_of_node0_launcher_and_workers_moves_the_store_and_finishes_on_the_spare(tmp_path):
    job = job_of(tmp_path).start()
    try:
        first = wait_cycle(job, 0)
        assert {s["master_addr"] for s in first} == {"127.0.1.1"}
        wait_until(lambda: nodefiles.has_processes(job.state, "node0", 0), 10)
        pids = node0_pids(job)
        for pid in pids:  # the node dies: its launcher and its workers in the same moment
            os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        second = wait_cycle(job, 1)
        took = time.monotonic() - t0
        # node rank 0 (rank 0) is on the spare now: the workers' MASTER_ADDR follows it
        assert {s["master_addr"] for s in second} == {"127.0.1.4"}, second
        codes = [n.proc.wait(60) for n in job.nodes[1:]]
        assert codes == [0, 0, 0], job.dump()
        out = job.outcome()
        assert (out["exit_code"], out["cycles"]) == (0, 2), out
        assert out["store_successions"] == ["epoch 1: node1 hosts the store after node0 was lost in cycle 0"]
        assert out["lost_nodes"] == ["node0"] and out["unfenced"] == []
        rec = job.cycle_record(1)
        assert rec["active_nodes"] == ["node3", "node1", "node2"] and rec["master_addr"] == "127.0.1.4"
        assert job.cycle_record(0)["outcome"] == "lost"
        assert "store succession: epoch 1: node1 hosts the store" in job.node(3).err()
        print(f"store host SIGKILLed -> every cycle-1 worker started in {took:.2f} s")
        job.assert_no_orphans(timeout=5)
    finally:
        job.kill()


@pytest.mark.timeout(120)
def test_a_frozen_node0_launcher_is_fenced_and_the_job_goes_on(tmp_path):
    job = job_of(tmp_path, "--writes").start()
    try:
        wait_cycle(job, 0)
        wait_until(lambda: nodefiles.has_processes(job.state, "node0", 0), 10)
        launcher, *workers = node0_pids(job)
        os.kill(launcher, signal.SIGSTOP)  # its workers run on: rank 0 keeps writing
        second = wait_cycle(job, 1)
        assert {s["master_addr"] for s in second} == {"127.0.1.4"}
        # fenced before the successor's first decision: node 0's launcher and rank 0 are gone
        for pid in (launcher, *workers):
            assert not procs.is_alive(pid), f"pid {pid} of node 0 still alive"
        log = job.out / "writes-rank0.log"
        size = log.stat().st_size
        codes = [n.proc.wait(60) for n in job.nodes[1:]]
        assert codes == [0, 0, 0], job.dump()
        assert log.stat().st_size == size  # nothing written after the fence
        out = job.outcome()
        assert out["exit_code"] == 0 and out["unfenced"] == [], out
        assert out["store_successions"][0].startswith("epoch 1: node1 hosts the store after node0")
        assert "fence of node0: 2 process(es) killed or already gone" in job.node(1).err()
        assert job.node(0).proc.wait(10) == -signal.SIGKILL
        job.assert_no_orphans(timeout=5)
    finally:
        job.kill()
