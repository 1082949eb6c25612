"""Storage paths and network mounts, probed in child processes with a hard deadline.

A process that calls ``stat`` on a dead NFS or Lustre mount sleeps uninterruptibly: it
cannot be killed or reaped until the server answers, and a thread stuck that way keeps
its whole process from exiting. So nothing here touches a mount in-process. Each path
gets its own short-lived child (``probe.py``); at the deadline the child is sent SIGKILL
and abandoned, never waited on, and the result says "timed out". The only in-process
reads are of ``/proc/self/mountinfo`` and the Lustre ``health_check`` attribute, which
the kernel answers from memory.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_ft.health.result import Result, Status

NETWORK_FSTYPES = frozenset({"lustre", "nfs", "nfs4", "gpfs", "beegfs"})
PROBE_SCRIPT = str(Path(__file__).with_name("probe.py"))


@dataclass(frozen=True)
class Mount:
    mountpoint: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040)."""
    out = []
    i = 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        lfields, rfields = left.split(), right.split()
        if len(lfields) < 5 or len(rfields) < 2:
            continue
        mounts.append(Mount(_unescape(lfields[4]), rfields[0], _unescape(rfields[1])))
    return mounts


def network_mounts(mounts: Sequence[Mount]) -> list[Mount]:
    seen: dict[str, Mount] = {}
    for m in mounts:
        if m.fstype in NETWORK_FSTYPES and m.mountpoint not in seen:
            seen[m.mountpoint] = m
    return list(seen.values())


def discover(proc_root: str) -> list[Mount]:
    try:
        text = (Path(proc_root) / "self" / "mountinfo").read_text(errors="replace")
    except OSError:
        return []
    return network_mounts(parse_mountinfo(text))


def lustre_health(sysfs_root: str, proc_root: str) -> Result | None:
    """The Lustre client's own verdict, when a Lustre client is loaded."""
    for path in (
        Path(sysfs_root) / "fs" / "lustre" / "health_check",
        Path(proc_root) / "fs" / "lustre" / "health_check",
    ):
        start = time.monotonic()
        try:
            text = path.read_text(errors="replace").strip()
        except FileNotFoundError:
            continue
        except OSError as exc:
            return Result(
                "storage:lustre-health",
                Status.FAIL,
                f"cannot read {path}: {exc.strerror}",
                time.monotonic() - start,
                {"path": str(path)},
            )
        took = time.monotonic() - start
        if text == "healthy":
            return Result("storage:lustre-health", Status.PASS, "healthy", took, {"path": str(path)})
        first = text.splitlines()[0] if text else "(empty)"
        return Result(
            "storage:lustre-health",
            Status.FAIL,
            f"lustre health_check says {first!r}",
            took,
            {"path": str(path), "text": text},
        )
    return None


@dataclass
class _Running:
    name: str
    target: str
    proc: subprocess.Popen[bytes] | None
    started: float
    data: dict[str, object]
    spawn_error: str | None = None


def _spawn(name: str, op: str, target: str, data: dict[str, object]) -> _Running:
    started = time.monotonic()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", PROBE_SCRIPT, op, target],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
    except OSError as exc:
        return _Running(name, target, None, started, data, f"cannot start probe: {exc.strerror}")
    return _Running(name, target, proc, started, data)


def _late_output(proc: subprocess.Popen[bytes]) -> bytes | None:
    """Output of a probe that finished while an earlier one used up the wait, else None."""
    if proc.poll() is None:
        return None
    out, _ = proc.communicate()
    return out


def _collect(run: _Running, stop_at: float, budget_s: float) -> Result:
    if run.proc is None:
        return Result(run.name, Status.FAIL, run.spawn_error or "probe failed", 0.0, run.data)
    proc = run.proc
    try:
        out, _ = proc.communicate(timeout=max(0.0, stop_at - time.monotonic()))
    except subprocess.TimeoutExpired:
        out = _late_output(proc)
    if out is None:
        # Kill and walk away: a child in uninterruptible sleep cannot be reaped now, and
        # waiting for it would make this check as stuck as the mount.
        try:
            proc.kill()
        except OSError:
            pass
        if proc.stdout is not None:
            proc.stdout.close()
        took = time.monotonic() - run.started
        return Result(
            run.name,
            Status.FAIL,
            f"timed out after {budget_s:g} s",
            took,
            {**run.data, "timed_out": True, "probe_pid": proc.pid},
        )
    took = time.monotonic() - run.started
    line = out.decode(errors="replace").strip().splitlines()
    text = line[0] if line else ""
    verdict, _, detail = text.partition(" ")
    if verdict == "OK":
        return Result(run.name, Status.PASS, detail, took, run.data)
    if verdict == "FAIL":
        return Result(run.name, Status.FAIL, detail, took, run.data)
    return Result(run.name, Status.FAIL, f"probe exited {proc.returncode} without an answer", took, run.data)


def check(
    paths: Sequence[str],
    *,
    write_probe: bool,
    discover_mounts: bool,
    sysfs_root: str,
    proc_root: str,
    stop_at: float,
    budget_s: float,
) -> list[Result]:
    """Start every probe at once, then collect each before ``stop_at`` (monotonic)."""
    running: list[_Running] = []
    op = "read+write" if write_probe else "read"
    for path in paths:
        running.append(_spawn(f"storage:{path}", op, path, {"path": path, "op": op}))
    if discover_mounts:
        for m in discover(proc_root):
            data: dict[str, object] = {"mountpoint": m.mountpoint, "fstype": m.fstype, "source": m.source}
            running.append(_spawn(f"mount:{m.mountpoint}", "mount", m.mountpoint, data))
    results: list[Result] = []
    health = lustre_health(sysfs_root, proc_root)
    if health is not None:
        results.append(health)
    results += [_collect(run, stop_at, budget_s) for run in running]
    if not results:
        why = "no paths given and no network mounts found" if discover_mounts else "no paths given"
        results.append(Result("storage", Status.SKIP, why, 0.0, {}))
    return results
