"""Snapshots across a preemption on a real Slurm: the launchers persist the newest snapshot
on the way out and the requeued attempt resumes from it, with the very state the trainer
had at that step (its parameter and optimizer hashes).

The trainer takes no disk checkpoint at all (``--ckpt-every`` past the end): without the
launchers' persist the requeued attempt starts from step 0, and the test fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.slurm.test_templates_e2e import batch_output, knobs, outcome, prepare
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

TRAINER = Path(__file__).resolve().parents[1] / "integration" / "snapshot_trainer.py"


def events(out: Path, rank: int) -> list[dict]:
    path = out / f"rank{rank}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


@pytest.mark.timeout(300)
def test_preemption_persists_the_snapshot_and_the_requeued_attempt_resumes_from_it(slurm_cluster):
    work = prepare(slurm_cluster, "snap-preempt")
    trainer = slurm_cluster.write(work / TRAINER.name, TRAINER.read_text())
    for sub in ("out", "persisted"):
        (work / sub).mkdir()
        shutil.chown(work / sub, slurm_cluster.user)
    out = work / "out"
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_SCRIPT=str(trainer),
        TRAIN_ARGS=f"--out {out} --steps 40 --step-time 0.25 --ckpt-every 100000",
        NPROC_PER_NODE="1",
        LAUNCH_EXTRA_ARGS=f"--snapshot-persist-dir {work / 'persisted'}",
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=2", env=env)
    wait_until(
        lambda: all(any(e["event"] == "step" and e["step"] >= 8 for e in events(out, r)) for r in (0, 1)),
        150,
        interval=0.3,
        message="both ranks past step 8",
    )
    subprocess.run(["scancel", "--signal=USR1", "--batch", job.job_id], check=True)
    fields = slurm_cluster.wait_final(job, timeout=240)
    said = batch_output(work)
    assert fields["JobState"] == "COMPLETED", said
    assert int(fields["Restarts"]) >= 1, said
    for rank in (0, 1):
        log = events(out, rank)
        resumes = [e for e in log if e["event"] == "resume"]
        assert resumes[0]["source"] == "none", resumes
        again = resumes[1]
        assert again["source"] == "persisted", resumes
        hashes = {e["step"]: e["hash"] for e in log if e["event"] == "step" and e["cycle"] < again["cycle"]}
        assert again["step"] >= 8 and again["hash"] == hashes[again["step"]], (
            again,
            hashes.get(again["step"]),
        )
        assert any(e["event"] == "done" and e["step"] == 40 for e in log)
    state = work / ".slurm_ft" / job.job_id / "snapshots"
    first = [json.loads(p.read_text()) for p in state.glob("persisted-attempt0-*.json")]
    assert len(first) == 2 and all(d["why"] == "signal SIGUSR1" and not d["not_persisted"] for d in first), (
        first
    )
    assert outcome(work, job.job_id)["exit_code"] == 0
    slurm_cluster.assert_no_user_processes()
