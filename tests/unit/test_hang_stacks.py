"""Stack collection does not wait on a rank that cannot answer (issue 34): a stopped
worker (state T) is not asked, not waited for, and its entry says why."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from slurm_ft.launch import hang
from tests.support.waiting import wait_until


def test_a_stopped_rank_is_recorded_at_once_instead_of_waited_for(tmp_path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        wait_until(lambda: hang.process_state(child.pid) == "T", timeout=10)
        start = time.monotonic()
        out = hang.collect_stacks({3: (child.pid, str(tmp_path / "stacks-rank3.txt"))}, timeout=2.0)
        assert time.monotonic() - start < 0.5
        assert "stopped (process state T" in out[3]
        assert child.poll() is None  # not signalled: it would die of the stack signal's default
    finally:
        child.kill()
        child.wait()


def test_process_state_reads_the_letter_after_the_command() -> None:
    assert hang.process_state(os.getpid()) in ("R", "S")
    assert hang.process_state(2**22 + 12345) is None
