"""Hangs in a cycle's first minutes without a progress source (issue 46), with real
processes on 2 simulated nodes and the default hang settings: the job's known start-up
(the ledger's) ends a later cycle's warm-up, so a hang 15 s into the second cycle, or right
after a requeue, is found at the learned timeout; a rank stopped while the others wait is
found in the first cycle too. And no false alarm: a silent compilation at the start of
every cycle, an evaluation silent for 6 s every 4 s of steps."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.integration.launch_cluster import SimJob
from tests.support import nodefiles

WORKER = Path(__file__).with_name("rhythm_worker.py")
BASE = [
    *["--nproc-per-node", "2", "--health-checks", "none", "--monitor-interval", "0.05"],
    *["--workers-stop-timeout", "3"],
]
GOAL_S = 30.0  # max(30 s, 10 x the 0.5 s interval): the detection goal for these trainers


def run(
    tmp_path: Path, worker: list[str], timeout: float, launcher: tuple[str, ...] = (), attempt: int = 0
) -> SimJob:
    args = [*BASE, "--applog-prefix", str(tmp_path / "logs" / "job.log"), *launcher]
    job = SimJob(tmp_path, 2, args, [str(WORKER), *worker], attempt=attempt)
    job.start()
    try:
        assert job.wait(timeout) == [0, 0], job.dump()
    finally:
        job.kill()
    job.assert_no_orphans()
    return job


def silent_for(detail: str) -> float:
    found = re.search(r"wrote anything for ([0-9.]+)s", detail)
    assert found is not None, detail
    return float(found.group(1))


def ledger(job: SimJob) -> list[dict]:
    return json.loads((job.state / "ledger.json").read_text())["cycles"]


@pytest.mark.timeout(170)
def test_a_hang_15_s_into_the_second_cycle_is_found_within_the_goal(tmp_path):
    """Cycle 0 prints every 0.5 s for 25 s and crashes: its start-up (its first line, a
    fraction of a second in) is confirmed by the steady 20 s after it and kept in the
    ledger. Cycle 1 prints for 15 s and falls silent: its warm-up ended at max(20 s, 7 x
    that start-up), not at 600 s, and the learned 20 s finds the hang."""
    worker = [
        "hang",
        "--every",
        "0.5",
        "--steps",
        "30",
        "--cycle",
        "1",
        "--early-exit",
        "3",
        "--early-steps",
        "50",
    ]
    job = run(tmp_path, worker, 150)
    assert job.cycle_record(0)["first_failure"]["kind"] != "hang", job.cycle_record(0)
    startup = ledger(job)[0]["startup"]
    assert startup is not None and 0 < startup < 2.5, ledger(job)[0]
    f = job.cycle_record(1)["first_failure"]
    assert (f["kind"], f["detector"]) == ("hang", "silence"), f
    assert "learned 20.0s" in f["detail"] and "warm-up ended at 20.0s" in f["detail"], f["detail"]
    assert silent_for(f["detail"]) < GOAL_S, f["detail"]
    err = job.node(0).err()
    assert "warm-up over: ended at 20.0s = max(20s, 7 x the job's start-up " in err, err
    for rank in range(4):  # the stacks are kept as for any hang
        assert nodefiles.stacks_file(job.state, f"node{rank // 2}", 1, rank).exists()
    assert job.cycle_record(2)["outcome"] == "succeeded"


@pytest.mark.timeout(170)
def test_a_hang_right_after_a_requeue_is_found_within_the_goal(tmp_path):
    """Attempt 0 prints every 0.5 s for 25 s and finishes; attempt 1 (a requeue: new
    launchers, the same state dir) prints one line and falls silent at once: found at the
    learned 20 s, past the 20 s warm-up its ledger's start-up gives it."""
    run(tmp_path, ["finish", "--every", "0.5", "--steps", "50"], 90)
    cycles = json.loads((tmp_path / "state" / "ledger.json").read_text())["cycles"]
    assert cycles[0]["startup"] is not None and cycles[0]["silence_gap"], cycles[0]
    cycle = cycles[-1]["cycle"] + 1
    job = run(tmp_path, ["hang", "--every", "0.5", "--steps", "1", "--cycle", str(cycle)], 120, attempt=1)
    f = job.cycle_record(cycle)["first_failure"]
    assert (f["kind"], f["detector"]) == ("hang", "silence"), f
    assert "learned 20.0s" in f["detail"] and "warm-up ended at" in f["detail"], f["detail"]
    assert silent_for(f["detail"]) < GOAL_S, f["detail"]
    assert job.cycle_record(cycle + 1)["outcome"] == "succeeded"


