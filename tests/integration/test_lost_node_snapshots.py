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
    doc = json.loads((job.state / "processes" / "cycle0" / f"node{node}.json").read_text())
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


def _newest_replica(job_id: str, node: int, key: str) -> int | None:
    """The newest complete replica of ``key`` in ``node``'s memory (headers only)."""
    from slurm_ft.snapshot import layout, reader

    found = None
    for area in Path("/dev/shm").glob(f"slurm-ft-snap.{os.getuid()}.{job_id}*.n{node}"):
        for info in reader.complete_slots(area, key):
            if info.header.origin is layout.Origin.REPLICA and (found is None or info.step > found):
                found = info.step
    return found


def _kept(job_id: str, node: int, key: str) -> bool:
    """Whether ``node`` keeps its snapshot of an agreed step of the grid for ``key``."""
    return any(
        (area / f"{key}.2.snap").exists()
        for area in Path("/dev/shm").glob(f"slurm-ft-snap.{os.getuid()}.{job_id}*.n{node}")
    )


@pytest.mark.timeout(200)
def test_a_replica_lagging_several_steps_still_gives_every_rank_one_recent_step(tmp_path):
    """Issue #44: a replica several steps behind the trainer is of a step no other rank
    holds among its two newest, and the job fell back to its checkpoint. On the job-wide
    grid every node keeps its snapshot of the step every replica landed at, so the lost
    node's spare and the survivor resume from one step, with the state they had at it."""
    (tmp_path / "out").mkdir()
    args = [*BASE, "--snapshot-replicas", "1"]
    work = [
        str(TRAINER), "--out", str(tmp_path / "out"), "--steps", "400", "--step-time", "0.02",
        "--sharded", "--shard-mib", "24",
    ]  # fmt: skip
    job = SimJob(tmp_path, 3, args, work, job_id="44030")
    job.extra_env.update(FAST)
    job.start()
    try:

        def lagging() -> bool:
            """Node 1's newest replica 3 steps or more behind its trainer, once a step of
            the grid was agreed (before that, only the checkpoint is common to all)."""
            steps = [e["step"] for e in events(tmp_path, 1) if e["event"] == "step"]
            replica = _newest_replica(job.job_id, 0, "rank-00001")
            agreed = _kept(job.job_id, 0, "rank-00000") and _kept(job.job_id, 1, "rank-00001")
            return agreed and bool(steps) and replica is not None and steps[-1] >= replica + 3

        wait_until(lagging, 120, interval=0.005, message="a replica 3 steps behind\n" + job.dump())
        for pid in node_pids(job, 1):
            os.kill(pid, signal.SIGKILL)
        lag = [e["step"] for e in events(tmp_path, 1) if e["event"] == "step"][-1] - (
            _newest_replica(job.job_id, 0, "rank-00001") or 0
        )
        assert [job.node(n).proc.wait(170) for n in (0, 2)] == [0, 0], job.dump()
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
        assert resumes[1]["step"] == step and step > 0, (
            resumes,
            lag,
        )  # one step for every rank, not the checkpoint
        assert [r["hash"] for r in resumes] == [before[(0, step)], before[(1, step)]], resumes
        assert [r["source"] for r in resumes] == ["memory", "replica"], resumes
        newest_before = max(s for (r, s) in before if r == 1)
        assert newest_before - step >= 3, (newest_before, step)  # the replica really lagged
        spare = job.node(2).err()
        assert f"snapshots: the cycle resumes at step {step}: rank-00001 from node 0's memory" in spare
        assert f"resumed rank 1 from replica at step {step}" in spare
        job.assert_no_orphans(timeout=10)
    finally:
        job.kill()
