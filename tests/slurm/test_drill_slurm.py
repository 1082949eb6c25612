"""slurm-ft-drill on the local Slurm: faults reach other nodes as steps of the job itself
(``srun --jobid J --overlap -w NODE``), are recorded, and the report charges them.

The short, torch-free variant of ``python -m benchmarks.goodput``: the template with one
spare, a stepping trainer that checkpoints every half second, a rank killed on node2,
then node2 lost (its launcher and workers SIGKILLed at once) and replaced by the spare.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.slurm.test_templates_e2e import batch_output, knobs, prepare, state_dir
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slurm]

REPO = Path(__file__).resolve().parents[2]
TRAINER = REPO / "tests" / "support" / "stepping_trainer.py"
SCHEDULE = "2 kill rank=3\n14 lose-node node=1\n"


def _drill(cluster, work: Path, *args: str, as_user: bool = True) -> subprocess.CompletedProcess[str]:
    python = str(cluster.venv_bin / "python")
    cmd = [python, "-m", "slurm_ft.cli.drill", *args]
    if as_user:
        cmd = ["/usr/sbin/runuser", "-u", cluster.user, "--", *cmd]
    return subprocess.run(
        cmd, cwd=work, env=cluster.job_env(), capture_output=True, text=True, timeout=120, check=False
    )


def _steps(work: Path) -> int:
    try:
        lines = (work / "steps.jsonl").read_text().splitlines()
    except FileNotFoundError:
        return 0
    return len([ln for ln in lines if ln.endswith("}")])


@pytest.mark.timeout(300)
def test_a_scheduled_drill_reaches_other_nodes_and_the_report_charges_each_fault(slurm_cluster):
    work = prepare(slurm_cluster, "drill")
    shutil.copy(TRAINER, work / TRAINER.name)
    slurm_cluster.write(work / TRAINER.name, TRAINER.read_text())
    slurm_cluster.write(work / "faults.schedule", SCHEDULE)
    ckpt = work / "ckpt"
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_SCRIPT=str(work / TRAINER.name),
        TRAIN_ARGS=f"--ckpt-dir {ckpt} --log {work / 'steps.jsonl'} --total-steps 300 --step-time 0.1 "
        "--ckpt-every 5 --startup 0.5",
        NPROC_PER_NODE="2",
        SPARE_NODES="1",
        CHECKPOINT_ITERATION_FILE="",
        PROGRESS_SOURCE=f"checkpoint-dir:{ckpt}",
        LAUNCH_EXTRA_ARGS="--join-timeout 60 --rank-heartbeat-timeout 3",
        SLURM_FT_LAUNCH_HEARTBEAT_TIMEOUT="3",
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=3", "--no-kill", env=env)
    try:
        wait_until(lambda: _steps(work) >= 10, 150, interval=0.3, message="the first checkpoints")
        # Not the owner: refused before anything is read or sent.
        root = _drill(slurm_cluster, work, job.job_id, "kill", as_user=False)
        assert root.returncode == 2 and "is not yours" in root.stderr, root
        # options between the job and the fault (issue #46), as people type them
        given = str(state_dir(work, job.job_id))
        bad = _drill(slurm_cluster, work, job.job_id, "--state-dir", given, "kill", "--rank", "4")
        assert bad.returncode == 2 and "rank 4 is outside the job (ranks 0-3)" in bad.stderr, bad
        done = _drill(slurm_cluster, work, job.job_id, "--schedule", str(work / "faults.schedule"))
        assert done.returncode == 0, done
        lines = done.stdout.splitlines()
        assert len(lines) == 2 and "kill: SIGKILL to rank 3 on node2" in lines[0], done.stdout
        assert "lose-node: SIGKILL to node2" in lines[1], done.stdout
        fields = slurm_cluster.wait_final(job, timeout=200)
    finally:
        subprocess.run(["scancel", job.job_id], capture_output=True, check=False)
    out = batch_output(work)
    assert fields["JobState"] == "COMPLETED", out
    state = state_dir(work, job.job_id)
    drills = [json.loads(p.read_text()) for p in sorted((state / "drills").glob("*.json"))]
    assert [(d["fault"], d["node"], d["rank"], d["injected"]) for d in drills] == [
        ("kill", "node2", 3, True),
        ("lose-node", "node2", None, True),
    ], drills
    assert len(drills[1]["pids"]) == 3  # the launcher and its two workers
    after = _drill(slurm_cluster, work, job.job_id, "kill")
    assert after.returncode == 2 and "is not running" in after.stderr, after

    report = subprocess.run(
        [
            str(slurm_cluster.venv_bin / "python"),
            "-m",
            "slurm_ft.cli.report",
            "--state-dir",
            str(state),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert report.returncode == 0, report.stderr
    doc = json.loads(report.stdout)
    faults = doc["faults"]
    assert [f["fault"] for f in faults] == ["kill", "lose-node"]
    for f in faults:
        assert f["cost_s"] is not None and f["cost_s"] > 0 and f["next_cycle"] == f["cycle"] + 1, f
    assert faults[1]["detection_s"] >= 2  # a silent launcher is found by the heart-beat timeout (3 s)
    assert doc["cycles"][-1]["outcome"] == "succeeded"
    t = doc["totals"]
    # Lost work may be 0: this trainer's ranks do not wait for each other, so rank 0 (on
    # node1) goes on checkpointing after node2's ranks die, and a checkpoint node 0 reads
    # after the failure keeps the work up to the failure (seen: 0.0 in 1 run of 8).
    assert t["split_cycles"] >= 3 and t["startup_s"] > 0 and t["lost_work_s"] >= 0
    parts = ("progress_s", "no_progress_s", "unknown_progress_s", "restart_overhead_s", "between_attempts_s")
    assert sum(t[k] for k in (*parts, "startup_s", "lost_work_s", "stopping_s")) == pytest.approx(
        t["wall_clock_s"], abs=0.01
    )
    # The report's goodput against the trainer's own count: 300 steps kept at 0.1 s each.
    assert t["goodput_ratio"] == pytest.approx(300 * 0.1 / t["wall_clock_s"], abs=0.1)
    slurm_cluster.assert_no_user_processes()
