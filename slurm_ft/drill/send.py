"""Sending a drill's signal, with the checks that keep it on the job's own processes.

Before each signal: the process holding the pid must be the recorded one (same start tick,
``procident``) and, for a Slurm job, must carry that job's ``SLURM_JOB_ID`` in its
environment. Anything else is skipped and named, never signalled. On another node this
runs as a step of the job itself (``srun --jobid J --overlap -w NODE``, see
``cli/drillsend.py``), so Slurm's own access rules apply on top.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_ft import boundedrun, procident
from slurm_ft.drill.targets import Shot

SRUN_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Sent:
    pid: int
    ok: bool
    problem: str | None = None


def _job_of(pid: int, proc: Path) -> str | None:
    try:
        raw = (proc / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    for item in raw.split(b"\0"):
        if item.startswith(b"SLURM_JOB_ID="):
            return item.split(b"=", 1)[1].decode("ascii", "replace")
    return None


def send_here(shots: Sequence[Shot], sig: int, job_id: str | None, proc: Path = Path("/proc")) -> list[Sent]:
    """Signal ``shots`` on this host, all checks first, then every signal back to back
    (a lost node loses its launcher and its workers in the same moment)."""
    checked: list[tuple[Shot, str | None]] = []
    for shot in shots:
        problem = None
        if not procident.is_same(shot.pid, shot.start_ticks, proc):
            problem = f"pid {shot.pid} is not the recorded process any more (it ended)"
        elif job_id is not None and _job_of(shot.pid, proc) != job_id:
            problem = f"pid {shot.pid} does not belong to job {job_id}: left alone"
        checked.append((shot, problem))
    out: list[Sent] = []
    for shot, problem in checked:
        if problem is not None:
            out.append(Sent(shot.pid, False, problem))
            continue
        try:
            if shot.group and procident.stat(shot.pid, proc) is not None and _leads_group(shot.pid, proc):
                os.killpg(shot.pid, sig)
            else:
                os.kill(shot.pid, sig)
            out.append(Sent(shot.pid, True))
        except ProcessLookupError:
            out.append(Sent(shot.pid, False, f"pid {shot.pid} ended before the signal"))
        except PermissionError:
            out.append(Sent(shot.pid, False, f"pid {shot.pid}: not permitted (not the caller's process)"))
    return out


def _leads_group(pid: int, proc: Path) -> bool:
    found = procident.stat(pid, proc)
    return found is not None and found.pgrp == pid


def shot_words(shots: Sequence[Shot]) -> list[str]:
    """``PID:TICKS[:g]`` per shot: the command line of the on-node helper."""
    return [
        f"{s.pid}:{'' if s.start_ticks is None else s.start_ticks}{':g' if s.group else ''}" for s in shots
    ]


def parse_shot(word: str) -> Shot:
    parts = word.split(":")
    if len(parts) not in (2, 3) or not parts[0].isdigit() or (parts[1] and not parts[1].isdigit()):
        raise ValueError(f"not PID:TICKS[:g]: {word!r}")
    if len(parts) == 3 and parts[2] != "g":
        raise ValueError(f"not PID:TICKS[:g]: {word!r}")
    return Shot(int(parts[0]), int(parts[1]) if parts[1] else None, len(parts) == 3)


def send_via_srun(
    job_id: str, node: str, shots: Sequence[Shot], sig: int, timeout: float = SRUN_TIMEOUT_S
) -> list[Sent]:
    """The same, on ``node``, as an overlapping step of the job: the helper checks and
    signals there and prints one JSON line per pid."""
    cmd = [
        "srun", f"--jobid={job_id}", "--overlap", f"--nodelist={node}", "--nodes=1", "--ntasks=1",
        "--quiet", "--kill-on-bad-exit=1",
        sys.executable, "-m", "slurm_ft.cli.drillsend", "--job", job_id, "--signal", str(int(sig)),
        *shot_words(shots),
    ]  # fmt: skip
    try:
        done = boundedrun.run(cmd, timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Sent(s.pid, False, f"srun to {node} failed: {exc}") for s in shots]
    sent: list[Sent] = []
    for line in done.stdout.splitlines():
        try:
            doc = json.loads(line)
            sent.append(Sent(int(doc["pid"]), bool(doc["ok"]), doc.get("problem")))
        except (ValueError, KeyError, TypeError):
            continue
    if not sent:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        return [Sent(s.pid, False, f"srun to {node} failed: {why}") for s in shots]
    return sent


def preempt(job_id: str, sig: int = signal.SIGUSR1) -> str | None:
    """The signal ``--signal=B:USR1`` would send, to the job's batch script; None or the problem."""
    name = signal.Signals(sig).name.removeprefix("SIG")
    try:
        done = boundedrun.run(["scancel", f"--signal={name}", "--batch", job_id], SRUN_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scancel failed: {exc}"
    if done.returncode != 0:
        return f"scancel failed: {done.stderr.strip() or done.returncode}"
    return None
