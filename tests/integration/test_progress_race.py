"""A real writer process rewrites the iteration file non-atomically thousands of times.

The writer does what trainers do (open with truncation, then write), and makes it worse:
every number goes out in two pieces with a pause between them, so a reader that trusts one
read sees empty files and prefixes (``10`` of ``1002345``) that parse as valid, smaller
iterations. Every value the writer writes has seven digits and is ``BASE + STEP * i``, so
a torn prefix can never be mistaken for a written value. The reader under test must only
ever return a value the writer wrote, in non-decreasing order, or flag the reading.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from slurm_ft import atomicfile
from slurm_ft.config import ProgressSettings
from slurm_ft.progress import IterationReading, ProgressTracker, parse_iteration, read_iteration
from slurm_ft.statedir import StateDir
from tests.support.procs import MARKER_VAR, describe, new_marker, pids_with_marker

pytestmark = pytest.mark.timeout(120)

BASE = 1_000_000
STEP = 3
REWRITES = 3000

WRITER = r"""
import sys, time
path, count, base, step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(count):
    value = str(base + step * i)
    cut = 1 + i % (len(value) - 1)
    tail = "\n" if i % 2 else ""
    with open(path, "w") as fh:          # truncates: readers can see an empty file
        fh.write(value[:cut])
        fh.flush()                       # readers can see a prefix that parses
        time.sleep(0.0002)
        fh.write(value[cut:] + tail)
    if i % 150 == 149:
        time.sleep(0.2)                  # a quiet spell, like the time between checkpoints
print(base + step * (count - 1), flush=True)
"""


def written(value: int, last: int) -> bool:
    return BASE <= value <= last and (value - BASE) % STEP == 0


def start_writer(path: Path, marker: str) -> subprocess.Popen[str]:
    env = {**os.environ, MARKER_VAR: marker}
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(REWRITES), str(BASE), str(STEP)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


class NaiveReader(threading.Thread):
    """Reads the file once per look, as a careless reader would; proves the hazard is real."""

    def __init__(self, path: Path, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.path, self.stop, self.torn = path, stop, 0

    def run(self) -> None:
        while not self.stop.is_set():
            value = parse_iteration(self.path.read_text())
            if value is None or not written(value, BASE + STEP * REWRITES):
                self.torn += 1


def test_reader_racing_a_non_atomic_writer_never_returns_a_torn_value(tmp_path: Path) -> None:
    path = tmp_path / "latest_checkpointed_iteration.txt"
    atomicfile.write_bytes(path, str(BASE).encode())
    marker = new_marker()
    writer = start_writer(path, marker)
    stop = threading.Event()
    naive = NaiveReader(path, stop)
    naive.start()
    readings: list[IterationReading] = []
    floor = BASE  # the writer only goes up: anything lower needs confirming, as in the tracker
    try:
        while writer.poll() is None:
            readings.append(read_iteration(str(path), floor=floor))
            if readings[-1].valid:
                floor = readings[-1].iteration
        out, _ = writer.communicate(timeout=30)
    finally:
        stop.set()
        naive.join(timeout=10)
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=10)
    assert writer.returncode == 0
    last = int(out.strip())
    readings.append(read_iteration(str(path), floor=floor))

    valid = [r.iteration for r in readings if r.valid]
    flagged = [r for r in readings if not r.valid]
    wrong = [v for v in valid if not written(v, last)]
    assert wrong == [], f"torn values returned as valid: {wrong[:10]}"
    assert valid == sorted(valid), "a later reading went backwards"
    assert valid[-1] == last, "the final, quiet file must read as the last value written"
    assert len(valid) >= 5, f"only {len(valid)} valid readings out of {len(readings)}"
    for r in flagged:
        assert r.warning is not None and r.warning.startswith(
            f"checkpoint iteration file {path} did not parse"
        )
    print(f"readings: {len(valid)} valid, {len(flagged)} flagged; naive torn reads: {naive.torn}")
    assert naive.torn > 0, "the writer never exposed a torn state; the test would prove nothing"
    assert pids_with_marker(marker) == [], describe(pids_with_marker(marker))


def test_tracker_verdicts_racing_a_non_atomic_writer(tmp_path: Path) -> None:
    """Cycles while the writer runs: every cycle progresses, or is flagged; none goes backwards."""
    path = tmp_path / "latest_checkpointed_iteration.txt"
    atomicfile.write_bytes(path, str(BASE).encode())
    state = StateDir(tmp_path / "state")
    settings = ProgressSettings(str(path), max_no_progress_cycles=10_000, min_progress_iterations=1)
    warnings: list[str] = []
    tracker = ProgressTracker(state, settings, attempt=0, on_warning=warnings.append)
    marker = new_marker()
    writer = start_writer(path, marker)
    cycle = 0
    try:
        while writer.poll() is None:
            assert tracker.before_cycle(cycle) is None
            tracker.after_cycle(cycle, "worker-failed")
            cycle += 1
        writer.communicate(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=10)
    assert writer.returncode == 0
    assert cycle >= 5
    ledger = tracker.ledger
    assert [c.cycle for c in ledger.cycles] == list(range(cycle))
    for c in ledger.cycles:
        assert written(c.iteration_start, BASE + STEP * REWRITES), c
        if c.warnings:
            assert c.progressed is False or not any(w.startswith("end:") for w in c.warnings)
            continue
        assert c.iteration_end is not None and c.iteration_end >= c.iteration_start, c
        assert c.progressed is (c.iteration_end > c.iteration_start), c
    flagged_cycles = sum(1 for c in ledger.cycles if any(w.startswith("end:") for w in c.warnings))
    assert len([w for w in warnings if "did not parse" in w]) >= flagged_cycles
    assert pids_with_marker(marker) == [], describe(pids_with_marker(marker))
