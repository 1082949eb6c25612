"""benchmarks.logs_throughput times only runs that did the work: a slurm-ft-logs that
failed (exit 1 with a traceback) or wrote nothing must not become a throughput figure."""

from __future__ import annotations

import pytest

from benchmarks.logs_throughput import check_run

TOOL = ["/venv/bin/slurm-ft-logs", "--state-dir", "s", "--collapse"]
GREP = ["grep", "-F", "x", "f"]


def test_grep_may_find_nothing():
    check_run(GREP, 1, b"", 0)


def test_grep_failing_is_an_error():
    with pytest.raises(RuntimeError, match="failed"):
        check_run(GREP, 2, b"grep: f: No such file", 0)


def test_slurm_ft_logs_exit_1_is_an_error():
    with pytest.raises(RuntimeError, match="failed"):
        check_run(TOOL, 1, b"ModuleNotFoundError: No module named 'slurm_ft'", 0)


def test_slurm_ft_logs_stderr_is_an_error_even_with_exit_0():
    with pytest.raises(RuntimeError, match="stderr"):
        check_run(TOOL, 0, b"slurm-ft-logs: cycle 0: f: No such file", 100)


def test_slurm_ft_logs_empty_output_is_an_error():
    with pytest.raises(RuntimeError, match="wrote nothing"):
        check_run(TOOL, 0, b"", 0)


def test_a_good_run_passes():
    check_run(TOOL, 0, b"", 100)
