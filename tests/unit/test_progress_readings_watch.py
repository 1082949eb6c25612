"""Node 0's timed readings of the progress source: both ways of looking agree, and the
watch reports each move once, in order."""

from __future__ import annotations

import threading
from pathlib import Path

from slurm_ft.launch import hang
from slurm_ft.launch.hang import judge
from slurm_ft.settingsyntax import SourceSpec
from tests.support.waiting import wait_until


def test_the_bounded_look_sees_what_the_look_in_process_sees(tmp_path: Path) -> None:
    spec = SourceSpec("checkpoint-dir", str(tmp_path / "ckpt"))
    assert judge._bounded_mark(spec) is None and judge._progress_mark(spec) is None  # not there yet
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "step_40").write_text("x")
    (tmp_path / "ckpt" / ".tmp-step_50").write_text("half")
    assert judge._bounded_mark(spec) == judge._progress_mark(spec)
    assert judge._progress_mark(spec) is not None and judge._progress_mark(spec)[0] == 40  # type: ignore[index]


def test_the_watch_reports_every_move_once(tmp_path: Path) -> None:
    values = iter([None, (1, "a"), (1, "a"), (2, "b"), (2, "b")])
    seen: list[tuple[int, str | None]] = []
    lock = threading.Lock()

    def read() -> tuple[int, str | None] | None:
        with lock:
            return next(values, (2, "b"))

    watch = hang.IterationWatch(read, 0.01, on_change=lambda step, mark: seen.append((step, mark)))
    watch.start()
    try:
        wait_until(lambda: len(seen) >= 2, 5, message="two moves")
    finally:
        watch.stop()
        watch.join(5)
    assert seen == [(1, "a"), (2, "b")]


def test_the_cycle_s_first_progress_is_a_step_past_its_first_reading() -> None:
    """The first reading of a cycle is the step it resumed from (a checkpoint the last cycle
    left just before it ended may be read only now): it never counts as progress; a later
    step does, once, and a new cycle waits for its own."""
    readings = [None, (100, "old"), (100, "again"), (125, "new"), (150, "newer")]
    taken: list[int] = []
    lock = threading.Lock()
    gate = threading.Event()

    def read() -> tuple[int, str | None] | None:
        with lock:
            if len(taken) == 2:
                gate.wait(5)  # hold the watch here until the test has looked
            taken.append(1)
            return readings[min(len(taken), len(readings)) - 1]

    watch = hang.IterationWatch(read, 0.01)
    watch.restart()
    watch.start()
    try:
        wait_until(lambda: len(taken) >= 2, 5, message="two readings")
        assert watch.progressed() is None  # unreadable, 100, then a new mark at the same step
        gate.set()
        wait_until(lambda: watch.progressed() is not None, 5, message="the first progress")
        first = watch.progressed()
        wait_until(lambda: len(taken) >= 6, 5, message="more readings")
        assert watch.progressed() == first  # the first one, not the latest
        watch.restart()
        assert watch.progressed() is None
    finally:
        watch.stop()
        gate.set()
        watch.join(5)
