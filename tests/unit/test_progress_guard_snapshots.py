"""The no-progress guard reads the job's newest snapshot step off the readings that the
launcher of node rank 0 appends, not off the memory of the store's host (#44): that host
often stands by (a suspect, or lost and succeeded), and its memory stayed at step 868 while
the active nodes were past 4,000, so cycles that trained counted as no progress."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_ft import atomicfile, records
from slurm_ft.config import ProgressSettings
from slurm_ft.launch.books.stateio import StateIO
from slurm_ft.launch.snapshots import readings
from slurm_ft.progress.tracker import ProgressTracker
from slurm_ft.records import ProgressReading
from slurm_ft.statedir import StateDir


def snap(step: int, at: float = 0.0) -> ProgressReading:
    return ProgressReading(1000.0 + at, step, records.SNAPSHOT_MARK)


@pytest.mark.parametrize("scribe", [False, True], ids=["local", "through the scribe"])
def test_the_last_whole_reading_is_the_jobs_newest_step(tmp_path: Path, scribe: bool) -> None:
    io = StateIO(tmp_path, "node0", timeout=5.0, scribe=scribe)
    path = StateDir(tmp_path).snapshot_readings
    try:
        assert readings.newest_of_job(path, io) is None  # no reading yet
        # hours of readings: only the end of the file is read, its first line cut
        for step in range(1, 2001):
            records.append_reading(path, snap(step, step))
        assert path.stat().st_size > 10 * readings.TAIL_BYTES
        assert readings.newest_of_job(path, io) == 2000
        with path.open("a") as fh:
            fh.write('{"time": 3001.0, "st')  # a writer killed mid-line
        assert readings.newest_of_job(path, io) == 2000
    finally:
        io.close(1.0)


def test_readings_that_are_not_readings_give_no_step(tmp_path: Path) -> None:
    io = StateIO(tmp_path, "node0", scribe=False)
    path = StateDir(tmp_path).snapshot_readings
    path.parent.mkdir(parents=True)
    path.write_text('{"time": 1, "step": true}\n{"time": "x", "step": 3}\nnot json\n')
    assert readings.newest_of_job(path, io) is None
    assert readings.for_guard(False, path, io) is None  # a job without snapshots


def tracker_for(tmp_path: Path, max_cycles: int) -> tuple[ProgressTracker, Path]:
    """The guard of a job whose checkpoint never moves (iteration 7 throughout)."""
    iteration = tmp_path / "iteration.txt"
    atomicfile.write_bytes(iteration, b"7")
    state = StateDir(tmp_path / "state")
    io = StateIO(state.path, "node0", scribe=False)
    settings = ProgressSettings(str(iteration), max_no_progress_cycles=max_cycles, min_progress_iterations=1)
    step = readings.for_guard(True, state.snapshot_readings, io)
    return ProgressTracker(state, settings, attempt=0, snapshot_step=step), state.snapshot_readings


def test_snapshots_that_move_on_another_node_keep_the_job_going(tmp_path: Path) -> None:
    """What the store's host holds does not matter: only node rank 0's readings are read."""
    tracker, path = tracker_for(tmp_path, max_cycles=2)
    for cycle, step in enumerate((12, 40, 71, 95)):
        assert tracker.before_cycle(cycle) is None, tracker.ledger
        records.append_reading(path, snap(step, cycle))  # node rank 0's launcher, elsewhere
        tracker.after_cycle(cycle, "worker-failed")
    assert [c.progressed for c in tracker.ledger.cycles] == [True, True, True, True]
    assert [(c.snapshot_start, c.snapshot_end) for c in tracker.ledger.cycles[1:]] == [
        (12, 40),
        (40, 71),
        (71, 95),
    ]
    assert tracker.before_cycle(4) is None


def test_readings_written_after_the_cycle_closed_revise_it_at_the_next_start(tmp_path: Path) -> None:
    """Node rank 0's launcher writes its last readings until its workers are stopped, which
    may be after the store's host closed the cycle; it joins the next cycle only after."""
    tracker, path = tracker_for(tmp_path, max_cycles=1)
    assert tracker.before_cycle(0) is None
    records.append_reading(path, snap(10))
    tracker.after_cycle(0, "worker-failed")
    assert tracker.before_cycle(1) is None
    tracker.after_cycle(1, "worker-failed")  # read before node rank 0's last readings
    assert tracker.ledger.cycles[-1].progressed is False
    records.append_reading(path, snap(18, 1))  # ... written before it joined cycle 2
    assert tracker.before_cycle(2) is None, tracker.ledger
    revised = tracker.ledger.cycles[1]
    assert (revised.progressed, revised.snapshot_end, tracker.ledger.streak) == (True, 18, 0)
    tracker.after_cycle(2, "worker-failed")  # nothing moved in cycle 2
    assert tracker.before_cycle(3) == "no progress in the last 1 cycles (iteration stuck at 7)"
