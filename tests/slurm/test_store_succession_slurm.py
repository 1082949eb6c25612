"""Store succession on the local Slurm (3 active nodes + 1 spare): node 0's launcher (the
store host, on node1) is lost; node2's launcher hosts the next store, node rank 0 moves to
the spare (node4), and the job completes without a requeue."""

from __future__ import annotations

import contextlib
import os
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import LOCAL_DIR, Job, LocalCluster
from tests.slurm.test_spares_e2e import WAITER, cycle_record, launcher_pid, outcome_of
from tests.slurm.test_templates_e2e import batch_output, cycle_logs, knobs, prepare, state_dir
from tests.support import nodefiles
from tests.support.procs import is_alive
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slurm]

# Lean worker that "checkpoints": rank 0 appends a line every 0.1 s until the test says go.
WRITER = WAITER.replace(
    "while not os.path.exists(go):\n    time.sleep(0.1)",
    "while not os.path.exists(go):\n"
    "    if env['RANK'] == '0':\n"
    "        with open(go + '-ckpt.log', 'a') as fh:\n"
    "            fh.write(env['SLURMD_NODENAME'] + ' ' + env['SLURM_FT_CYCLE'] + '\\n')\n"
    "    time.sleep(0.1)",
)


def node_processes(work, job_id: str, cycle: int, node: str) -> dict:
    return nodefiles.processes(state_dir(work, job_id), node, cycle)


def logs_of(work) -> str:
    """Every launcher log and the batch output, for a failure's message."""
    parts = [f"--- {p.name}\n{p.read_text()[-6000:]}" for p in sorted((work / "logs").glob("launcher*"))]
    return "\n".join([*parts, batch_output(work)[-3000:]])


def check_succeeded(work, job, fields) -> dict:
    assert fields["JobState"] == "COMPLETED", logs_of(work)
    assert fields["Restarts"] == "0"
    result = outcome_of(work, job.job_id)
    assert (result["exit_code"], result["lost_nodes"]) == (0, ["node1"]), result
    assert result["store_successions"] == ["epoch 1: node2 hosts the store after node1 was lost in cycle 0"]
    assert result["unfenced"] == [], result
    last = cycle_record(work, job.job_id, result["last_cycle"])
    assert last["active_nodes"] == ["node4", "node2", "node3"] and last["master_addr"] == "node4"
    return result


@pytest.mark.torch
@pytest.mark.timeout(300)
def test_sigkill_of_node0_launcher_and_workers_resumes_on_the_spare(slurm_cluster):
    work = prepare(slurm_cluster, "succession-kill")
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
    procs = node_processes(work, job.job_id, 0, "node1")
    for pid in (procs["launcher_pid"], *(w["pid"] for w in procs["workers"])):
        os.kill(pid, signal.SIGKILL)  # node 0 dies: its launcher and its workers at once
    fields = slurm_cluster.wait_final(job, timeout=200)
    result = check_succeeded(work, job, fields)
    log = cycle_logs(work)[result["last_cycle"]]
    assert "resumed from iteration" in log
    for rank in range(3):
        assert f"{rank}: rank {rank}: finished at step 40" in log, log[-2000:]
    slurm_cluster.assert_no_user_processes()


def _submit_writer(slurm_cluster: LocalCluster, name: str, spares: int) -> tuple[Path, Job]:
    """WRITER on the 4 nodes, ``spares`` of them standing by; its work dir and job."""
    work = prepare(slurm_cluster, name)
    slurm_cluster.write(work / "writer.py", WRITER)
    env = knobs(
        slurm_cluster,
        work,
        TRAIN_SCRIPT=str(work / "writer.py"),
        NPROC_PER_NODE="1",
        SPARE_NODES=str(spares),
        LAUNCH_EXTRA_ARGS="--join-timeout 60",
    )
    return work, slurm_cluster.sbatch(work / "train_requeue.sbatch", "--nodes=4", "--no-kill", env=env)


def _writer_job(slurm_cluster: LocalCluster, name: str) -> tuple[Path, Job, int, dict[str, Any]]:
    """The frozen-store-host tests' job: WRITER on 3 active nodes and a spare, once node1
    trains; returns its work dir, the job, node1's launcher pid and node1's processes record
    of cycle 0."""
    work, job = _submit_writer(slurm_cluster, name, spares=1)
    wait_until(lambda: "rank 0 of 3 on node1" in cycle_logs(work).get(0, ""), 90, message="node1 training")
    launcher = wait_until(lambda: launcher_pid(slurm_cluster.uid, "node1"), 30, message="node1's launcher")
    assert launcher is not None  # for the type checker: wait_until returns only a truthy value
    return work, job, launcher, node_processes(work, job.job_id, 0, "node1")


def _say_go(slurm_cluster: LocalCluster, work: Path) -> None:
    """WRITER's workers finish once the go file is there (owned by the job's user)."""
    (work / "go").touch()
    os.chown(work / "go", slurm_cluster.uid, -1)


@pytest.mark.timeout(240)
def test_sigstop_of_node0_launcher_fences_its_workers_and_the_job_goes_on(slurm_cluster):
    work, job, launcher, procs = _writer_job(slurm_cluster, "succession-stop")
    workers = [w["pid"] for w in procs["workers"]]
    assert procs["launcher_pid"] == launcher
    os.kill(launcher, signal.SIGSTOP)  # frozen: its worker (rank 0) keeps writing
    try:
        try:
            wait_until(
                lambda: "rank 0 of 3 on node4" in cycle_logs(work).get(1, ""), 90, message="node4 took rank 0"
            )
        except AssertionError:
            raise AssertionError(logs_of(work)) from None
        # fenced through Slurm before the successor's first decision
        assert not any(is_alive(p) for p in (launcher, *workers))
        ckpt = work / "go-ckpt.log"
        before = [ln for ln in ckpt.read_text().splitlines() if ln.startswith("node1 ")]
        _say_go(slurm_cluster, work)
        fields = slurm_cluster.wait_final(job, timeout=120)
    finally:
        if is_alive(launcher):
            os.kill(launcher, signal.SIGCONT)
    after = [ln for ln in ckpt.read_text().splitlines() if ln.startswith("node1 ")]
    assert after == before  # the old rank 0 wrote nothing after the fence
    check_succeeded(work, job, fields)
    launcher_log = (work / "logs" / f"launcher-{job.job_id}.log").read_text()
    assert "fence of node1: 2 process(es) killed or already gone" in launcher_log
    slurm_cluster.assert_no_user_processes()


