"""benchmarks/instructions.py: callgrind's count of one process, or one clear error."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

from benchmarks import instructions, proc


def test_without_valgrind_the_row_says_what_to_install(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    with pytest.raises(proc.BenchError, match="valgrind is not installed"):
        instructions.count([sys.executable, "-c", "pass"], env, tmp_path / "log")
    row = instructions.row(1, "m", [sys.executable, "-c", "pass"], [sys.executable], env, tmp_path)
    assert row.ours is None and "valgrind is not installed" in (row.error or "")


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_a_count_is_repeatable_and_a_failed_command_is_not_counted(tmp_path):
    env = dict(os.environ)
    first = instructions.count([sys.executable, "-c", "pass"], env, tmp_path / "a.log")
    again = instructions.count([sys.executable, "-c", "pass"], env, tmp_path / "b.log")
    more = instructions.count([sys.executable, "-c", "import json"], env, tmp_path / "c.log")
    assert first > 1  # millions: an interpreter start is some tens of millions
    assert abs(again - first) / first < 0.02
    assert more > first
    with pytest.raises(proc.BenchError, match="exited 3 under callgrind"):
        instructions.count([sys.executable, "-c", "raise SystemExit(3)"], env, tmp_path / "d.log")
