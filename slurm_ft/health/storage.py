"""Storage paths and network mounts, probed with a hard deadline.

A process that calls ``stat`` on a dead NFS or Lustre mount sleeps uninterruptibly: it
cannot be killed or reaped until the server answers, and a thread stuck that way keeps
its whole process from exiting. So nothing here touches a network mount in-process: such
a path gets its own short-lived child (``probe.py``, run through :mod:`slurm_ft.childprobe`);
at the deadline the child is sent SIGKILL and abandoned, never waited on, and the result
says "timed out".

The common healthy case, a directory or regular file on a local disk file system
(``LOCAL_FSTYPES``), is probed in-process with the same code, which saves a child's
start-up (most of the check's time). A path qualifies only when every component of it,
symlinks resolved one by one, lies on a mount listed in mountinfo as local, so no call
here ever reaches a network, FUSE or autofs mount; anything else (unknown file systems,
FIFOs and devices, which can block on open, missing paths) takes the child. The other
in-process reads are of ``/proc/self/mountinfo`` and the Lustre ``health_check``
attribute, which the kernel answers from memory.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft.health import probe
from slurm_ft.health.result import Result, Status

if TYPE_CHECKING:
    from slurm_ft.childprobe import Child

NETWORK_FSTYPES = frozenset({"lustre", "nfs", "nfs4", "gpfs", "beegfs"})
# Answered by this node's kernel and disks alone. Anything not listed (network, FUSE,
# autofs, unknown) is probed in a child; so is overlay, whose lower layers may sit on a
# network file system (container images).
LOCAL_FSTYPES = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "zfs", "tmpfs", "ramfs", "devtmpfs"}
)
PROBE_SCRIPT = str(Path(__file__).with_name("probe.py"))
# Linux's own limit on symlinks followed while resolving one path.
_MAX_SYMLINKS = 40


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo that matters here: where, which filesystem, from where."""

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


def read_mounts(proc_root: str) -> list[Mount]:
    """Every mount of this process, in mount order; none when mountinfo cannot be read."""
    try:
        text = (Path(proc_root) / "self" / "mountinfo").read_text(errors="replace")
    except OSError:
        return []
    return parse_mountinfo(text)


def discover(proc_root: str) -> list[Mount]:
    return network_mounts(read_mounts(proc_root))


def mount_of(path: str, mounts: Sequence[Mount]) -> Mount | None:
    """The mount that answers for ``path`` (absolute, no symlinks, no ``..``): the longest
    mount point that contains it, the last mounted of those (mounts stack)."""
    best: Mount | None = None
    for m in mounts:
        point = m.mountpoint.rstrip("/") + "/"
        if (path + "/").startswith(point) and (best is None or len(m.mountpoint) >= len(best.mountpoint)):
            best = m
    return best


def local_target(path: str, mounts: Sequence[Mount]) -> str | None:
    """``path`` resolved, when it is a directory or regular file reached through local
    file systems only; None when it is not (or not surely), so a child must probe it.

    Resolves one component at a time and looks at a component's mount before touching
    it, so a network mount is never reached, not even by the ``lstat`` of its root.
    """
    todo = [part for part in path.split("/") if part]
    resolved = "/"
    links = 0
    st: os.stat_result | None = None
    while todo:
        name = todo.pop(0)
        if name == ".":
            continue
        if name == "..":
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, name)
        m = mount_of(candidate, mounts)
        if m is None or m.fstype not in LOCAL_FSTYPES:
            return None
        try:
            st = os.lstat(candidate)
            if stat.S_ISLNK(st.st_mode):
                links += 1
                target = os.readlink(candidate)
                if links > _MAX_SYMLINKS:
                    return None
                todo[:0] = [part for part in target.split("/") if part]
                if target.startswith("/"):
                    resolved = "/"
                continue
        except OSError:
            return None
        resolved = candidate
    m = mount_of(resolved, mounts)
    if m is None or m.fstype not in LOCAL_FSTYPES:
        return None
    if st is None:
        try:
            st = os.lstat(resolved)
        except OSError:
            return None
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        return None
    return resolved


