"""The whole requeue story on a real Slurm, submitted as a plain user through our templates.

Each test copies a template and the toy DDP trainer into a directory of the plain user,
submits with the knobs set in the environment (as a user would), waits for Slurm to be done
with the job — requeues included — and then checks what a user would check: exit codes,
the state dir records, the per-cycle logs and that nothing of the job is left running.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.torch]

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "sbatch_templates"
TRAINER = REPO / "scripts" / "examples" / "train_ddp.py"
SNAPSHOT_TRAINER = REPO / "scripts" / "examples" / "train_snapshot.py"
STEPPING_TRAINER = REPO / "tests" / "support" / "stepping_trainer.py"  # torch-free


def prepare(cluster, name: str, template: str = "train_requeue.sbatch") -> Path:
    work = cluster.workdir(name)
    for src in (TEMPLATES / template, TRAINER, SNAPSHOT_TRAINER):
        dst = work / src.name
        shutil.copy(src, dst)
        cluster.write(dst, dst.read_text())
    for sub in ("ckpt", "logs"):
        (work / sub).mkdir()
        shutil.chown(work / sub, cluster.user)
    return work


def knobs(cluster, work: Path, **extra: str) -> dict[str, str]:
    env = cluster.job_env(
        TRAIN_SCRIPT=str(work / "train_ddp.py"),
        NPROC_PER_NODE="2",
        LOG_DIR=str(work / "logs"),
        STATE_DIR_UNUSED="",
        CHECKPOINT_ITERATION_FILE=str(work / "ckpt" / "latest_checkpointed_iteration.txt"),
        HEALTH_CHECKS="storage",
        HEALTH_PATHS=str(work),
        TRAIN_CKPT_DIR=str(work / "ckpt"),
        # All "nodes" share this machine: gloo must use the loopback interface.
        GLOO_SOCKET_IFNAME="lo",
        TERM_TIMEOUT="20",
    )
    env.pop("STATE_DIR_UNUSED")
    env.update(extra)
    return env


def state_dir(work: Path, job_id: str) -> Path:
    return work / ".slurm_ft" / job_id


def outcome(work: Path, job_id: str) -> dict:
    return json.loads((state_dir(work, job_id) / "outcome.json").read_text())


def cycle_logs(work: Path) -> dict[int, str]:
    logs = {}
    for path in (work / "logs").glob("train_cycle*.log"):
        m = re.fullmatch(r"train_cycle(\d+)\.log", path.name)
        if m:
            logs[int(m.group(1))] = path.read_text(errors="replace")
    return logs


def batch_output(work: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(work.glob("slurm-*.out")))


def progress_check(work: Path, job_id: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """What the requeue guard of a batch script would say now."""
    cmd = ["slurm-ft-progress", "check", "--state-dir", str(state_dir(work, job_id))]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)


def exit_code(fields: dict[str, str]) -> int:
    return int(fields.get("ExitCode", "0:0").split(":")[0])


def ranks_in(log: str) -> set[int]:
    return {int(m.group(1)) for m in re.finditer(r"^\s*(\d+): rank \1: ", log, re.M)}


@pytest.mark.timeout(240)
def test_rank_crash_once_restarts_in_job_and_finishes(slurm_cluster):
    work = prepare(slurm_cluster, "crash-once")
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_ARGS="--steps 12 --ckpt-every 4",
        TRAIN_CRASH_RANK="3",
        TRAIN_CRASH_RESTART="0",
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=2", env=env)
    fields = slurm_cluster.wait_final(job, timeout=200)
    assert fields["JobState"] == "COMPLETED", batch_output(work)
    assert fields["Restarts"] == "0"
    result = outcome(work, job.job_id)
    assert result["exit_code"] == 0
    assert result["outcome"] == "finished"
    logs = cycle_logs(work)
    assert sorted(logs) == [0, 1]
    assert ranks_in(logs[0]) == {0, 1, 2, 3}
    assert ranks_in(logs[1]) == {0, 1, 2, 3}
    assert re.search(r"^3: rank 3: injected crash at step \d+$", logs[0], re.M)
    for rank in range(4):
        assert re.search(rf"^{rank}: rank {rank}: finished at step 12$", logs[1], re.M), logs[1][-2000:]
    assert "training finished" in batch_output(work)
    slurm_cluster.assert_no_user_processes()


@pytest.mark.timeout(420)
def test_crash_before_checkpoint_is_stopped_by_the_guard_across_requeues(slurm_cluster):
    work = prepare(slurm_cluster, "no-progress")
    # The iteration file exists (an earlier checkpoint at 0): a source that never existed
    # would leave the guard off, and MAX_REQUEUES alone would bound the job.
    it_file = work / "ckpt" / "latest_checkpointed_iteration.txt"
    slurm_cluster.write(it_file, "0\n")
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_ARGS="--steps 12 --ckpt-every 4 --crash-before-checkpoint",
        TRAIN_CRASH_RANK="1",
        NPROC_PER_NODE="1",
        MAX_RESTARTS="1",
        MAX_NO_PROGRESS_CYCLES="3",
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=2", env=env)
    fields = slurm_cluster.wait_final(job, timeout=380)
    out = batch_output(work)
    # attempt 0: cycles 0 and 1 fail (restarts spent, streak 2 < 3) -> requeued;
    # attempt 1: cycle 2 fails (streak 3) -> the guard stops it before cycle 3.
    assert fields["Restarts"] == "1", out
    assert exit_code(fields) == 93, out
    result = outcome(work, job.job_id)
    assert result["exit_code"] == 93
    assert "no progress" in result["reason"]
    assert sorted(cycle_logs(work)) == [0, 1, 2]
    assert "requeueing" in out
    assert "stopped for good: no progress" in out
    # Stopped for good: it stays finished and is not requeued again.
    assert slurm_cluster.job_state(job.job_id) in ("FAILED", "COMPLETED")
    status = progress_check(work, job.job_id, env)
    assert status.returncode == 93, status.stderr
    slurm_cluster.assert_no_user_processes()


@pytest.mark.timeout(420)
def test_job_that_checkpoints_between_crashes_is_requeued_until_it_finishes(slurm_cluster):
    work = prepare(slurm_cluster, "progress")
    # Rank 1 crashes in every cycle just after that cycle's first checkpoint: every cycle
    # moves the iteration forward by 4, so the guard never stops the job.
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_ARGS="--steps 12 --ckpt-every 4",
        TRAIN_CRASH_RANK="1",
        NPROC_PER_NODE="1",
        MAX_RESTARTS="1",
        MAX_NO_PROGRESS_CYCLES="1",
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=2", env=env)
    fields = slurm_cluster.wait_final(job, timeout=380)
    out = batch_output(work)
    # attempt 0: cycles 0 (0->4) and 1 (4->8) crash, budget spent -> requeued (progress);
    # attempt 1: cycle 2 runs 8->12 and finishes.
    assert fields["JobState"] == "COMPLETED", out
    assert fields["Restarts"] == "1", out
    assert _iteration(work) == 12
    assert sorted(cycle_logs(work)) == [0, 1, 2], out
    assert outcome(work, job.job_id)["exit_code"] == 0
    status = progress_check(work, job.job_id, env)
    assert status.returncode == 0, status.stdout + status.stderr
    slurm_cluster.assert_no_user_processes()


def snapshot_knobs(cluster, work: Path, **extra: str) -> dict[str, str]:
    """The DDP-tutorial-shaped trainer: one snapshot.pt, no iteration file."""
    snapshot = work / "ckpt" / "snapshot.pt"
    values = {
        "TRAIN_SCRIPT": str(work / "train_snapshot.py"),
        "TRAIN_SNAPSHOT": str(snapshot),
        "TRAIN_EPOCHS": "30",
        "TRAIN_SAVE_EVERY": "5",
        "CHECKPOINT_ITERATION_FILE": "",
        "PROGRESS_SOURCE": f"file:{snapshot}",
        "NPROC_PER_NODE": "1",
    }
    return knobs(cluster, work, **{**values, **extra})


@pytest.mark.timeout(300)
def test_snapshot_trainer_killed_twice_after_fresh_snapshots_finishes(slurm_cluster):
    """The issue's case: killed in cycle 0 at epoch 12 and in cycle 1 at epoch 22, each time
    after a new snapshot; with its snapshot as the progress source it finishes in cycle 2."""
    work = prepare(slurm_cluster, "snapshot-progress")
    env = snapshot_knobs(slurm_cluster, work, TRAIN_CRASH="0:12,1:22", TRAIN_CRASH_RANK="1")
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=2", env=env)
    fields = slurm_cluster.wait_final(job, timeout=260)
    out = batch_output(work)
    assert fields["JobState"] == "COMPLETED", out
    assert fields["Restarts"] == "0", out
    logs = cycle_logs(work)
    assert sorted(logs) == [0, 1, 2]
    assert re.search(r"^1: rank 1: killed at epoch 12$", logs[0], re.M)
    assert re.search(r"^0: rank 0: resuming from snapshot at epoch 10$", logs[1], re.M)
    assert re.search(r"^1: rank 1: killed at epoch 22$", logs[1], re.M)
    assert re.search(r"^0: rank 0: resuming from snapshot at epoch 20$", logs[2], re.M)
    assert re.search(r"^0: rank 0: finished at epoch 30$", logs[2], re.M)
    status = subprocess.run(
        ["slurm-ft-progress", "status", "--json", "--state-dir", str(state_dir(work, job.job_id))],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    doc = json.loads(status.stdout)
    assert doc["policy"]["source"] == f"file:{work / 'ckpt' / 'snapshot.pt'}"
    assert [(c["cycle"], c["progressed"]) for c in doc["cycles"]] == [(0, True), (1, True), (2, True)]
    slurm_cluster.assert_no_user_processes()


@pytest.mark.timeout(300)
def test_snapshot_trainer_that_never_advances_is_stopped_with_93(slurm_cluster):
    """Killed at epoch 7 in every cycle: the snapshot of epoch 5 is never replaced again."""
    work = prepare(slurm_cluster, "snapshot-stuck")
    env = snapshot_knobs(slurm_cluster, work, TRAIN_CRASH="*:7", TRAIN_CRASH_RANK="0", MAX_RESTARTS="5")
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=1", env=env)
    fields = slurm_cluster.wait_final(job, timeout=260)
    out = batch_output(work)
    # cycle 0 saves epoch 5 (progress), cycles 1 and 2 do not: stopped before cycle 3.
    assert exit_code(fields) == 93, out
    assert fields["Restarts"] == "0", out
    result = outcome(work, job.job_id)
    assert result["exit_code"] == 93
    assert result["reason"] == (
        f"no progress: no progress in the last 2 cycles (file:{work / 'ckpt' / 'snapshot.pt'} not replaced)"
    )
    assert sorted(cycle_logs(work)) == [0, 1, 2]
    assert "stopped for good: no progress" in out
    slurm_cluster.assert_no_user_processes()


@pytest.mark.timeout(300)
def test_without_a_progress_source_max_requeues_bounds_the_job(slurm_cluster):
    """Killed before its first snapshot, every time, with no source: the guard judges
    nothing, so the template requeues MAX_REQUEUES times and then stops with the launchers' code."""
    work = prepare(slurm_cluster, "no-source")
    env = snapshot_knobs(
        slurm_cluster, work, TRAIN_CRASH="*:1", PROGRESS_SOURCE="", MAX_RESTARTS="0", MAX_REQUEUES="1"
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=1", env=env)
    fields = slurm_cluster.wait_final(job, timeout=260)
    out = batch_output(work)
    assert fields["Restarts"] == "1", out
    assert exit_code(fields) == 1, out
    assert out.count("no progress source: the no-progress guard is off; at most MAX_REQUEUES=1 requeues") == 2
    assert "not requeueing: the progress guard judges nothing" in out
    assert sorted(cycle_logs(work)) == [0, 1]
    slurm_cluster.assert_no_user_processes()


@pytest.mark.timeout(420)
def test_unhealthy_node_is_excluded_from_the_next_attempt(slurm_cluster):
    work = prepare(slurm_cluster, "unhealthy")
    # A per-node storage path (%n is the Slurm node name): it exists for every node but
    # node2, as if node2 had lost its mount.
    paths = work / "mounts"
    paths.mkdir()
    for node in slurm_cluster.nodes:
        if node != "node2":
            (paths / node).mkdir()
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_ARGS="--steps 8 --ckpt-every 4",
        HEALTH_PATHS=f"{paths}/%n",
        NPROC_PER_NODE="1",
    )
    env["SLURM_FT_STATE_DIR"] = str(work / "state")
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=2", "--nodelist=node[1-2]", env=env)
    first = slurm_cluster.wait_final(job, timeout=120)
    assert exit_code(first) == 94, batch_output(work)
    assert "resubmitting without bad node(s) node2" in batch_output(work)
    assert (work / "state" / "unhealthy" / "node2.json").exists()

    def successor() -> str | None:
        out = subprocess.run(
            ["squeue", "-h", "-u", slurm_cluster.user, "-o", "%i"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        later = [j for j in out if j != job.job_id]
        return later[0] if later else None

    next_id = wait_until(successor, 30, message="the resubmitted job")
    from tests.slurm.conftest import Job

    second = slurm_cluster.wait_final(Job(next_id, work), timeout=200)
    assert second["JobState"] == "COMPLETED", batch_output(work)
    assert (
        "node2"
        not in subprocess.run(
            ["scontrol", "show", "hostnames", second["NodeList"]], capture_output=True, text=True, check=False
        ).stdout.split()
    )
    assert second["ExcNodeList"] == "node2"
    result = json.loads((work / "state" / "outcome.json").read_text())
    assert result["exit_code"] == 0
    slurm_cluster.assert_no_user_processes()


def _iteration(work: Path) -> int:
    try:
        return int((work / "ckpt" / "latest_checkpointed_iteration.txt").read_text().strip())
    except (OSError, ValueError):
        return 0


def _starts(work: Path) -> list[dict]:
    path = work / "ckpt" / "starts.jsonl"
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


@pytest.mark.timeout(420)
def test_preemption_signal_checkpoints_requeues_and_resumes(slurm_cluster):
    work = prepare(slurm_cluster, "preempt")
    env = knobs(
        slurm_cluster, work, TRAIN_ARGS="--steps 60 --ckpt-every 5 --step-time 0.25", NPROC_PER_NODE="1"
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=2", env=env)
    wait_until(lambda: _iteration(work) >= 5, 150, interval=0.3, message="the first checkpoint")
    subprocess.run(["scancel", "--signal=USR1", "--batch", job.job_id], check=True)
    fields = slurm_cluster.wait_final(job, timeout=360)
    out = batch_output(work)
    assert fields["JobState"] == "COMPLETED", out
    assert int(fields["Restarts"]) >= 1, out
    assert "received SIGUSR1" in out
    assert _iteration(work) == 60
    logs = cycle_logs(work)
    first_cycle = logs[min(logs)]
    assert re.search(r"^\s*\d+: rank \d+: stopping on SIGUSR1 at step \d+$", first_cycle, re.M), first_cycle[
        -2000:
    ]
    resumed = [m for log in logs.values() for m in re.finditer(r"rank 0: resumed from iteration (\d+)", log)]
    assert resumed and int(resumed[0].group(1)) >= 5
    assert outcome(work, job.job_id)["exit_code"] == 0
    slurm_cluster.assert_no_user_processes()


@pytest.mark.timeout(300)
def test_scancel_ends_the_job_for_good_after_the_workers_checkpoint(slurm_cluster):
    """A plain ``scancel`` (TERM to the batch script and the steps) is the user ending the
    job: the template forwards it, the workers save, and nothing is requeued."""
    work = prepare(slurm_cluster, "scancel")
    shutil.copy(STEPPING_TRAINER, work / STEPPING_TRAINER.name)
    slurm_cluster.write(work / STEPPING_TRAINER.name, STEPPING_TRAINER.read_text())
    ckpt = work / "ckpt"
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_SCRIPT=str(work / STEPPING_TRAINER.name),
        TRAIN_ARGS=f"--ckpt-dir {ckpt} --log {work / 'steps.jsonl'} --total-steps 100000 --step-time 0.1 "
        "--ckpt-every 5 --startup 0",
        NPROC_PER_NODE="1",
        CHECKPOINT_ITERATION_FILE="",
        PROGRESS_SOURCE=f"checkpoint-dir:{ckpt}",
        TERM_TIMEOUT="5",
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=2", env=env)
    wait_until(lambda: any(ckpt.glob("step_*")), 150, interval=0.3, message="the first checkpoint")
    subprocess.run(["scancel", job.job_id], check=True)
    fields = slurm_cluster.wait_final(job, timeout=120)
    out = batch_output(work)
    assert fields["JobState"] == "CANCELLED", out
    assert int(fields["Restarts"]) == 0, out
    assert "received SIGTERM, forwarding to the launchers" in out, out
    assert "ended by SIGTERM (scancel, or the time limit without USR1): not requeueing" in out, out
    assert "requeueing (progress guard" not in out, out
    slurm_cluster.assert_no_user_processes()


@pytest.mark.timeout(600)
def test_time_limit_signal_checkpoints_requeues_and_resumes(slurm_cluster):
    work = prepare(slurm_cluster, "timelimit")
    # USR1 is due 70 s before the 2-minute limit; Slurm checks limits about every 30 s, so it
    # arrives 50-80 s into an attempt: the first attempt cannot finish 80 s of training.
    env = knobs(
        slurm_cluster, work, TRAIN_ARGS="--steps 160 --ckpt-every 5 --step-time 0.5", NPROC_PER_NODE="1"
    )
    job = slurm_cluster.sbatch(
        work / "train_requeue.sbatch", "--nodes=2", "--time=2", "--signal=B:USR1@70", env=env
    )
    fields = slurm_cluster.wait_final(job, timeout=560)
    out = batch_output(work)
    assert fields["JobState"] == "COMPLETED", out
    assert int(fields["Restarts"]) >= 1, out
    assert "received SIGUSR1" in out
    assert _iteration(work) == 160
    restarts_seen = {s["restart"] for s in _starts(work)}
    assert len(restarts_seen) >= 1
    assert outcome(work, job.job_id)["exit_code"] == 0
    slurm_cluster.assert_no_user_processes()
