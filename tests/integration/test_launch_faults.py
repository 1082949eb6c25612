"""Lost launchers, forwarded signals and orphans, with torch-free workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.launch_cluster import ECHO, SimJob, clean_env
from tests.support import procs
from tests.support.waiting import wait_until

BASE = ["--nproc-per-node", "2", "--health-checks", "none", "--monitor-interval", "0.05"]


def forever(job_tmp, *extra: str) -> list[str]:
    return [str(ECHO), "--out", str(job_tmp / "out"), "--forever", *extra]


def all_started(job: SimJob, world: int, restart: int = 0) -> None:
    wait_until(
        lambda: len({s["rank"] for s in job.starts() if s["restart"] == restart}) == world,
        60,
        message=f"{world} workers started\n" + job.dump(),
    )


def worker_pids(job: SimJob) -> list[int]:
    return [s["pid"] for s in job.starts()]


def exits_within(job: SimJob, k: int, seconds: float) -> int:
    node = job.node(k)
    start = time.monotonic()
    wait_until(lambda: node.proc.poll() is not None, seconds, message=f"node{k} launcher exit\n" + job.dump())
    assert time.monotonic() - start <= seconds
    return node.proc.returncode


@pytest.mark.timeout(90)
def test_sigkill_of_node1_launcher_stops_node0_within_10s(tmp_path):
    job = SimJob(tmp_path, 2, BASE, forever(tmp_path)).start()
    try:
        all_started(job, 4)
        job.node(1).proc.kill()
        assert exits_within(job, 0, 10.0) == 1
        err = job.node(0).err()
        assert "cycle 0 failed: node1 (node 1): launcher silent for" in err
        assert "stopping: lost launcher on node1 (exit 1)" in err
        out = job.outcome()
        assert out["exit_code"] == 1 and out["first_failure"]["kind"] == "lost-node"
        # node 1's workers died with their launcher (parent-death signal), node 0's were stopped
        job.assert_no_orphans(timeout=5)
    finally:
        job.kill()


@pytest.mark.timeout(90)
def test_sigkill_of_node0_launcher_ends_every_other_launcher_within_10s(tmp_path):
    job = SimJob(tmp_path, 3, BASE, forever(tmp_path)).start()
    try:
        all_started(job, 6)
        job.node(0).proc.kill()
        assert exits_within(job, 1, 10.0) == 1
        assert exits_within(job, 2, 2.0) == 1
        assert "lost the rendezvous store" in job.node(1).err()
        job.assert_no_orphans(timeout=5)
    finally:
        job.kill()


@pytest.mark.timeout(90)
def test_sigterm_is_forwarded_to_every_worker_and_ends_with_143(tmp_path):
    job = SimJob(tmp_path, 2, BASE, forever(tmp_path)).start()
    try:
        all_started(job, 4)
        for n in job.nodes:
            n.proc.send_signal(signal.SIGTERM)
        assert job.wait(30) == [143, 143], job.dump()
        got = [json.loads(line) for line in (job.out / "signals.jsonl").read_text().splitlines()]
        assert sorted((g["rank"], g["signal"]) for g in got) == [(r, "SIGTERM") for r in range(4)]
        out = job.outcome()
        assert (out["exit_code"], out["outcome"]) == (143, "signal-SIGTERM")
        assert job.cycle_record(0)["outcome"] == "signalled"
        assert not (job.state / "cycles" / "cycle1.json").exists()
        job.assert_no_orphans(timeout=5)
    finally:
        job.kill()


@pytest.mark.timeout(90)
def test_signal_to_one_launcher_ends_the_job_without_another_cycle(tmp_path):
    job = SimJob(tmp_path, 2, BASE, forever(tmp_path)).start()
    try:
        all_started(job, 4)
        job.node(1).proc.send_signal(signal.SIGUSR1)
        assert exits_within(job, 1, 10.0) == 128 + signal.SIGUSR1
        # The job is being stopped (Slurm's warning before a preemption or the time limit
        # reaches every launcher, node 0 learns it from node 1 first): 128+N everywhere and
        # no node named lost, so the template requeues the whole allocation.
        assert exits_within(job, 0, 10.0) == 128 + signal.SIGUSR1
        got = [json.loads(line) for line in (job.out / "signals.jsonl").read_text().splitlines()]
        # Node 0's workers get the same signal and grace to act on it (a checkpoint needs
        # every rank), not the TERM and 0.2 s of a failure stop (issue 47).
        assert sorted((g["rank"], g["signal"]) for g in got) == [(r, "SIGUSR1") for r in range(4)], got
        assert "forwarding SIGUSR1 to workers" in job.node(0).err()
        assert "stopping: node1 received SIGUSR1 (exit 138)" in job.node(0).err()
        assert (job.outcome()["exit_code"], job.outcome()["lost_nodes"]) == (138, [])
        assert {s["restart"] for s in job.starts()} == {0}
        job.assert_no_orphans(timeout=5)
    finally:
        job.kill()


@pytest.mark.timeout(90)
def test_peers_that_leave_on_the_jobs_signal_are_not_waited_for_by_node_0(tmp_path):
    """Preemption: srun forwards USR1 to every launcher; node 0 learns it from node 2
    first and stops, then its own USR1 and node 1's arrive. The peers leave on their own
    signal and never read node 0's final answer: node 0 kept the store up for them until
    their heart-beats were overdue (6 s by default, here 30 s), and the requeue waited."""
    job = SimJob(tmp_path, 3, BASE, forever(tmp_path), extra_env={"SLURM_FT_LAUNCH_HEARTBEAT_TIMEOUT": "30"})
    job.start()
    try:
        all_started(job, 6)
        job.node(2).proc.send_signal(signal.SIGUSR1)
        wait_until(lambda: "cycle 0 stopped: node2" in job.node(0).err(), 20, message=job.dump())
        job.node(1).proc.send_signal(signal.SIGUSR1)
        job.node(0).proc.send_signal(signal.SIGUSR1)
        assert exits_within(job, 1, 15.0) == exits_within(job, 2, 15.0) == 128 + signal.SIGUSR1
        last_peer = time.monotonic()
        assert exits_within(job, 0, 15.0) == 128 + signal.SIGUSR1
        assert time.monotonic() - last_peer < 5.0, job.node(0).err()
        assert "not every peer confirmed" not in job.node(0).err()
        assert (job.outcome()["exit_code"], job.outcome()["lost_nodes"]) == (138, [])
        job.assert_no_orphans(timeout=5)
    finally:
        job.kill()


@pytest.mark.timeout(90)
def test_term_timeout_escalates_to_sigkill(tmp_path):
    job = SimJob(tmp_path, 1, [*BASE, "--term-timeout", "1"], forever(tmp_path, "--ignore-term")).start()
    try:
        all_started(job, 2)
        t0 = time.monotonic()
        job.node(0).proc.send_signal(signal.SIGTERM)
        assert job.wait(20) == [143], job.dump()
        assert time.monotonic() - t0 < 10
        assert "stopped 2 worker(s) with SIGKILL (still running 1 s after SIGTERM)" in job.node(0).err()
        for pid in worker_pids(job):
            assert not procs.is_alive(pid)
        job.assert_no_orphans(timeout=5)
    finally:
        job.kill()


@pytest.mark.timeout(90)
def test_no_grandchild_survives_success_or_failure(tmp_path):
    ok = SimJob(tmp_path / "ok", 1, BASE, [str(ECHO), "--out", str(tmp_path / "ok" / "out"), "--grandchild"])
    ok.tmp.mkdir()
    ok.start()
    try:
        assert ok.wait(30) == [0], ok.dump()
        assert "grandchild" in ok.node(0).out()
        ok.assert_no_orphans(timeout=5)
    finally:
        ok.kill()
    bad = SimJob(
        tmp_path / "bad",
        1,
        [*BASE, "--max-restarts", "0"],
        [str(ECHO), "--out", str(tmp_path / "bad" / "out"), "--grandchild", "--crash-rank", "1"],
    )
    bad.tmp.mkdir()
    bad.start()
    try:
        assert bad.wait(30) == [1], bad.dump()
        bad.assert_no_orphans(timeout=5)
    finally:
        bad.kill()


@pytest.mark.timeout(60)
def test_sigint_between_start_and_join_exits_130(tmp_path):
    # Node 1 of 2 alone: it waits for a node 0 that never comes; ^C must end it promptly.
    job = SimJob(tmp_path, 2, BASE, forever(tmp_path)).start(only=[1])
    try:
        # The handlers are installed before the store is looked for (which the first event
        # line says); the search looks at them between probes of the ports.
        wait_until(lambda: "rendezvous store" in job.node(1).err(), 30, message="launcher looking for node 0")
        job.node(1).proc.send_signal(signal.SIGINT)
        assert exits_within(job, 1, 10.0) == 130
        assert "received SIGINT between cycles; exiting 130" in job.node(1).err()
        job.assert_no_orphans(timeout=5)
    finally:
        job.kill()


@pytest.mark.timeout(90)
def test_frozen_node0_is_noticed_within_10s(tmp_path):
    # SIGSTOP: the store host neither answers nor closes its connections (a vanished node).
    job = SimJob(tmp_path, 2, BASE, forever(tmp_path)).start()
    try:
        all_started(job, 4)
        job.node(0).proc.send_signal(signal.SIGSTOP)
        assert exits_within(job, 1, 10.0) == 1
        assert "rendezvous store" in job.node(1).err()
        mine = [s["pid"] for s in job.starts() if s["rank"] in (2, 3)]
        wait_until(lambda: not any(procs.is_alive(p) for p in mine), 5, message="node1 workers gone")
        # node 0 writes nothing any more: the peer's outcome names it, for the template's
        # exclusions and the report
        outcome = job.outcome()
        assert outcome["exit_code"] == 1 and outcome["lost_nodes"] == ["node0"], outcome
        assert outcome["reason"].startswith("lost node 0 (node0): "), outcome
        report = subprocess.run(
            [sys.executable, "-m", "slurm_ft.cli.report", "--state-dir", str(job.state)],
            capture_output=True,
            text=True,
            timeout=60,
            env=clean_env(),
        )
        assert "lost in attempt 0: node0" in report.stdout, report.stdout + report.stderr
        job.node(0).proc.send_signal(signal.SIGCONT)
        job.node(0).proc.kill()
        job.assert_no_orphans(timeout=5)
    finally:
        job.kill()


@pytest.mark.timeout(90)
def test_exception_in_the_launcher_is_one_line_and_leaves_nothing(tmp_path):
    job = SimJob(
        tmp_path, 2, [*BASE, "--launcher-log", str(tmp_path / "launcher.log")], forever(tmp_path)
    ).start()
    try:
        all_started(job, 4)
        cycles = job.state / "cycles"
        for p in cycles.iterdir():
            p.unlink()
        cycles.rmdir()
        cycles.write_text("not a directory")  # node 0's next record write fails
        victim = next(s["pid"] for s in job.starts() if s["rank"] == 3)
        os.kill(victim, signal.SIGKILL)
        assert job.wait(30) == [1, 1], job.dump()
        err = job.node(0).err()
        assert "Traceback" not in err
        assert err.splitlines()[-1].startswith("slurm-ft-launch: internal error: FileExistsError: ")
        assert "launcher failed: Traceback" in (tmp_path / "launcher.log").read_text()
        job.assert_no_orphans(timeout=5)
    finally:
        job.kill()
