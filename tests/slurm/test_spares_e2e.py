"""Spare nodes on the local Slurm: a lost or bad node's rank moves to a spare without a
requeue, and when no spare is left the template resubmits without every bad node.

One real gloo training (it checkpoints and resumes); the other jobs run a torch-free
worker that waits for a file.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.slurm.conftest import Job
from tests.slurm.test_templates_e2e import batch_output, cycle_logs, exit_code, knobs, prepare, state_dir
from tests.support.procs import all_pids, is_alive
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slurm]

# Lean worker: runs until the test says go (or a later job finds the file at once).
WAITER = """import os, time
go = os.path.join(os.path.dirname(os.path.abspath(__file__)), "go")
env = os.environ
print(f"rank {env['RANK']} of {env['WORLD_SIZE']} on {env['SLURMD_NODENAME']}", flush=True)
while not os.path.exists(go):
    time.sleep(0.1)
"""


def launcher_pid(user_uid: int, node: str) -> int | None:
    """The slurm-ft-launch process that slurmd of ``node`` started."""
    for pid in all_pids():
        try:
            if os.stat(f"/proc/{pid}").st_uid != user_uid:
                continue
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(part.endswith(b"slurm-ft-launch") for part in cmd[:2]) and (
            f"SLURMD_NODENAME={node}".encode() in env
        ):
            return pid
    return None


def kill_launcher(cluster, node: str) -> None:
    pid = wait_until(lambda: launcher_pid(cluster.uid, node), 60, message=f"the launcher on {node}")
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not is_alive(pid), 10, message=f"launcher {pid} gone")


def cycle_record(work: Path, job_id: str, cycle: int) -> dict:
    return json.loads((state_dir(work, job_id) / "cycles" / f"cycle{cycle}.json").read_text())


def outcome_of(work: Path, job_id: str) -> dict:
    return json.loads((state_dir(work, job_id) / "outcome.json").read_text())


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_sigkill_of_an_active_launcher_moves_its_rank_to_the_spare_and_training_resumes(slurm_cluster):
    work = prepare(slurm_cluster, "spare-lost")
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_ARGS="--steps 40 --ckpt-every 4 --step-time 0.1",
        NPROC_PER_NODE="1",
        SPARE_NODES="1",
        LAUNCH_EXTRA_ARGS="--join-timeout 60",
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=4", "--no-kill", env=env)
    ckpt = work / "ckpt" / "latest_checkpointed_iteration.txt"
    wait_until(
        lambda: ckpt.exists() and int(ckpt.read_text() or 0) >= 8, 150, interval=0.3, message="a checkpoint"
    )
    kill_launcher(slurm_cluster, "node2")
    fields = slurm_cluster.wait_final(job, timeout=200)
    out = batch_output(work)
    assert fields["JobState"] == "COMPLETED", out
    assert fields["Restarts"] == "0"
    result = outcome_of(work, job.job_id)
    assert (result["exit_code"], result["lost_nodes"]) == (0, ["node2"]), result
    first = cycle_record(work, job.job_id, 0)
    assert (first["active_nodes"], first["spare_nodes"]) == (["node1", "node2", "node3"], ["node4"])
    last = cycle_record(work, job.job_id, result["last_cycle"])
    assert last["active_nodes"] == ["node1", "node4", "node3"] and last["world_size"] == 3
    assert last["replacements"][0].startswith("node rank 1: node2 -> node4 (lost")
    log = cycle_logs(work)[result["last_cycle"]]
    assert "resumed from iteration" in log
    for rank in range(3):
        assert f"{rank}: rank {rank}: finished at step 40" in log, log[-2000:]
    # The spare kept a standby (issue 27): the replaced node's rank started warm there, as
    # did the ranks that stayed where they were.
    for node in ("node4", "node1", "node3"):
        assert re.search(
            rf"{node} slurm-ft-launch: cycle {result['last_cycle']}: 1 of 1 worker\(s\) started warm", out
        ), out
    slurm_cluster.assert_no_user_processes()


@pytest.mark.timeout(300)
def test_bad_store_host_and_a_lost_spare_end_with_94_and_the_template_excludes_both(slurm_cluster):
    """node1 (the store host) is unhealthy: node2 takes node rank 0; then node2's launcher
    is killed and no spare is left: 94, and the job comes back on node3 and node4."""
    work = prepare(slurm_cluster, "spare-exhausted")
    slurm_cluster.write(work / "waiter.py", WAITER)
    mounts = work / "mounts"
    mounts.mkdir()
    for node in ("node2", "node3", "node4"):
        (mounts / node).mkdir()
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_SCRIPT=str(work / "waiter.py"),
        NPROC_PER_NODE="1",
        SPARE_NODES="1",
        HEALTH_PATHS=f"{mounts}/%n",
        LAUNCH_EXTRA_ARGS="--join-timeout 60",
    )
    env["SLURM_FT_STATE_DIR"] = str(work / "state")
    job = slurm_cluster.sbatch(
        work / "train_requeue.sbatch", "--nodes=2", "--nodelist=node[1-2]", "--no-kill", env=env
    )
    logs = work / "logs"
    wait_until(
        lambda: "rank 0 of 1 on node2" in "".join(cycle_logs(work).values()), 60, message="node2 training"
    )
    kill_launcher(slurm_cluster, "node2")
    first = slurm_cluster.wait_final(job, timeout=120)
    out = batch_output(work)
    assert exit_code(first) == 94, out
    assert "resubmitting without bad node(s) node1,node2" in out, out

    def successor() -> str | None:
        ids = subprocess.run(
            ["squeue", "-h", "-u", slurm_cluster.user, "-o", "%i"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        later = [j for j in ids if j != job.job_id]
        return later[0] if later else None

    next_id = wait_until(successor, 30, message="the resubmitted job")
    (work / "go").touch()
    os.chown(work / "go", slurm_cluster.uid, -1)
    second = slurm_cluster.wait_final(Job(next_id, work), timeout=120)
    assert second["JobState"] == "COMPLETED", batch_output(work)
    assert second["ExcNodeList"] == "node[1-2]"
    assert json.loads((work / "state" / "outcome.json").read_text())["exit_code"] == 0
    assert logs.exists()
    slurm_cluster.assert_no_user_processes()


LOCAL_DIR = Path(os.environ.get("SLURM_FT_LOCAL_DIR", "/var/tmp/slurm-ft-local"))


def slurmd_pid(node: str) -> int:
    return int((LOCAL_DIR / f"slurmd-{node}.pid").read_text().split()[0])


@pytest.mark.timeout(300)
def test_a_node_that_dies_is_marked_down_and_the_job_goes_on_on_the_spare(slurm_cluster):
    """A dead node: its slurmd stops (Slurm marks it DOWN) and its launcher dies. With
    --no-kill (job and step) the job survives and node rank 2 moves to the spare."""
    work = prepare(slurm_cluster, "spare-down")
    slurm_cluster.write(work / "waiter.py", WAITER)
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_SCRIPT=str(work / "waiter.py"),
        NPROC_PER_NODE="1",
        SPARE_NODES="1",
        LAUNCH_EXTRA_ARGS="--join-timeout 60",
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=4", "--no-kill", env=env)
    wait_until(lambda: "rank 2 of 3 on node3" in cycle_logs(work).get(0, ""), 60, message="node3 training")
    os.kill(slurmd_pid("node3"), signal.SIGKILL)
    try:
        kill_launcher(slurm_cluster, "node3")
        wait_until(
            lambda: "rank 2 of 3 on node4" in cycle_logs(work).get(1, ""), 60, message="node4 took rank 2"
        )
        wait_until(
            lambda: "DOWN" in slurm_cluster.node_fields("node3").get("State", ""),
            90,
            interval=1.0,
            message="Slurm marking node3 DOWN",
        )
        assert slurm_cluster.job_state(job.job_id) == "RUNNING"
        (work / "go").touch()
        fields = slurm_cluster.wait_final(job, timeout=120)
    finally:
        subprocess.run(["/usr/sbin/slurmd", "-N", "node3"], check=False)
        wait_until(
            lambda: "NOT_RESPONDING" not in slurm_cluster.node_fields("node3").get("State", "*"),
            60,
            interval=1.0,
            message="node3's slurmd back",
        )
        subprocess.run(["scontrol", "update", "nodename=node3", "state=resume"], check=False)
        slurm_cluster.wait_nodes_idle(60)
    out = batch_output(work)
    assert fields["JobState"] == "COMPLETED", out
    assert fields["Restarts"] == "0"
    result = outcome_of(work, job.job_id)
    assert (result["exit_code"], result["lost_nodes"]) == (0, ["node3"]), result
    assert cycle_record(work, job.job_id, 1)["active_nodes"] == ["node1", "node2", "node4"]
    slurm_cluster.assert_no_user_processes()


@pytest.mark.timeout(240)
def test_an_unhealthy_node_is_replaced_and_a_spare_that_dies_leaves_training_alone(slurm_cluster):
    """node2 fails a %n path check: node3 takes node rank 1 at the first join; then the
    other spare's launcher (node4) is killed: recorded, and the training never restarts."""
    work = prepare(slurm_cluster, "spare-unhealthy")
    slurm_cluster.write(work / "waiter.py", WAITER)
    mounts = work / "mounts"
    mounts.mkdir()
    for node in ("node1", "node3", "node4"):
        (mounts / node).mkdir()
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_SCRIPT=str(work / "waiter.py"),
        NPROC_PER_NODE="1",
        SPARE_NODES="2",
        HEALTH_PATHS=f"{mounts}/%n",
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=4", "--no-kill", env=env)
    wait_until(lambda: "rank 1 of 2 on node3" in cycle_logs(work).get(0, ""), 60, message="node3 training")
    kill_launcher(slurm_cluster, "node4")
    launcher_log = work / "logs" / f"launcher-{job.job_id}.log"
    wait_until(lambda: "spare node4 lost" in launcher_log.read_text(), 30, message="the spare's loss logged")
    (work / "go").touch()
    fields = slurm_cluster.wait_final(job, timeout=60)
    assert fields["JobState"] == "COMPLETED", batch_output(work)
    result = outcome_of(work, job.job_id)
    assert (result["exit_code"], result["cycles"], result["lost_nodes"]) == (0, 1, ["node4"]), result
    record = cycle_record(work, job.job_id, 0)
    assert (record["active_nodes"], record["spare_nodes"]) == (["node1", "node3"], ["node4"])
    assert record["replacements"][0].startswith("node rank 1: node2 -> node3 (unhealthy: storage")
    assert (state_dir(work, job.job_id) / "unhealthy" / "node2.json").exists()
    slurm_cluster.assert_no_user_processes()


