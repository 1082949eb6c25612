"""Node 0's timed readings of the progress source: both ways of looking agree, and the
watch reports each move once, in order."""

from __future__ import annotations

import threading
from pathlib import Path

from slurm_ft.launch import hang, judge
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
