"""Learned hang timeouts (issue 34) with real processes on 2 simulated nodes: a hang is
found at the timeout learned from the job's own rhythm, far below ``--hang-timeout``; a
periodic 10x slower step is no hang; the ledger keeps the learned gap."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.integration.launch_cluster import SimJob
from tests.support import nodefiles

WORKER = Path(__file__).with_name("rhythm_worker.py")
BASE = ["--nproc-per-node", "2", "--health-checks", "none", "--monitor-interval", "0.05"]


def run(tmp_path: Path, launcher: list[str], worker: list[str], timeout: float, attempt: int = 0) -> SimJob:
    log = tmp_path / "logs" / "job.log"
    args = [*BASE, "--applog-prefix", str(log), "--workers-stop-timeout", "3", *launcher]
    job = SimJob(tmp_path, 2, args, [str(WORKER), *worker], attempt=attempt)
    job.start()
    try:
        assert job.wait(timeout) == [0, 0], job.dump()
    finally:
        job.kill()
    job.assert_no_orphans()
    return job


@pytest.mark.timeout(150)
def test_a_hang_is_found_at_the_learned_timeout_far_below_the_fixed_one(tmp_path):
    """Lines every 0.2 s for 4 s, then silence: found at the learned timeout (about 15 s
    here: 7 x the gap read to node 0's 2 s tick, above the 2 s floor and 1.5 x the peers'
    10 s report threshold), not at --hang-timeout 60."""
    launcher = ["--hang-timeout", "60", "--hang-initial-timeout", "1", "--hang-learned-floor", "2"]
    job = run(tmp_path, launcher, ["hang", "--every", "0.2", "--steps", "20"], 120)
    f = job.cycle_record(0)["first_failure"]
    assert (f["kind"], f["detector"]) == ("hang", "silence"), f
    assert "learned" in f["detail"], f["detail"]
    silent_for = float(re.search(r"wrote anything for ([0-9.]+)s", f["detail"]).group(1))
    assert silent_for < 30, f["detail"]  # about 15 s (+ a tick), far below 60
    assert job.cycle_record(1)["outcome"] == "succeeded"
    err = job.node(0).err()
    assert "silence hang timeout: learned " in err, err
    ledger = json.loads((job.state / "ledger.json").read_text())
    gap = ledger["cycles"][0]["silence_gap"]
    # The ledger keeps the silence judged a hang (a gap that never ended), so a silent pass
    # that long is no hang in the next cycle: 7 x it, not 7 x the 0.2 s rhythm.
    assert gap is not None and abs(gap - silent_for) <= 2.5, (ledger["cycles"][0], silent_for)
    for rank in range(4):  # the stacks are kept as for any hang
        assert nodefiles.stacks_file(job.state, f"node{rank // 2}", 0, rank).exists()


@pytest.mark.timeout(150)
def test_a_periodic_ten_times_slower_step_is_no_hang(tmp_path):
    """A line a second with every 5th step 10 s long (10x): the floor (20 s by default)
    covers it from the first time, the learned gap becomes 10 s; one cycle, succeeded."""
    launcher = ["--hang-timeout", "120", "--hang-initial-timeout", "1"]
    worker = ["finish", "--every", "1", "--steps", "15", "--slow", "10", "--slow-every", "5"]
    job = run(tmp_path, launcher, worker, 130)
    record = job.cycle_record(0)
    assert (record["outcome"], record["first_failure"]) == ("succeeded", None)
    assert not (job.state / "cycles" / "cycle1.json").exists()
    err = job.node(0).err()
    assert "silence hang timeout: learned 20.0s" in err, err
    gaps = [
        float(g)
        for g in re.findall(r"silence hang timeout: learned [0-9.]+s = .* longest gap ([0-9.]+)s", err)
    ]
    assert 8.0 <= max(gaps) <= 12.0, err  # the slow step, read to the 1 s tick: 7 x ~10 s


@pytest.mark.timeout(90)
def test_a_ten_times_slower_step_every_50_steps_is_no_hang_with_the_defaults(tmp_path):
    """Issue 34's shape at a quarter of the speed: a line every 0.25 s with every 50th step
    10x slower, three times, judged from the first second on (warm-up 1 s) with the default
    factor and floor: no hang, one cycle; the launcher log says the learned timeout and the
    ledger keeps the slow step as the cycle's longest gap. benchmarks.hang_false_alarms runs
    the 1 s trainer for minutes."""
    launcher = ["--hang-timeout", "120", "--hang-initial-timeout", "1", "--preload", "none"]
    worker = ["finish", "--every", "0.25", "--steps", "150", "--slow", "10", "--slow-every", "50"]
    job = run(tmp_path, launcher, worker, 80)
    record = job.cycle_record(0)
    assert (record["outcome"], record["first_failure"]) == ("succeeded", None)
    assert not (job.state / "cycles" / "cycle1.json").exists()
    err = job.node(0).err()
    assert "silence hang timeout: learned 20.0s = max(20s, 7 x longest gap" in err, err
    ledger = json.loads((job.state / "ledger.json").read_text())
    gap = ledger["cycles"][0]["silence_gap"]
    assert gap is not None and 2.0 <= gap <= 5.0, ledger["cycles"][0]  # the 2.5 s step, to node 0's tick


@pytest.mark.timeout(200)
def test_a_requeued_attempt_judges_by_the_gap_its_ledger_kept(tmp_path):
    """Attempt 0 learns a ~2 s gap and finishes; attempt 1 (a requeue, a new launcher) goes
    silent at once and is found at the learned timeout although it learned nothing itself."""
    launcher = ["--hang-timeout", "90", "--hang-initial-timeout", "1", "--hang-learned-floor", "2"]
    run(tmp_path, launcher, ["finish", "--every", "0.5", "--steps", "16"], 90)
    ledger = json.loads((tmp_path / "state" / "ledger.json").read_text())
    kept = ledger["cycles"][0]["silence_gap"]
    assert kept is not None and kept > 0, ledger
    cycle = ledger["cycles"][-1]["cycle"] + 1
    job = run(
        tmp_path, launcher, ["hang", "--every", "0.5", "--steps", "0", "--cycle", str(cycle)], 120, attempt=1
    )
    f = job.cycle_record(cycle)["first_failure"]
    assert (f["kind"], f["detector"]) == ("hang", "silence"), f
    assert "learned" in f["detail"] and f"longest gap {kept:.1f}s" in f["detail"], (f["detail"], kept)
    silent_for = float(re.search(r"wrote anything for ([0-9.]+)s", f["detail"]).group(1))
    assert silent_for < 45, f["detail"]  # far below 90


@pytest.mark.timeout(150)
def test_an_iteration_that_stops_moving_is_found_at_its_learned_timeout(tmp_path):
    """With a progress source and no --hang-iteration-timeout the iteration detector learns
    too: the file moves every 0.5 s, then stops while the workers go on printing."""
    it = tmp_path / "iteration.txt"
    launcher = [
        *["--hang-timeout", "90", "--hang-initial-timeout", "1", "--hang-learned-floor", "3"],
        *["--checkpoint-iteration-file", str(it), "--max-no-progress-cycles", "5"],
    ]
    worker = ["stall", "--every", "0.5", "--steps", "12", "--iteration-file", str(it)]
    job = run(tmp_path, launcher, worker, 120)
    f = job.cycle_record(0)["first_failure"]
    assert (f["kind"], f["detector"]) == ("hang", "iteration"), f
    assert "checkpoint iteration at 12 for " in f["detail"] and "learned" in f["detail"], f["detail"]
    stalled = float(re.search(r"at 12 for ([0-9.]+)s", f["detail"]).group(1))
    assert stalled < 20, f["detail"]
    assert "iteration hang timeout: learned " in job.node(0).err()
    ledger = json.loads((job.state / "ledger.json").read_text())
    assert ledger["cycles"][0]["iteration_gap"] is not None, ledger["cycles"][0]


@pytest.mark.timeout(150)
def test_the_warm_up_ends_at_the_first_progress_so_a_young_cycle_s_hang_is_found_early(tmp_path):
    """With the default 600 s --hang-initial-timeout a cycle of a job that restarts every few
    minutes never left its warm-up, and every hang waited for --hang-timeout. With a progress
    source the warm-up ends at the cycle's first progress: a hang 4 s into the cycle is
    found at a learned timeout, far below --hang-timeout 60."""
    it = tmp_path / "iteration.txt"
    launcher = [
        *["--hang-timeout", "60", "--hang-learned-floor", "2"],
        *["--checkpoint-iteration-file", str(it), "--max-no-progress-cycles", "5"],
    ]
    worker = ["hang", "--every", "0.2", "--steps", "20", "--iteration-file", str(it)]
    job = run(tmp_path, launcher, worker, 120)
    f = job.cycle_record(0)["first_failure"]
    assert f["kind"] == "hang" and "learned" in f["detail"], f
    found = re.search(r"(?:wrote anything|at 20) for ([0-9.]+)s", f["detail"])
    assert found is not None and float(found.group(1)) < 30, f["detail"]
    err = job.node(0).err()
    assert "warm-up over: the cycle's first progress came after " in err, err
    assert job.cycle_record(1)["outcome"] == "succeeded"
