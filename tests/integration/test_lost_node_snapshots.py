"""A lost node loses no snapshot (#44), on simulated nodes (real launchers, real TCPStores
on loopback addresses, a DDP trainer over gloo): a node's launcher and workers are
SIGKILLed together, the spare takes its node rank, its launcher fetches the replicated
snapshot from a surviving node before its workers start, and every rank resumes from the
same step with the state the job had at that step (the trainer's hashes of parameters and
Adam state). Node 0 too: store succession and the snapshot's recovery together."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from tests.integration.launch_cluster import SimJob
from tests.support import nodefiles
from tests.support.waiting import wait_until

pytestmark = pytest.mark.torch

TRAINER = Path(__file__).with_name("ddp_snapshot_trainer.py")
BASE = [
    "--nproc-per-node", "1", "--health-checks", "none", "--monitor-interval", "0.05",
    "--preload", "none", "--spare-nodes", "1", "--max-restarts", "2",
]  # fmt: skip
FAST = {"SLURM_FT_LAUNCH_HEARTBEAT_TIMEOUT": "1", "SLURM_FT_LAUNCH_HEARTBEAT_INTERVAL": "0.1"}


def events(tmp: Path, rank: int) -> list[dict]:
    path = tmp / "out" / f"rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def node_pids(job: SimJob, node: int) -> list[int]:
    doc = nodefiles.processes(job.state, f"node{node}", 0)
    return [doc["launcher_pid"], *(w["pid"] for w in doc["workers"])]


@pytest.mark.timeout(170)
@pytest.mark.parametrize("lost", [1, 0])
def test_the_spare_resumes_from_a_surviving_nodes_snapshot_of_the_lost_nodes_step(tmp_path, lost):
    (tmp_path / "out").mkdir()
    job = SimJob(tmp_path, 3, BASE, [str(TRAINER), "--out", str(tmp_path / "out"), "--steps", "30"])
    job.extra_env.update(FAST)
    job.job_id = f"4400{lost}"
    job.start()
    try:
        wait_until(
            lambda: any(e["event"] == "step" and e["step"] >= 5 for e in events(tmp_path, lost)),
            90,
            message="five steps\n" + job.dump(),
        )
        for pid in node_pids(job, lost):  # the node dies: its launcher and its workers at once
            os.kill(pid, signal.SIGKILL)
        survivors = [n for n in (0, 1, 2) if n != lost]
        codes = [job.node(n).proc.wait(150) for n in survivors]
        assert codes == [0, 0], job.dump()
        before = {
            e["step"]: e["hash"]
            for r in (0, 1)
            for e in events(tmp_path, r)
            if e["event"] == "step" and e["cycle"] == 0
        }
        resumes = [
            next(e for e in events(tmp_path, r) if e["event"] == "resume" and e["cycle"] == 1) for r in (0, 1)
        ]
        step = resumes[0]["step"]
        assert step >= 5 and {r["step"] for r in resumes} == {step}, resumes  # one step for every rank
        assert {r["hash"] for r in resumes} == {before[step]}, (resumes, before[step])
        assert resumes[lost]["source"] == "peer memory" and resumes[1 - lost]["source"] == "memory", resumes
        assert all(any(e["event"] == "done" for e in events(tmp_path, r)) for r in (0, 1))
        spare, holder = job.node(2).err(), 1 - lost
        assert f"snapshots: the cycle resumes at step {step}: replicated from node {holder}'s memory" in spare
        assert re.search(
            rf"snapshots: replicated of step {step} fetched from node {holder} \(peer memory\), \d+ bytes",
            spare,
        ), spare
        assert f"resumed rank {lost} from peer memory at step {step}" in spare
        assert (
            f"snapshots: the cycle resumes at step {step}: replicated from own memory"
            in job.node(holder).err()
        )
        job.assert_no_orphans(timeout=10)
    finally:
        job.kill()


@pytest.mark.timeout(170)
def test_with_replicas_a_lost_nodes_shard_comes_back_from_the_next_node_in_the_ring(tmp_path):
    (tmp_path / "out").mkdir()
    args = [*BASE, "--snapshot-replicas", "1"]
    work = [str(TRAINER), "--out", str(tmp_path / "out"), "--steps", "24", "--step-time", "0.4", "--sharded"]
    job = SimJob(tmp_path, 3, args, work, job_id="44010")
    job.extra_env.update(FAST)
    job.start()
    try:
        wait_until(
            lambda: any(e["event"] == "step" and e["step"] >= 5 for e in events(tmp_path, 1)),
            90,
            message="five steps\n" + job.dump(),
        )
        for pid in node_pids(job, 1):
            os.kill(pid, signal.SIGKILL)
        assert [job.node(n).proc.wait(150) for n in (0, 2)] == [0, 0], job.dump()
        before = {
            (r, e["step"]): e["hash"]
            for r in (0, 1)
            for e in events(tmp_path, r)
            if e["event"] == "step" and e["cycle"] == 0
        }
        resumes = [
            next(e for e in events(tmp_path, r) if e["event"] == "resume" and e["cycle"] == 1) for r in (0, 1)
        ]
        step = resumes[0]["step"]
        assert step >= 4 and resumes[1]["step"] == step, resumes
        assert [r["hash"] for r in resumes] == [before[(0, step)], before[(1, step)]], resumes
        assert before[(0, step)] != before[(1, step)]  # the shards differ: only the replica had rank 1's
        assert [r["source"] for r in resumes] == ["memory", "replica"], resumes
        spare = job.node(2).err()
        assert f"snapshots: the cycle resumes at step {step}: rank-00001 from node 0's memory" in spare
        assert re.search(rf"snapshots: rank-00001 of step {step} fetched from node 0 \(replica\)", spare), (
            spare
        )
        assert f"resumed rank 1 from replica at step {step}" in spare
        assert "keeping its shards' replicas on the next node" in job.node(0).err()
        job.assert_no_orphans(timeout=10)
    finally:
        job.kill()
