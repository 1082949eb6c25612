"""A real writer process rewrites the iteration file non-atomically thousands of times.

The writer does what trainers do (open with truncation, then write), and makes it worse:
every number goes out in two pieces with a pause between them, so a reader that trusts one
read sees empty files and prefixes (``10`` of ``1002345``) that parse as valid, smaller
iterations. Every value the writer writes has seven digits and is ``BASE + STEP * i``, so
a torn prefix can never be mistaken for a written value. A confirmed reading must believe a
value that did not count as progress only when every look agreed, and the guard must never
stop a writer that keeps advancing.
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
from slurm_ft.progress import ProgressTracker, Reading, parse_iteration
from slurm_ft.progress.reading import PendingReading, settled
from slurm_ft.settingsyntax import ITERATION_FILE, SourceSpec
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


def test_the_hazard_is_real_and_settled_readings_never_believe_a_torn_stall(tmp_path: Path) -> None:
    """A naive reader sees torn values; the confirmed reading the guard uses before a stop
    never reports a value the writer did not write as a valid one."""
    path = tmp_path / "latest_checkpointed_iteration.txt"
    atomicfile.write_bytes(path, str(BASE).encode())
    spec = SourceSpec(ITERATION_FILE, str(path))
    marker = new_marker()
    writer = start_writer(path, marker)
    stop = threading.Event()
    naive = NaiveReader(path, stop)
    naive.start()
    readings: list[Reading] = []
    try:
        while writer.poll() is None:
            # "Counts" never: every reading must then hold still to be believed.
            readings.append(settled(PendingReading(spec, 10, looks=3, spacing=0.01), lambda _r: False))
        out, _ = writer.communicate(timeout=30)
    finally:
        stop.set()
        naive.join(timeout=10)
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=10)
    assert writer.returncode == 0
    last = int(out.strip())
    readings.append(settled(PendingReading(spec, 10, looks=3, spacing=0.01), lambda _r: False))
    valid = [r.iteration for r in readings if r.valid]
    wrong = [v for v in valid if not written(v, last)]
    assert wrong == [], f"torn values returned as valid: {wrong[:10]}"
    assert valid[-1] == last, "the final, quiet file must read as the last value written"
    print(f"readings: {len(valid)} valid of {len(readings)}; naive torn reads: {naive.torn}")
    assert naive.torn > 0, "the writer never exposed a torn state; the test would prove nothing"
    assert pids_with_marker(marker) == [], describe(pids_with_marker(marker))


def test_tracker_never_stops_a_writer_that_keeps_advancing(tmp_path: Path) -> None:
    """Cycles while the writer runs, with the strictest guard (one cycle without progress
    stops): early looks may be torn, but one that would stop the job is confirmed, and a
    writer that keeps advancing is never stopped."""
    path = tmp_path / "latest_checkpointed_iteration.txt"
    atomicfile.write_bytes(path, str(BASE).encode())
    state = StateDir(tmp_path / "state")
    settings = ProgressSettings(str(path), max_no_progress_cycles=1, min_progress_iterations=1)
    tracker = ProgressTracker(state, settings, attempt=0)
    marker = new_marker()
    writer = start_writer(path, marker)
    cycle = 0
    try:
        while writer.poll() is None:
            assert tracker.before_cycle(cycle) is None, tracker.ledger.cycles[-3:]
            tracker.begin_reading()
            tracker.after_cycle(cycle, "worker-failed")
            cycle += 1
        writer.communicate(timeout=30)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=10)
    assert writer.returncode == 0
    assert cycle >= 5
    assert [c.cycle for c in tracker.ledger.cycles] == list(range(cycle))
    assert pids_with_marker(marker) == [], describe(pids_with_marker(marker))