@pytest.mark.timeout(150)
def test_a_rank_stopped_while_its_peers_wait_is_found_in_the_first_cycle(tmp_path):
    """The first cycle (its 600 s warm-up, nothing known yet): 15 s in, rank 3 (node 1)
    stops itself, the other ranks wait silently. No start-up looks like that: the
    stopped-rank rule judges at the 20 s floor, named in the detail, with the rank."""
    job = run(tmp_path, ["hang", "--every", "0.5", "--steps", "30", "--stop-rank", "3"], 120)
    f = job.cycle_record(0)["first_failure"]
    assert (f["kind"], f["detector"]) == ("hang", "silence"), f
    assert "stopped-rank rule: rank(s) 3 " in f["detail"], f["detail"]
    assert f["hung_ranks"] == [3], f
    assert silent_for(f["detail"]) < GOAL_S, f["detail"]
    stacks = nodefiles.stacks_file(job.state, "node1", 0, 3).read_text()
    assert "is stopped (process state T" in stacks, stacks
    assert ledger(job)[0]["silence_gap"] is None or ledger(job)[0]["silence_gap"] < 5, ledger(job)[0]
    assert job.cycle_record(1)["outcome"] == "succeeded"


@pytest.mark.timeout(260)
def test_a_silent_compilation_at_every_start_is_no_hang(tmp_path):
    """Issue 46's 5-minute compilation in a 600 s warm-up, at a smaller scale (the warm-up
    80 s, the floor at its default 20 s): every cycle prints a line, is silent for 40 s,
    then steps. Cycle 0 crashes after 6 s of steps; the ledger keeps its start-up (40 s, a
    silence above the floor that ended in the warm-up, not confirmed by a steady stretch of
    7 x it), so cycle 1's warm-up stays 80 s: no hang in either. The silence lies 20 s above
    the floor: at 25 s (5 s above it) one clean-clone run saw the ranks' first lines and the
    silence's end timed so that no gap passed the floor, and learned a start-up of 0 s."""
    launcher = ("--hang-initial-timeout", "80")
    worker = [
        *["finish", "--every", "0.5", "--steps", "12", "--start-silence", "40"],
        *["--cycle", "1", "--early-exit", "3"],
    ]
    job = run(tmp_path, worker, 220, launcher)
    first = job.cycle_record(0)["first_failure"]
    assert first["kind"] != "hang", first
    assert (job.cycle_record(1)["outcome"], job.cycle_record(1)["first_failure"]) == ("succeeded", None)
    startup = ledger(job)[0]["startup"]
    assert startup is not None and startup >= 39, ledger(job)[0]
    assert "warm-up over" not in job.node(0).err()


@pytest.mark.timeout(170)
def test_an_evaluation_silent_6_s_every_4_s_of_steps_is_no_hang(tmp_path):
    """Steps of 0.5 s, and after every 8 of them an evaluation silent for 6 s, over two
    cycles with the defaults: cycle 0 (crashes after 3 rounds) confirms its start-up and
    learns the 6 s gap; cycle 1's warm-up ends at 20 s and its limit is 7 x 6 s: no hang."""
    rhythm = ["--every", "0.5", "--slow", "12", "--slow-every", "9"]
    worker = ["finish", *rhythm, "--steps", "27", "--cycle", "1", "--early-exit", "3"]
    job = run(tmp_path, worker, 150)
    assert job.cycle_record(0)["first_failure"]["kind"] != "hang", job.cycle_record(0)
    assert (job.cycle_record(1)["outcome"], job.cycle_record(1)["first_failure"]) == ("succeeded", None)
    first = ledger(job)[0]
    assert first["startup"] is not None and 5.0 <= (first["silence_gap"] or 0) <= 8.0, first
    err = job.node(0).err()
    assert "warm-up over: ended at 20.0s" in err, err