SUSPECT = """import os, sys, time
env = os.environ
print(f"rank {env['RANK']} of {env['WORLD_SIZE']} on {env['SLURMD_NODENAME']}", flush=True)
if env["SLURMD_NODENAME"] == "node2":
    time.sleep(0.5)
    sys.exit(3)
if env["TORCHELASTIC_RESTART_COUNT"] != "2":
    time.sleep(60)
"""


@pytest.mark.timeout(240)
def test_a_node_whose_rank_fails_first_twice_in_a_row_is_suspect_and_replaced(slurm_cluster):
    work = prepare(slurm_cluster, "spare-suspect")
    slurm_cluster.write(work / "suspect.py", SUSPECT)
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_SCRIPT=str(work / "suspect.py"),
        NPROC_PER_NODE="1",
        SPARE_NODES="1",
        MAX_NO_PROGRESS_CYCLES="9",  # the worker keeps no checkpoint
    )
    job = slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=3", "--no-kill", env=env)
    fields = slurm_cluster.wait_final(job, timeout=120)
    assert fields["JobState"] == "COMPLETED", batch_output(work)
    result = outcome_of(work, job.job_id)
    assert (result["exit_code"], result["cycles"], result["suspect_nodes"]) == (0, 3, ["node2"]), result
    record = cycle_record(work, job.job_id, 2)
    assert record["active_nodes"] == ["node1", "node3"]
    assert record["replacements"] == [
        "node rank 1: node2 -> node3 (suspect: hosted the first failure of 2 cycles in a row)"
    ]
    assert "rank 1 of 2 on node3" in cycle_logs(work)[2]
    slurm_cluster.assert_no_user_processes()


