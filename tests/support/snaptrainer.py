"""Trainer processes that take snapshots through slurm_ft.worker, driven one command at a
time by a test (tests/integration/snapshot_worker.py is the trainer)."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class Trainer:
    """A snapshot_worker.py process driven one command at a time."""

    def __init__(
        self,
        where: Path,
        *,
        rank: int = 0,
        world: int = 1,
        local_rank: int = 0,
        local_world: int = 1,
        cycle: int = 1,
        limit: int | None = None,
        mib: float = 0.5,
        resume_step: int | None = None,
    ) -> None:
        env = {
            **os.environ,
            "SLURM_FT_SNAPSHOT_DIR": str(where),
            "RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local_world),
            "SLURM_FT_CYCLE": str(cycle),
        }
        env.pop("SLURM_FT_SNAPSHOT_LIMIT", None)
        env.pop("SLURM_FT_SNAPSHOT_STEP", None)
        if resume_step is not None:
            env["SLURM_FT_SNAPSHOT_STEP"] = str(resume_step)
        if limit is not None:
            env["SLURM_FT_SNAPSHOT_LIMIT"] = str(limit)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration.snapshot_worker", "--mib", str(mib)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._buffer = b""
        assert self._line(120) == "ready"

    def _line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise AssertionError(f"no answer within {timeout} s")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"the trainer exited: {self.finish()}")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()

    def ask(self, command: str, timeout: float = 60) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()
        return self._line(timeout)

    def finish(self) -> tuple[int, list[str]]:
        """Exit code and stderr lines, after asking the trainer to exit."""
        try:
            _, err = self.proc.communicate(b"exit\n", timeout=60)
        except (subprocess.TimeoutExpired, BrokenPipeError, ValueError):
            self.proc.kill()
            _, err = self.proc.communicate()
        return self.proc.returncode, err.decode().splitlines()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate()


def start(trainers: list[Trainer], where: Path, **kw: int | float | None) -> Trainer:
    t = Trainer(where, **kw)
    trainers.append(t)
    return t
