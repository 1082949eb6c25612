"""A launcher frozen with SIGSTOP under a template-shaped srun (``--kill-on-bad-exit=0``):
node 0 decides, ends the job step, and the batch script goes on to its decision.

The workers are a plain ``sleep``; only the launchers import torch (for the TCPStore).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.procs import all_pids, is_alive
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slurm]

HEARTBEAT_TIMEOUT_S = 3

BATCH = f"""#!/bin/bash
#SBATCH --job-name=ft-frozen
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=slurm.out
#SBATCH --time=5
export SLURM_FT_LAUNCH_HEARTBEAT_TIMEOUT={HEARTBEAT_TIMEOUT_S}
srun --ntasks-per-node=1 --kill-on-bad-exit=0 slurm-ft-launch --nproc-per-node 1 \\
    --health-checks none --launcher-log "$PWD/launcher.log" --no-python sleep 600
echo "srun exit $?"
echo "batch script decides: $(cat "$PWD/.slurm_ft/$SLURM_JOB_ID/outcome.json")"
"""


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _of_job(job_id: str, match: Callable[[list[str]], bool]) -> list[int]:
    return [
        p
        for p in all_pids()
        if match(_cmdline(p).split()) and _environ(p).get("SLURM_JOB_ID") == job_id and is_alive(p)
    ]


def _worker(argv: list[str]) -> bool:
    return argv == ["sleep", "600"]


def _launcher(argv: list[str]) -> bool:
    return len(argv) > 1 and argv[1].endswith("/slurm-ft-launch")


@pytest.mark.timeout(240)
@pytest.mark.parametrize("frozen_rank", ["1", "0"])
def test_a_frozen_launcher_does_not_hold_the_allocation(slurm_cluster, frozen_rank):
    """Node 1 frozen: node 0 decides (lost launcher), writes the outcome, ends the step.
    Node 0 frozen: its peer's store watchdog gives up on it, writes the outcome naming
    node 0 lost (so the template's exclusion list has it) and ends the step."""
    work = slurm_cluster.workdir("frozen")
    slurm_cluster.write(work / "job.sbatch", BATCH, mode=0o755)
    job = slurm_cluster.sbatch(work / "job.sbatch")
    try:
        _freeze_and_judge(slurm_cluster, work, job, frozen_rank)
    finally:
        subprocess.run(["scancel", job.job_id], capture_output=True, check=False)  # a failed test


def _freeze_and_judge(slurm_cluster, work: Path, job, frozen_rank: str) -> None:
    wait_until(lambda: len(_of_job(job.job_id, _worker)) == 2, 120, message="both workers running")
    launchers = _of_job(job.job_id, _launcher)
    (launcher,) = [p for p in launchers if _environ(p).get("SLURM_NODEID") == frozen_rank]
    frozen_node = _environ(launcher)["SLURMD_NODENAME"]
    os.kill(launcher, signal.SIGSTOP)
    frozen_at = time.monotonic()
    fields = slurm_cluster.wait_final(job, timeout=120)
    took = time.monotonic() - frozen_at
    out = job.output()
    assert took <= HEARTBEAT_TIMEOUT_S + 30, f"the step outlived the decision: {took:.1f}s\n{out}"
    assert "batch script decides: " in out, out
    assert fields["JobState"] == "COMPLETED", out
    log = (work / "launcher.log").read_text()
    outcome_file = work / ".slurm_ft" / job.job_id / "outcome.json"
    outcome = json.loads(outcome_file.read_text())
    assert (outcome["exit_code"], outcome["lost_nodes"]) == (1, [frozen_node]), out
    assert f"ending the job step: lost launcher on {frozen_node}" in log
    if frozen_rank == "0":
        assert outcome["reason"].startswith(f"lost node 0 ({frozen_node}): "), outcome
    slurm_cluster.assert_no_user_processes()
