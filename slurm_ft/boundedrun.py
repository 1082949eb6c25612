"""Run a Slurm command (``srun``, ``scancel``, ``scontrol``) and be back by its deadline.

``subprocess.run(timeout=...)`` kills only the process it started, then waits for the
output pipes to close. ``srun`` forks a helper that holds them, so an ``srun`` to a node
that does not answer held its caller until the helper gave up: a fence meant to take 20 s
took 60, and the job's other launchers stopped waiting for the successor. Here the command
runs in a session of its own, and at the deadline the whole session gets SIGKILL. This
module is the one home of that rule.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence

# After the SIGKILL: the pipes close as the killed processes exit. One that cannot exit
# (asleep on a dead mount) is left behind rather than waited for.
REAP_S = 2.0


def run(
    argv: Sequence[str], timeout: float, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``argv``'s exit code, stdout and stderr (text); raises ``subprocess.TimeoutExpired``
    at the deadline (the command's whole session killed) and ``OSError`` when it cannot start."""
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if env is None else dict(env),
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=REAP_S)
        raise subprocess.TimeoutExpired(list(argv), timeout) from None
    return subprocess.CompletedProcess(list(argv), proc.returncode, out, err)