def off_local_disk(path: str | os.PathLike[str], proc_root: str = "/proc") -> bool:
    """True when ``path`` (which need not exist yet) is reached through a network, FUSE or
    unknown file system, or when that cannot be told safely: the launcher writes such a
    path through a child it can abandon (``slurm_ft.scribe``). Here, not in the scribe, so
    that a launcher whose files are all on local disks never loads the scribe."""
    return not on_local_disk(os.path.abspath(os.fspath(path)), read_mounts(proc_root))


def on_local_disk(path: str, mounts: Sequence[Mount]) -> bool:
    """True when ``path`` (absolute; it need not exist yet) is reached through local disk
    file systems only: its deepest existing ancestor passes :func:`local_target`, and no
    mount other than a local one lies on the way to the rest. The launcher writes such a
    path itself; any other goes through a child it can abandon (``slurm_ft.scribe``)."""
    if not path.startswith("/") or not mounts:
        return False
    parts = [p for p in path.split("/") if p]
    for keep in range(len(parts), -1, -1):
        base = "/" + "/".join(parts[:keep])
        resolved = local_target(base, mounts) if keep else "/"
        if resolved is None:
            continue
        rest = parts[keep:]
        here = mount_of(resolved, mounts)
        if here is None or here.fstype not in LOCAL_FSTYPES:
            return False
        for depth in range(1, len(rest) + 1):
            m = mount_of(os.path.join(resolved, *rest[:depth]), mounts)
            if m is None or m.fstype not in LOCAL_FSTYPES:
                return False
        return True
    return False


def probe_here(name: str, op: str, target: str, data: dict[str, object]) -> Result:
    """The child's probe, run in this process (only for a :func:`local_target`)."""
    started = time.monotonic()
    ok, detail = probe.probe(op, target)
    return Result(name, Status.PASS if ok else Status.FAIL, detail, time.monotonic() - started, data)


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
    """A probe child in flight, collected at the shared deadline."""

    name: str
    child: Child
    data: dict[str, object]


def _spawn(name: str, op: str, target: str, data: dict[str, object]) -> _Running:
    from slurm_ft.childprobe import Child  # only when a child is needed: not on a healthy local node

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
    near_paths: Sequence[str] = (),
) -> list[Result]:
    """Start every child probe at once, probe local paths in-process meanwhile, then
    collect each child before ``stop_at`` (monotonic). ``near_paths``: directories the
    launcher will write into (state dir, log directories), which need not exist yet."""
    op = "read+write" if write_probe else "read"
    mounts = read_mounts(proc_root)
    near = [p for p in dict.fromkeys(near_paths) if p not in paths]
    paths = [*paths, *near]
    ops = [op] * (len(paths) - len(near)) + ["near"] * len(near)
    targets = [
        local_target(path, mounts) if o != "near" else (path if on_local_disk(path, mounts) else None)
        for path, o in zip(paths, ops, strict=True)
    ]
    children: list[_Running | None] = [
        _spawn(f"storage:{path}", o, path, {"path": path, "op": o}) if target is None else None
        for path, target, o in zip(paths, targets, ops, strict=True)
    ]
    mount_runs: list[_Running] = []
    if discover_mounts:
        for m in network_mounts(mounts):
            data: dict[str, object] = {"mountpoint": m.mountpoint, "fstype": m.fstype, "source": m.source}
            mount_runs.append(_spawn(f"mount:{m.mountpoint}", "mount", m.mountpoint, data))
    # While the children start: the local paths, in-process.
    here = [
        probe_here(f"storage:{path}", o, target, {"path": path, "op": o}) if target is not None else None
        for path, target, o in zip(paths, targets, ops, strict=True)
    ]
    results: list[Result] = []
    health = lustre_health(sysfs_root, proc_root)
    if health is not None:
        results.append(health)
    for done, child in zip(here, children, strict=True):
        if done is not None:
            results.append(done)
        elif child is not None:
            results.append(_collect(child, stop_at, budget_s))
    results += [_collect(run, stop_at, budget_s) for run in mount_runs]
    if not results:
        why = "no paths given and no network mounts found" if discover_mounts else "no paths given"
        results.append(Result("storage", Status.SKIP, why, 0.0, {}))
    return results
