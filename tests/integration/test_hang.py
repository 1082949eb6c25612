"""Hang detection with real processes on 2 simulated nodes: each detector finds its hang,
the stacks are kept, every rank stops and the next cycle succeeds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.launch_cluster import SimJob
from tests.support import nodefiles

HANG_WORKER = Path(__file__).with_name("hang_worker.py")
BASE = ["--nproc-per-node", "2", "--health-checks", "none", "--monitor-interval", "0.05"]


def run(tmp_path: Path, mode: str, *launcher: str, worker: tuple[str, ...] = ()) -> SimJob:
    log = tmp_path / "logs" / "job.log"
    args = [*BASE, "--applog-prefix", str(log), "--workers-stop-timeout", "3", *launcher]
    job = SimJob(tmp_path, 2, args, [str(HANG_WORKER), mode, *worker])
    job.start()
    try:
        assert job.wait(90) == [0, 0], job.dump()
    finally:
        job.kill()
    job.assert_no_orphans()
    return job


def first_failure(job: SimJob) -> dict:
    return job.cycle_record(0)["first_failure"]


def cycle_log(tmp_path: Path, cycle: int) -> str:
    return (tmp_path / "logs" / f"job_cycle{cycle}.log").read_text()


@pytest.mark.timeout(120)
def test_a_silent_job_is_found_its_stacks_kept_and_the_next_cycle_succeeds(tmp_path):
    job = run(tmp_path, "silent", "--hang-timeout", "2")
    f = first_failure(job)
    assert (f["kind"], f["detector"], f["node_rank"]) == ("hang", "silence", 0)
    assert f["detail"].startswith("no worker of the job wrote anything for ")
    assert job.cycle_record(1)["outcome"] == "succeeded"
    for rank in range(4):  # every worker on every node, stacks kept before the kill
        stacks = nodefiles.stacks_file(job.state, f"node{rank // 2}", 0, rank).read_text()
        assert "in main" in stacks and "hang_worker.py" in stacks
    log = cycle_log(tmp_path, 0)
    assert "0! stacks at hang (hang, detector silence):" in log
    assert "hang (silence) seen by node0 (node 0)" in job.node(0).err()


@pytest.mark.timeout(120)
def test_a_deadlocked_worker_names_its_function_in_the_cycle_log(tmp_path):
    run(tmp_path, "deadlock", "--hang-timeout", "2", worker=("--hung-rank", "3"))
    notes = [line for line in cycle_log(tmp_path, 0).splitlines() if line.startswith("3! ")]
    assert any("deadlocked_function" in line for line in notes), notes


@pytest.mark.timeout(120)
def test_a_section_timeout_names_the_rank_and_the_section(tmp_path):
    job = run(tmp_path, "section", "--rank-section-timeouts", "step=1.5", worker=("--hung-rank", "2"))
    f = first_failure(job)
    assert (f["detector"], f["rank"], f["hung_ranks"], f["node_rank"]) == ("section", 2, [2], 1)
    assert f["detail"].startswith("rank 2: section 'step' open for ")


@pytest.mark.timeout(120)
def test_a_rank_that_stops_heartbeating_is_found_while_it_still_prints(tmp_path):
    job = run(tmp_path, "heartbeat", "--rank-heartbeat-timeout", "1.5", worker=("--hung-rank", "1"))
    f = first_failure(job)
    assert (f["detector"], f["hung_ranks"]) == ("heartbeat", [1])


@pytest.mark.timeout(120)
def test_an_iteration_file_that_does_not_move_is_a_hang(tmp_path):
    it = tmp_path / "latest_checkpointed_iteration.txt"
    it.write_text("100\n")
    job = run(
        tmp_path,
        "iteration",
        "--checkpoint-iteration-file",
        str(it),
        "--max-no-progress-cycles",
        "5",
        "--hang-iteration-timeout",
        "2",
    )
    f = first_failure(job)
    assert f["detector"] == "iteration" and "checkpoint iteration at 100 for " in f["detail"]


@pytest.mark.timeout(120)
def test_a_quiet_worker_that_heartbeats_is_alive(tmp_path):
    job = run(
        tmp_path,
        "quiet-heartbeat",
        "--hang-timeout",
        "1",
        "--rank-heartbeat-timeout",
        "1",
        worker=("--seconds", "60"),
    )
    record = job.cycle_record(0)
    assert (record["outcome"], record["first_failure"]) == ("succeeded", None)
    assert not (job.state / "cycles" / "cycle1.json").exists()
    outcome = json.loads((job.state / "outcome.json").read_text())
    assert outcome["cycles"] == 1


HANG_GLOO = Path(__file__).with_name("hang_gloo.py")


@pytest.mark.torch
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("detector", "flags"),
    # Silence counts from the workers' start, and three ranks importing torch on two loaded
    # CPUs write nothing for up to ~6 s: a shorter timeout fired while rank 0 was importing.
    [("silence", ["--hang-timeout", "10"]), ("heartbeat", ["--rank-heartbeat-timeout", "4"])],
)
def test_gloo_rank_missing_from_an_all_reduce_is_found(tmp_path, detector, flags):
    """Three ranks: rank 1 never joins the all-reduce ranks 0 and 2 are blocked in."""
    log = tmp_path / "logs" / "job.log"
    args = ["--nproc-per-node", "3", "--health-checks", "none", "--applog-prefix", str(log), *flags]
    job = SimJob(tmp_path, 1, args, [str(HANG_GLOO), "1"], extra_env={"GLOO_SOCKET_IFNAME": "lo"})
    job.start()
    try:
        assert job.wait(200) == [0], job.dump()
    finally:
        job.kill()
    f = first_failure(job)
    assert (f["kind"], f["detector"]) == ("hang", detector)
    if detector == "heartbeat":
        assert f["hung_ranks"] == [0, 1, 2]
    stacks = nodefiles.stacks_file(job.state, "node0", 0, 1).read_text()
    assert "time.sleep" in stacks or "hang_gloo.py" in stacks
    assert "all_reduce" in nodefiles.stacks_file(job.state, "node0", 0, 0).read_text()
    assert "rank 1 all-reduce gave 3" in cycle_log(tmp_path, 1)
    job.assert_no_orphans()
