"""Run the installed ``slurm-ft-healthcheck`` console script the way Slurm would.

The environment is built from scratch: no ``PATH`` (slurmd gives HealthCheckProgram
none), no inherited ``SLURM_*`` (tests may themselves run inside a job), a test marker
so orphan checks can find every process the command started, and an empty config file
so a system-wide /etc/slurm-ft/healthcheck.yaml cannot leak in.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.procs import MARKER_VAR

COMMAND = str(Path(sys.executable).parent / "slurm-ft-healthcheck")


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    wall_s: float

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()

    @property
    def err_lines(self) -> list[str]:
        return self.stderr.splitlines()


def base_env(marker: str, empty_config: Path, **extra: str) -> dict[str, str]:
    env = {
        "LANG": "C.UTF-8",
        MARKER_VAR: marker,
        "SLURMD_NODENAME": "testnode",
        "SLURM_FT_CONFIG": str(empty_config),
    }
    env.update(extra)
    return env


def run(
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    prefix: Sequence[str] = (),
    timeout: float = 30.0,
) -> Run:
    start = time.monotonic()
    proc = subprocess.run(
        [*prefix, COMMAND, *args],
        env=dict(env),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start)
