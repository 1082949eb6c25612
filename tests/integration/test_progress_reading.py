"""Readings taken the way the launcher takes them: in a child, against a deadline, around cycles.

A hung mount is stood in for by a FIFO with no writer (as in the health-check tests): the
reader's open() blocks in it exactly as a read on a dead NFS mount blocks, and nothing but
the deadline ends the wait. (A real dead mount sleeps uninterruptibly; the child is then
abandoned rather than reaped, the same code path.)
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from slurm_ft.config import ProgressSettings
from slurm_ft.progress import GUARD_OFF, ProgressTracker, load_ledger
from slurm_ft.progress.reading import PendingReading, first
from slurm_ft.settingsyntax import FILE, ITERATION_FILE, SourceSpec
from slurm_ft.statedir import StateDir
from tests.support.procs import is_alive
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(60)

HUNG_BOUND_S = 10.0  # generous: the point is "returns", not how fast (benchmarks measure that)


def test_a_hung_source_is_abandoned_at_the_deadline(tmp_path: Path) -> None:
    fifo = tmp_path / "snapshot.pt"
    os.mkfifo(fifo)
    spec = SourceSpec(FILE, str(fifo))
    started = time.monotonic()
    pending = PendingReading(spec, timeout=0.5)
    reading = first(pending)
    assert time.monotonic() - started < HUNG_BOUND_S
    assert reading.warning == (
        f"progress source file:{fifo} did not answer within 0.5 s (a hung mount?); not judged"
    )
    assert (reading.present, reading.answered) == (False, False), (
        "a source that does not answer tells nothing"
    )
    # The reader was killed, not left blocked in the FIFO.
    pid = pending.pid
    assert pid is not None
    wait_until(lambda: not is_alive(pid), 10, message="the abandoned reader to die")


def test_a_tracker_on_a_hung_source_never_hangs_the_launcher(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    os.mkfifo(ckpt / "latest")  # DeepSpeed's tag file, on a "dead mount"
    (ckpt / "global_step5").mkdir()
    settings = ProgressSettings(source=f"checkpoint-dir:{ckpt}", read_timeout=0.3)
    warnings: list[str] = []
    started = time.monotonic()
    tracker = ProgressTracker(StateDir(tmp_path / "state"), settings, 0, on_warning=warnings.append)
    assert tracker.start_line().endswith(
        "does not exist yet: the no-progress guard judges nothing until it does"
    )
    for cycle in range(3):
        assert tracker.before_cycle(cycle) is None
        tracker.begin_reading()
        tracker.after_cycle(cycle, "worker-failed")
    assert time.monotonic() - started < 3 * HUNG_BOUND_S
    assert len(warnings) == 3 and all("did not answer within 0.3 s" in w for w in warnings)
    ledger = load_ledger(StateDir(tmp_path / "state").ledger)
    assert ledger is not None and ledger.streak == 0, "an unseen source must not count against the job"


def test_no_source_is_said_once_and_reads_nothing(tmp_path: Path) -> None:
    tracker = ProgressTracker(StateDir(tmp_path / "state"), ProgressSettings(), 0)
    assert tracker.start_line() == GUARD_OFF == "no progress source: the no-progress guard is off"
    for cycle in range(4):
        assert tracker.before_cycle(cycle) is None
        tracker.begin_reading()
        tracker.after_cycle(cycle, "worker-failed")
    assert tracker.ledger.streak == 0 and tracker.ledger.source is None


def test_a_checkpoint_finished_while_stopping_is_caught_before_it_could_stop_the_job(tmp_path: Path) -> None:
    """The early look (begun when the cycle ended) misses a save the workers finish while
    stopping; because that look would stop the job, it is confirmed after they are gone."""
    it = tmp_path / "latest_checkpointed_iteration.txt"
    it.write_text("100")
    settings = ProgressSettings(str(it), max_no_progress_cycles=1)
    tracker = ProgressTracker(StateDir(tmp_path / "state"), settings, 0)
    assert tracker.before_cycle(0) is None
    early = tracker.begin_reading()
    assert early is not None
    wait_until(early.done, 10, message="the early look")
    it.write_text("200")  # the SIGTERM handler's checkpoint lands after the early look
    tracker.after_cycle(0, "signal-SIGTERM")
    closed = tracker.ledger.cycles[-1]
    assert (closed.iteration_start, closed.iteration_end, closed.progressed) == (100, 200, True)
    assert tracker.before_cycle(1) is None


def test_an_early_look_that_cannot_stop_the_job_is_believed_and_the_progress_moves_on(tmp_path: Path) -> None:
    """Without the risk of a stop nothing is re-read: the missed save is counted in the next
    cycle, whose start is that same early look. Nothing is lost, no job is stopped for it."""
    it = tmp_path / "latest_checkpointed_iteration.txt"
    it.write_text("100")
    settings = ProgressSettings(str(it), max_no_progress_cycles=3)
    tracker = ProgressTracker(StateDir(tmp_path / "state"), settings, 0)
    assert tracker.before_cycle(0) is None
    early = tracker.begin_reading()
    assert early is not None
    wait_until(early.done, 10, message="the early look")
    it.write_text("200")
    tracker.after_cycle(0, "signal-SIGTERM")
    assert tracker.before_cycle(1) is None
    tracker.after_cycle(1, "worker-failed")  # no new checkpoint in cycle 1
    assert [(c.iteration_start, c.iteration_end, c.progressed) for c in tracker.ledger.cycles] == [
        (100, 100, False),
        (100, 200, True),
    ]
    assert tracker.ledger.streak == 0


def test_a_file_source_stops_a_trainer_that_never_replaces_it(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot.pt"
    snapshot.write_bytes(b"epoch 0")
    settings = ProgressSettings(source=f"file:{snapshot}", max_no_progress_cycles=2)
    tracker = ProgressTracker(StateDir(tmp_path / "state"), settings, 0)
    assert tracker.start_line() == (
        f"progress source file:{snapshot}: stop after 2 cycles in a row without progress (>= 1)"
    )
    reasons = []
    for cycle in range(3):
        reasons.append(tracker.before_cycle(cycle))
        if reasons[-1]:
            break
        tracker.begin_reading()
        tracker.after_cycle(cycle, "worker-failed")
    assert reasons == [None, None, f"no progress in the last 2 cycles (file:{snapshot} not replaced)"]


def test_an_iteration_file_that_never_existed_leaves_the_guard_off(tmp_path: Path) -> None:
    it = tmp_path / "latest_checkpointed_iteration.txt"
    settings = ProgressSettings(str(it), max_no_progress_cycles=1)
    tracker = ProgressTracker(StateDir(tmp_path / "state"), settings, 0)
    assert tracker.start_line() == (
        f"progress source {ITERATION_FILE}:{it} does not exist yet: "
        "the no-progress guard judges nothing until it does"
    )
    for cycle in range(3):
        assert tracker.before_cycle(cycle) is None
        tracker.after_cycle(cycle, "worker-failed")
    assert [c.progressed for c in tracker.ledger.cycles] == [None, None, None]


def test_a_save_missed_before_a_requeue_is_credited_by_the_next_attempt(tmp_path: Path) -> None:
    """Preempted: the early look closed the cycle before the SIGTERM handler's save landed.
    The next attempt's launcher reads first and counts that cycle as progress after all."""
    it = tmp_path / "latest_checkpointed_iteration.txt"
    it.write_text("100")
    settings = ProgressSettings(str(it), max_no_progress_cycles=2)
    state = StateDir(tmp_path / "state")
    first_attempt = ProgressTracker(state, settings, 0)
    assert first_attempt.before_cycle(0) is None
    early = first_attempt.begin_reading()
    assert early is not None
    wait_until(early.done, 10, message="the early look")
    it.write_text("200")
    first_attempt.after_cycle(0, "signal-SIGUSR1")
    assert (first_attempt.ledger.cycles[-1].progressed, first_attempt.ledger.streak) == (False, 1)
    second_attempt = ProgressTracker(state, settings, 1)
    assert second_attempt.before_cycle(1) is None
    cycles = second_attempt.ledger.cycles
    assert [(c.iteration_start, c.iteration_end, c.progressed) for c in cycles] == [
        (100, 200, True),
        (200, None, None),
    ]
    assert second_attempt.ledger.streak == 0
