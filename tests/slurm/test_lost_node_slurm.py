"""A lost node loses no snapshot, on the local Slurm (#44): 2 active nodes and a spare run a
DDP trainer (gloo) that snapshots its replicated state every step and takes no disk
checkpoint at all. One node is lost (its launcher and its workers SIGKILLed at once, as
``slurm-ft-drill lose-node`` does); the spare takes its node rank, its launcher fetches the
snapshot of the step the job had reached from the surviving node's launcher (over TCP,
with the job secret the template makes) before its workers start, and every rank resumes
with the parameter and Adam hashes the trainer logged at that step. For node 0 the store
host goes with it: store succession and the snapshot's recovery together.

Without the transfer the spare's rank would start from step 0 and the hashes differ.
"""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from tests.slurm.test_store_succession_slurm import logs_of, node_processes
from tests.slurm.test_templates_e2e import knobs, outcome, prepare
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

TRAINER = Path(__file__).resolve().parents[1] / "integration" / "ddp_snapshot_trainer.py"


def events(out: Path, rank: int) -> list[dict]:
    path = out / f"rank{rank}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("lost", [1, 0])
def test_the_spare_resumes_with_the_lost_nodes_state_at_its_step(slurm_cluster, lost):
    work = prepare(slurm_cluster, f"lost-node{lost}")
    trainer = slurm_cluster.write(work / TRAINER.name, TRAINER.read_text())
    out = work / "out"
    out.mkdir()
    os.chown(out, slurm_cluster.uid, -1)
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_SCRIPT=str(trainer),
        TRAIN_ARGS=f"--out {out} --steps 30 --step-time 0.2",
        NPROC_PER_NODE="1",
        SPARE_NODES="1",
        LAUNCH_EXTRA_ARGS="--join-timeout 60",
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=3", "--no-kill", env=env)
    wait_until(
        lambda: any(e["event"] == "step" and e["step"] >= 5 for e in events(out, lost)),
        150,
        interval=0.2,
        message="five steps on the node to lose",
    )
    procs = node_processes(work, job.job_id, 0, f"node{lost + 1}")
    for pid in (procs["launcher_pid"], *(w["pid"] for w in procs["workers"])):
        os.kill(pid, signal.SIGKILL)  # the node is lost: its launcher and its workers at once
    fields = slurm_cluster.wait_final(job, timeout=180)
    said = logs_of(work)
    assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", "0"), said
    result = outcome(work, job.job_id)
    assert (result["exit_code"], result["lost_nodes"]) == (0, [f"node{lost + 1}"]), result
    if lost == 0:
        assert result["store_successions"] == [
            "epoch 1: node2 hosts the store after node1 was lost in cycle 0"
        ], result
    first = [e for r in (0, 1) for e in events(out, r) if e["cycle"] == 0]
    before = {e["step"]: e["hash"] for e in first if e["event"] == "step"}
    resumes = [next(e for e in events(out, r) if e["event"] == "resume" and e["cycle"] == 1) for r in (0, 1)]
    step = resumes[0]["step"]
    assert step >= 5 and {r["step"] for r in resumes} == {step}, resumes  # one step for every rank
    assert {r["hash"] for r in resumes} == {before[step]}, (resumes, before[step])
    assert step >= max(before) - 1, (step, max(before))  # at most the step in flight is done again
    assert resumes[lost]["source"] == "peer memory" and resumes[1 - lost]["source"] == "memory", resumes
    assert all(any(e["event"] == "done" and e["step"] == 30 for e in events(out, r)) for r in (0, 1))
    launchers = "\n".join(p.read_text() for p in (work / "logs").glob("launcher-*.log"))
    holder = 1 - lost
    assert f"snapshots: the cycle resumes at step {step}: replicated from node {holder}'s memory" in launchers
    fetched = rf"snapshots: replicated of step {step} fetched from node {holder} \(peer memory\), \d+ bytes"
    assert re.search(fetched, launchers), said
    assert f"resumed rank {lost} from peer memory at step {step}" in launchers
    slurm_cluster.assert_no_user_processes()