def _stepd_of(pid: int) -> int:
    """The slurmstepd that started ``pid`` (its parent)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    parent = int(stat[stat.rfind(")") + 2 :].split()[1])
    assert Path(f"/proc/{parent}/comm").read_text().strip() == "slurmstepd", parent
    return parent


@pytest.mark.timeout(300)
def test_node0_stops_answering_until_slurm_marks_it_down_and_the_job_goes_on(slurm_cluster):
    """node1 hangs as a whole: its slurmd, the launchers' step daemon, its launcher and its
    worker all stop answering (SIGSTOP). Only the batch script, which Slurm runs on the
    allocation's first node, is left running, as it would be when a node's slurmd dies
    but the node still runs the script. The peers find the store host silent, node2 takes
    the store, its fence through Slurm cannot reach node1 and names what it could not kill,
    Slurm marks node1 DOWN and removes it from the job (``--no-kill``), and the job
    completes on the spare."""
    work, job, launcher, procs = _writer_job(slurm_cluster, "succession-down")
    workers = [w["pid"] for w in procs["workers"]]
    slurmd = int((LOCAL_DIR / "slurmd-node1.pid").read_text())
    daemons = [slurmd, _stepd_of(launcher)]
    frozen = [*daemons, launcher, *workers]
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    seen_down = False
    try:
        try:
            wait_until(
                lambda: "rank 0 of 3 on node4" in cycle_logs(work).get(1, ""), 90, message="node4 took rank 0"
            )

            def down() -> bool:
                return "DOWN" in slurm_cluster.node_fields("node1").get("State", "")

            wait_until(down, 120, interval=0.5, message="Slurm to mark node1 DOWN")
            seen_down = True
            # --no-kill: Slurm removes node1 from the job and the job runs on
            assert slurm_cluster.job_state(job.job_id) == "RUNNING"
        except AssertionError:
            raise AssertionError(logs_of(work)) from None
        _say_go(slurm_cluster, work)
        fields = slurm_cluster.wait_final(job, timeout=120)
    finally:
        for pid in (launcher, *workers):  # what Slurm would kill once node1 answers again
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in daemons:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        slurm_cluster.wait_nodes_idle(timeout=120)
    assert seen_down
    assert (fields["JobState"], fields["Restarts"]) == ("COMPLETED", "0"), logs_of(work)
    result = outcome_of(work, job.job_id)
    assert (result["exit_code"], result["lost_nodes"]) == (0, ["node1"]), result
    assert result["store_successions"] == ["epoch 1: node2 hosts the store after node1 was lost in cycle 0"]
    # node1 did not answer: nothing there could be killed, and the outcome names each process
    named = sorted(re.sub(r"\): .*", ")", u) for u in result["unfenced"])
    assert named == sorted(
        [f"node1: pid {launcher} (launcher)", *(f"node1: pid {w} (rank 0)" for w in workers)]
    )
    last = cycle_record(work, job.job_id, result["last_cycle"])
    assert last["active_nodes"] == ["node4", "node2", "node3"] and last["master_addr"] == "node4"
    slurm_cluster.assert_no_user_processes()


@pytest.mark.timeout(300)
def test_the_store_host_lost_twice_in_a_row_the_job_goes_on_while_spares_last(slurm_cluster):
    """2 active nodes + 2 spares: node1 (the store host) dies, node2 succeeds it; then node2
    (now the store host) dies too, node3 succeeds it; each lost node rank moves to a spare."""
    work, job = _submit_writer(slurm_cluster, "succession-twice", spares=2)

    def kill_node(cycle: int, node: str) -> None:
        procs = node_processes(work, job.job_id, cycle, node)
        for pid in (procs["launcher_pid"], *(w["pid"] for w in procs["workers"])):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def training(cycle: int, line: str) -> None:
        try:
            wait_until(lambda: line in cycle_logs(work).get(cycle, ""), 90, message=line)
        except AssertionError:
            raise AssertionError(logs_of(work)) from None

    training(0, "rank 0 of 2 on node1")
    kill_node(0, "node1")
    training(1, "rank 0 of 2 on node3")
    training(1, "rank 1 of 2 on node2")
    kill_node(1, "node2")
    training(2, "rank 1 of 2 on node4")
    _say_go(slurm_cluster, work)
    fields = slurm_cluster.wait_final(job, timeout=120)
    assert fields["JobState"] == "COMPLETED", logs_of(work)
    assert fields["Restarts"] == "0"
    result = outcome_of(work, job.job_id)
    assert (result["exit_code"], result["lost_nodes"]) == (0, ["node1", "node2"]), result
    assert result["store_successions"] == [
        "epoch 1: node2 hosts the store after node1 was lost in cycle 0",
        "epoch 2: node3 hosts the store after node2 was lost in cycle 1",
    ], result
    last = cycle_record(work, job.job_id, result["last_cycle"])
    assert last["active_nodes"] == ["node3", "node4"] and last["master_addr"] == "node3", last
    slurm_cluster.assert_no_user_processes()
