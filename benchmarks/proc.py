"""Start, time and clean up the processes a benchmark runs.

CPU time is read from ``/proc/<pid>/stat`` (utime + stime of the process itself, never
its children), because the question is what the *launcher* costs, not its workers. A
process's own counters are read while it is a zombie: we wait for its exit with
``WNOWAIT`` so it is not reaped yet, read its final counters, then reap it.

Every process a benchmark starts carries a marker in its environment; ``reap_marked``
finds and kills whatever is left by that marker (torchrun puts each worker in its own
session, so a process-group kill of the agent does not reach them).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MARKER_ENV = "SLURM_FT_BENCH_MARKER"
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchError(RuntimeError):
    """A run that did not do what the benchmark needs (bad exit code, timeout)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def self_cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` itself (all its threads, none of its children)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def threads_cpu_s(pid: int) -> float:
    """CPU time of ``pid``'s live threads in nanosecond resolution (schedstat), for short
    windows where clock ticks (10 ms) are too coarse; falls back to ``self_cpu_s``."""
    total = 0
    try:
        for entry in os.scandir(f"/proc/{pid}/task"):
            try:
                total += int(Path(entry.path, "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    except OSError:
        return self_cpu_s(pid)
    return total / 1e9 if total else self_cpu_s(pid)


@dataclass(frozen=True)
class Finished:
    returncode: int
    wall_s: float
    cpu_s: float
    started: float  # time.time() just before the process was created
    ended: float  # time.time() when its exit was seen


def start(
    cmd: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: str | None = None,
    stdout: int | None = subprocess.DEVNULL,
    stderr: int | None = subprocess.DEVNULL,
) -> tuple[subprocess.Popen[bytes], float, float]:
    """Popen in a new session; returns the process, time.time() and perf_counter at start."""
    wall0, perf0 = time.time(), time.perf_counter()
    proc = subprocess.Popen(
        list(cmd), env=dict(env), cwd=cwd, stdout=stdout, stderr=stderr, start_new_session=True
    )
    return proc, wall0, perf0


def running(proc: subprocess.Popen[bytes]) -> bool:
    """Has it not exited yet? Unlike ``Popen.poll`` this never reaps it, so its final CPU
    counters can still be read by ``finish``."""
    if proc.returncode is not None:
        return False
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def finish(proc: subprocess.Popen[bytes], wall0: float, perf0: float, timeout: float) -> Finished:
    """Wait for exit (bounded), read the zombie's own CPU counters, then reap it."""
    fd = os.pidfd_open(proc.pid)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(timeout * 1000):
            kill_group(proc)
            raise BenchError(f"{proc.args[0]} did not exit within {timeout:g} s")
    finally:
        os.close(fd)
    perf1, wall1 = time.perf_counter(), time.time()
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    try:
        cpu = self_cpu_s(proc.pid)
    except (OSError, ValueError, IndexError):
        cpu = float("nan")
    rc = proc.wait()
    return Finished(rc, perf1 - perf0, cpu, wall0, wall1)


def run(
    cmd: Sequence[str],
    env: Mapping[str, str],
    *,
    timeout: float,
    cwd: str | None = None,
    stdout: int | None = subprocess.DEVNULL,
    stderr: int | None = subprocess.DEVNULL,
) -> Finished:
    proc, wall0, perf0 = start(cmd, env, cwd=cwd, stdout=stdout, stderr=stderr)
    return finish(proc, wall0, perf0, timeout)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)


def marked_pids(marker: str) -> list[int]:
    needle = f"{MARKER_ENV}={marker}".encode()
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            out.append(int(entry.name))
    return out


def reap_marked(marker: str) -> int:
    """SIGKILL every process still carrying ``marker``; returns how many there were."""
    pids = marked_pids(marker)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.01) -> None:
    """Poll ``predicate`` until true; BenchError naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)
