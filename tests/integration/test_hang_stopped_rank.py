"""Stack collection never waits on a rank that cannot answer (issue 34), through the
launcher: a worker SIGSTOPped before the job falls silent is not asked for its stacks, its
stacks file says why, the other rank's stacks are kept, and the cycle ends well within the
stack dump timeout (30 s here) that a wait for the stopped rank would have spent."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from slurm_ft.launch import hang
from tests.integration.launch_cluster import SimJob
from tests.support import nodefiles, procs
from tests.support.waiting import wait_until

WORKER = Path(__file__).with_name("rhythm_worker.py")
STACK_WAIT = 30.0


def worker_of_rank(marker: str, rank: int) -> int | None:
    """The pid of the rhythm worker with ``RANK=rank`` among the test's processes."""
    for pid in procs.pids_with_marker(marker):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"rhythm_worker.py" in cmdline and f"RANK={rank}".encode() in environ:
            return pid
    return None


@pytest.mark.timeout(90)
def test_a_sigstopped_rank_is_not_waited_for_when_the_stacks_are_kept(tmp_path):
    args = [
        *["--nproc-per-node", "2", "--health-checks", "none", "--monitor-interval", "0.05"],
        *["--hang-timeout", "4", "--hang-safety-factor", "0", "--workers-stop-timeout", "2"],
        *["--applog-prefix", str(tmp_path / "logs" / "job.log"), "--preload", "none"],
    ]
    worker = [str(WORKER), "hang", "--every", "0.5", "--steps", "6"]
    job = SimJob(tmp_path, 1, args, worker, extra_env={"SLURM_FT_HANG_STACK_DUMP_TIMEOUT": str(STACK_WAIT)})
    job.start()
    try:
        pid = wait_until(lambda: worker_of_rank(job.marker, 1), 30, message="rank 1's worker")
        os.kill(pid, signal.SIGSTOP)
        wait_until(lambda: hang.process_state(pid) == "T", 5, message="rank 1 stopped")
        assert job.wait(60) == [0], job.dump()  # cycle 1 finishes at once
    finally:
        job.kill()
    job.assert_no_orphans()
    record = json.loads((job.state / "cycles" / "cycle0.json").read_text())
    failure = record["first_failure"]
    assert (failure["kind"], failure["detector"]) == ("hang", "silence"), failure
    # Found, stacks kept, workers stopped (the stopped one by SIGKILL after the 2 s stop
    # timeout): far less than the 30 s a wait for its stacks would have taken.
    assert record["end_time"] - failure["time"] < STACK_WAIT / 3, (record["end_time"], failure["time"])
    stopped = nodefiles.stacks_file(job.state, "node0", 0, 1).read_text()
    assert f"pid {pid} is stopped (process state T" in stopped, stopped
    answered = nodefiles.stacks_file(job.state, "node0", 0, 0).read_text()
    assert "rhythm_worker.py" in answered, answered
    assert "no stack from rank" not in job.node(0).err()
