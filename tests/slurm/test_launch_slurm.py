"""slurm-ft-launch under real sbatch + srun on the local cluster (one launcher per node).

A minimal batch script, no template: what a user writes when adopting the launcher by
changing one line of their script.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "scripts" / "examples" / "train_ddp.py"

BATCH = """#!/bin/bash
#SBATCH --job-name=ft-launch
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=slurm.out
#SBATCH --time=5
export GLOO_SOCKET_IFNAME=lo
srun --ntasks-per-node=1 slurm-ft-launch --nproc-per-node 2 --health-checks none \\
    --applog-prefix "$PWD/logs/train.log" --workers-stop-timeout 10 \\
    train_ddp.py --ckpt-dir "$PWD/ckpt" --steps 10 --ckpt-every 5 $CRASH
rc=$?
echo "launch exit $rc"
exit $rc
"""


def prepare(cluster, name: str) -> Path:
    work = cluster.workdir(name)
    shutil.copy(TRAINER, work / TRAINER.name)
    cluster.write(work / TRAINER.name, TRAINER.read_text())
    cluster.write(work / "job.sbatch", BATCH, mode=0o755)
    for sub in ("ckpt", "logs"):
        (work / sub).mkdir()
        shutil.chown(work / sub, cluster.user)
    return work


def starts(work: Path) -> list[dict]:
    return [json.loads(line) for line in (work / "ckpt" / "starts.jsonl").read_text().splitlines()]


def outcome(work: Path, job_id: str) -> dict:
    return json.loads((work / ".slurm_ft" / job_id / "outcome.json").read_text())


@pytest.mark.timeout(300)
def test_success_under_sbatch_and_srun(slurm_cluster):
    work = prepare(slurm_cluster, "launch-ok")
    job = slurm_cluster.sbatch(work / "job.sbatch", env=slurm_cluster.job_env(CRASH=""))
    fields = slurm_cluster.wait_final(job, timeout=280)
    out = job.output()
    assert fields["JobState"] == "COMPLETED", out
    assert "launch exit 0" in out
    assert sorted((s["rank"], s["restart"]) for s in starts(work)) == [(r, 0) for r in range(4)]
    assert (work / "ckpt" / "latest_checkpointed_iteration.txt").read_text() == "10\n"
    result = outcome(work, job.job_id)
    assert (result["exit_code"], result["outcome"], result["cycles"]) == (0, "finished", 1)
    assert result["nodes"] == ["node1", "node2"]
    log = (work / "logs" / "train_cycle0.log").read_text()
    for rank in range(4):
        assert f"{rank}: rank {rank}: finished at step 10" in log
    slurm_cluster.assert_no_user_processes()


@pytest.mark.timeout(300)
def test_crash_once_restarts_inside_the_job_under_sbatch_and_srun(slurm_cluster):
    work = prepare(slurm_cluster, "launch-crash")
    env = slurm_cluster.job_env(CRASH="--crash-rank 3 --crash-restart 0")
    job = slurm_cluster.sbatch(work / "job.sbatch", env=env)
    fields = slurm_cluster.wait_final(job, timeout=280)
    out = job.output()
    assert fields["JobState"] == "COMPLETED", out
    assert fields["Restarts"] == "0"
    assert "launch exit 0" in out
    got = starts(work)
    assert sorted(s["rank"] for s in got if s["restart"] == 1) == [0, 1, 2, 3]
    result = outcome(work, job.job_id)
    assert (result["exit_code"], result["cycles"]) == (0, 2)
    rec0 = json.loads((work / ".slurm_ft" / job.job_id / "cycles" / "cycle0.json").read_text())
    assert rec0["outcome"] == "failed"
    assert (rec0["first_failure"]["rank"], rec0["first_failure"]["node"]) == (3, "node2")
    assert "3: rank 3: injected crash at step 6" in (work / "logs" / "train_cycle0.log").read_text()
    assert "3: rank 3: resumed from iteration 5" in (work / "logs" / "train_cycle1.log").read_text()
    slurm_cluster.assert_no_user_processes()


HANG_WORKER = REPO / "tests" / "integration" / "hang_worker.py"
HANG_BATCH = """#!/bin/bash
#SBATCH --job-name=ft-hang
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=slurm.out
#SBATCH --time=5
srun --ntasks-per-node=1 slurm-ft-launch --nproc-per-node 1 --health-checks none \\
    --applog-prefix "$PWD/logs/train.log" --workers-stop-timeout 5 --hang-timeout 3 \\
    hang_worker.py deadlock --hung-rank 1
rc=$?
echo "launch exit $rc"
exit $rc
"""


@pytest.mark.timeout(300)
def test_a_hung_job_is_found_its_stacks_kept_and_restarted_under_srun(slurm_cluster):
    """Torch-free: rank 1 deadlocks, rank 0 waits; the job goes silent, is stopped with
    every stack kept, and the next cycle finishes."""
    work = slurm_cluster.workdir("launch-hang")
    slurm_cluster.write(work / "hang_worker.py", HANG_WORKER.read_text())
    slurm_cluster.write(work / "job.sbatch", HANG_BATCH, mode=0o755)
    (work / "logs").mkdir()
    shutil.chown(work / "logs", slurm_cluster.user)
    job = slurm_cluster.sbatch(work / "job.sbatch")
    fields = slurm_cluster.wait_final(job, timeout=280)
    out = job.output()
    assert fields["JobState"] == "COMPLETED", out
    assert "launch exit 0" in out
    state = work / ".slurm_ft" / job.job_id
    rec0 = json.loads((state / "cycles" / "cycle0.json").read_text())
    assert (rec0["outcome"], rec0["first_failure"]["kind"], rec0["first_failure"]["detector"]) == (
        "failed",
        "hang",
        "silence",
    )
    (stacks,) = state.glob("nodes/*/cycle0-rank1.stacks.txt")  # in the node's own directory
    assert "deadlocked_function" in stacks.read_text()
    log = (work / "logs" / "train_cycle0.log").read_text()
    assert any(line.startswith("1! ") and "deadlocked_function" in line for line in log.splitlines())
    assert "1: rank 1 done" in (work / "logs" / "train_cycle1.log").read_text()
    assert outcome(work, job.job_id)["exit_code"] == 0
    slurm_cluster.assert_no_user_processes()
