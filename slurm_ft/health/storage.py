"""Storage paths and network mounts, probed in child processes with a hard deadline.

Nothing here touches a mount in-process: each path gets its own short-lived child
(``probe.py``) run through :mod:`slurm_ft.childprobe`, which at the deadline sends it
SIGKILL and abandons it, and the result says "timed out". The only in-process
reads are of ``/proc/self/mountinfo`` and the Lustre ``health_check`` attribute, which
the kernel answers from memory.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from slurm_ft.childprobe import Child
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
    child: Child
    data: dict[str, object]


def _spawn(name: str, op: str, target: str, data: dict[str, object]) -> _Running:
    return _Running(name, Child(PROBE_SCRIPT, [op, target]), data)


def _collect(run: _Running, stop_at: float, budget_s: float) -> Result:
    answer = run.child.collect(stop_at)
    if answer.error is not None:
        return Result(run.name, Status.FAIL, answer.error, 0.0, run.data)
    if answer.output is None:
        return Result(
            run.name,
            Status.FAIL,
            f"timed out after {budget_s:g} s",
            answer.took,
            {**run.data, "timed_out": True, "probe_pid": answer.pid},
        )
    line = answer.output.decode(errors="replace").strip().splitlines()
    text = line[0] if line else ""
    verdict, _, detail = text.partition(" ")
    if verdict == "OK":
        return Result(run.name, Status.PASS, detail, answer.took, run.data)
    if verdict == "FAIL":
        return Result(run.name, Status.FAIL, detail, answer.took, run.data)
    return Result(
        run.name, Status.FAIL, f"probe exited {answer.returncode} without an answer", answer.took, run.data
    )


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
