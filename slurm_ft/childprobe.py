"""Run a small standard-library script in a child process and abandon it at a deadline.

A process that calls ``stat`` or ``read`` on a dead NFS or Lustre mount sleeps
uninterruptibly: it cannot be killed or reaped until the server answers, and a thread stuck
that way keeps its whole process from exiting. So code that must stay bounded in time (the
health check, the launcher reading a progress source) never touches such a path itself: it
starts a short-lived child (``python -I -S SCRIPT ARGS``, a few milliseconds), and at the
deadline sends it SIGKILL and walks away without waiting. This module is the one home of
that rule; the scripts it runs import nothing but the standard library, because ``-I -S``
leaves the installed package off ``sys.path``.

Starting and collecting are separate calls, so a caller can start a child, do other work
(stop workers, start more children) and collect the answer later against one deadline.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Answer:
    """What a child said before its deadline.

    ``output`` is None when there is no answer: ``timed_out`` (killed and abandoned) or
    ``error`` (it could not be started).
    """

    output: bytes | None
    took: float
    timed_out: bool = False
    error: str | None = None
    returncode: int | None = None
    pid: int | None = None


class Child:
    """One started child; :meth:`collect` may be called once."""

    def __init__(self, script: str, args: Sequence[str]) -> None:
        self.started = time.monotonic()
        self._error: str | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", script, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError as exc:
            self._error = f"cannot start probe: {exc.strerror}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def done(self) -> bool:
        """True once an answer can be collected without waiting."""
        return self._proc is None or self._proc.poll() is not None

    def collect(self, stop_at: float) -> Answer:
        """The child's stdout if it exits before ``stop_at`` (monotonic); else kill and abandon it."""
        proc = self._proc
        if proc is None:
            return Answer(None, 0.0, error=self._error or "probe failed")
        try:
            out: bytes | None = proc.communicate(timeout=max(0.0, stop_at - time.monotonic()))[0]
        except subprocess.TimeoutExpired:
            out = _late_output(proc)
        took = time.monotonic() - self.started
        if out is None:
            # Kill and walk away: a child in uninterruptible sleep cannot be reaped now, and
            # waiting for it would make the caller as stuck as the mount.
            try:
                proc.kill()
            except OSError:
                pass
            if proc.stdout is not None:
                proc.stdout.close()
            return Answer(None, took, timed_out=True, pid=proc.pid)
        return Answer(out, took, returncode=proc.returncode, pid=proc.pid)


def _late_output(proc: subprocess.Popen[bytes]) -> bytes | None:
    """Output of a child that finished while an earlier one used up the wait, else None."""
    if proc.poll() is None:
        return None
    out, _ = proc.communicate()
    return out
