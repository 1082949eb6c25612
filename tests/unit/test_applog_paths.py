"""Cycle log file names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurm_ft.launch.output.applog import cycle_log_path


@pytest.mark.parametrize(
    ("prefix", "cycle", "node", "expected"),
    [
        ("/abs/job.log", 3, None, "/abs/job_cycle3.log"),
        ("/abs/job.log", 3, 1, "/abs/job_node1/job_cycle3.node1.log"),
        ("/abs/job", 3, None, "/abs/job_cycle3"),
        ("/abs/job", 0, 12, "/abs/job_node12/job_cycle0.node12"),
        ("/abs/dir/run.2.txt", 17, None, "/abs/dir/run.2_cycle17.txt"),
        ("/abs/.hidden", 1, None, "/abs/.hidden_cycle1"),
    ],
)
def test_cycle_log_path(prefix: str, cycle: int, node: int | None, expected: str) -> None:
    assert cycle_log_path(prefix, cycle, node) == Path(expected)


@pytest.mark.parametrize(
    ("prefix", "message"),
    [
        ("job.log", "applog prefix must be an absolute path, got 'job.log'"),
        ("logs/job.log", "applog prefix must be an absolute path, got 'logs/job.log'"),
        ("", "applog prefix is empty"),
        ("/abs/dir/", "applog prefix names a directory"),
    ],
)
def test_bad_prefixes_are_refused_with_a_clear_message(prefix: str, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        cycle_log_path(prefix, 0)


def test_negative_cycle_is_refused() -> None:
    with pytest.raises(ValueError, match="cycle must be >= 0"):
        cycle_log_path("/abs/job.log", -1)