@pytest.mark.timeout(240)
def test_two_losses_with_one_spare_end_with_1_and_the_template_excludes_both(slurm_cluster):
    """node2's launcher dies: node3 takes node rank 1; then node3's dies too: no spare
    left, exit 1 with both lost nodes, and the template's resubmission excludes them (here
    too few nodes remain, which it says instead of leaving a job that would pend forever)."""
    work = prepare(slurm_cluster, "spare-two-losses")
    slurm_cluster.write(work / "waiter.py", WAITER)
    env = knobs(
        slurm_cluster, work, TRAIN_SCRIPT=str(work / "waiter.py"), NPROC_PER_NODE="1", SPARE_NODES="1"
    )
    job = slurm_cluster.sbatch(
        work / "train_requeue.sbatch", "--nodes=3", "--nodelist=node[1-3]", "--no-kill", env=env
    )
    wait_until(lambda: "rank 1 of 2 on node2" in cycle_logs(work).get(0, ""), 60, message="node2 training")
    kill_launcher(slurm_cluster, "node2")
    wait_until(lambda: "rank 1 of 2 on node3" in cycle_logs(work).get(1, ""), 60, message="node3 took rank 1")
    kill_launcher(slurm_cluster, "node3")
    fields = slurm_cluster.wait_final(job, timeout=120)
    out = batch_output(work)
    assert exit_code(fields) == 1, out
    result = outcome_of(work, job.job_id)
    assert (result["exit_code"], result["lost_nodes"]) == (1, ["node2", "node3"]), result
    assert result["reason"] == "no healthy spare left for node rank(s) 1; lost launcher on node2, node3"
    assert "only 2 healthy nodes left in partition debug after excluding node2,node3; this job needs 3" in out
    slurm_cluster.assert_no_user_processes()
