"""Issue 32, item 10: the smaller things a new user trips over."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from slurm_ft.cli.healthcheck import summary_line
from slurm_ft.cli.usage import table_width
from slurm_ft.config import ProgressSettings
from slurm_ft.health.result import Report, Result, Status
from slurm_ft.progress import ProgressTracker
from slurm_ft.report.jsonout import round_durations
from slurm_ft.statedir import StateDir


def test_a_health_check_with_every_check_skipped_does_not_say_healthy() -> None:
    skipped = Report(
        (Result("nic", Status.SKIP, "no RDMA devices"), Result("gpu", Status.SKIP, "no GPUs")), "n1"
    )
    assert summary_line(skipped) == "node n1: nothing checked (2 skipped), so not known to be healthy"
    assert skipped.to_json()["checked"] is False
    ran = Report((Result("nic", Status.SKIP, "none"), Result("storage:/a", Status.PASS, "ok")), "n1")
    assert summary_line(ran) == "node n1: healthy"
    assert ran.to_json()["checked"] is True


def test_tables_follow_columns_also_when_piped(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    assert table_width(False) == 200 and table_width(True) == 200
    monkeypatch.delenv("COLUMNS")
    assert table_width(False) == 120
    assert table_width(True) is None


def test_json_durations_are_rounded_to_the_millisecond() -> None:
    doc = {"start": 1764690000.123456, "duration_s": 12.300000000000182, "cycles": [{"stop_s": 0.1 + 0.2}]}
    assert round_durations(doc) == {
        "start": 1764690000.123456,
        "duration_s": 12.3,
        "cycles": [{"stop_s": 0.3}],
    }
    assert json.dumps(round_durations({"x_s": None, "n_s": 3})) == '{"x_s": null, "n_s": 3}'


def test_progress_status_says_unknown_not_zero_for_cycles_not_judged(tmp_path: Path) -> None:
    tracker = ProgressTracker(StateDir(tmp_path), ProgressSettings(), 0)
    for cycle in range(2):
        assert tracker.before_cycle(cycle) is None
        tracker.after_cycle(cycle, "failed")
    status = subprocess.run(
        [sys.executable, "-m", "slurm_ft.cli.progress", "status", "--json", "--state-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    )
    cycles = json.loads(status.stdout)["cycles"]
    assert [(c["progressed"], c["progress"]) for c in cycles] == [(None, None), (None, None)]
