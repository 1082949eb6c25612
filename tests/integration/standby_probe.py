"""A worker that writes down what it sees of its own process, then ends the way it is told.

Run by the warm-restart tests under ``slurm-ft-launch``, once with standby workers and once
with every worker started cold: the two descriptions must agree. Torch-free.

Cycle 0: every rank prints a line and waits until the launcher has started its standbys
(``SLURM_FT_PROBE_WAIT_STANDBYS``, or kills them when the value is ``kill``), then rank 1
fails so that a cycle 1 follows. Cycle 1: each rank writes ``<dir>/seen-rank<R>.json`` and
rank 0 ends as ``SLURM_FT_PROBE_END`` says (the others end well): ``ok``, ``exit3``,
``raise``, ``interrupt``, ``segv``, ``hang``.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time

import __main__

PR_GET_PDEATHSIG = 2


def standbys_of(launcher: int) -> list[int]:
    """The launcher's children that are standby workers (by their command line)."""
    found = []
    for task in os.listdir(f"/proc/{launcher}/task"):
        try:
            with open(f"/proc/{launcher}/task/{task}/children") as fh:
                pids = [int(p) for p in fh.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if b"standby_child.py" in fh.read():
                        found.append(pid)
            except OSError:
                continue
    return found


def wait_for_standbys(launcher: int, count: int, kill: bool) -> None:
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        pids = standbys_of(launcher)
        if len(pids) >= count:
            if kill:
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.05)
    raise SystemExit("no standby workers appeared within 20 s")


def wait_for_log(spec: str) -> None:
    """Until the launcher log (``PATH|TEXT``) has TEXT in it."""
    path, text = spec.split("|", 1)
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        try:
            with open(path) as fh:
                if text in fh.read():
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"{text!r} not in {path} within 20 s")


def fd_kinds() -> list[str]:
    kinds = []
    for fd in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("pipe:"):
            target = "pipe"
        elif target.startswith("/proc/"):
            continue  # the listing's own descriptor
        elif target.startswith(("/dev/shm/", "/tmp/")):
            target = "file:" + os.path.basename(target)
        kinds.append(f"{fd}:{target}")
    return kinds


def cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read()


def describe(out: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    sig = ctypes.c_int(0)
    libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(sig), 0, 0, 0)
    main_attrs = {
        key: repr(value) if key not in ("__loader__", "__builtins__") else type(value).__name__
        for key, value in vars(__main__).items()
        if key.startswith("__")
    }
    seen = {
        "argv": sys.argv,
        # what ps, pgrep -f and accounting read (a warm worker's may end in NUL padding)
        "cmdline": [w.decode() for w in cmdline(os.getpid()).rstrip(b"\0").split(b"\0")],
        "orig_argv": sys.orig_argv,
        "path": sys.path,
        "file": __file__,
        "name": __name__,
        "main_is_this": sys.modules["__main__"] is __main__ and __main__.__dict__ is globals(),
        "main_attrs": sorted(main_attrs.items()),
        "flags": repr(sys.flags),
        "cwd": os.getcwd(),
        "session_leader": os.getsid(0) == os.getpid(),
        "group_leader": os.getpgid(0) == os.getpid(),
        "parent_is_launcher": any(
            name in cmdline(os.getppid()) for name in (b"slurm-ft-launch", b"slurm_ft.cli.launch")
        ),
        "pdeathsig": sig.value,
        "affinity": sorted(os.sched_getaffinity(0)),
        "umask": os.umask(0o022),
        "fds": fd_kinds(),
        "stdin": os.readlink("/proc/self/fd/0"),
        "stdout_tty": sys.stdout.isatty(),
        "stdout_encoding": sys.stdout.encoding,
        "stdout_write_through": getattr(sys.stdout, "write_through", None),
        "handlers": {
            name: repr(signal.getsignal(getattr(signal, name)))
            for name in ("SIGINT", "SIGTERM", "SIGPIPE", "SIGUSR1", "SIGCHLD")
        },
        "env": {k: v for k, v in os.environ.items()},
        "modules_yaml": "yaml" in sys.modules,
        "modules_localdep": "probe_localdep" in sys.modules,
        "threads": len(os.listdir("/proc/self/task")),
    }
    with open(out, "w") as fh:
        json.dump(seen, fh, indent=1, sort_keys=True)


def main() -> None:
    rank, cycle = int(os.environ["RANK"]), int(os.environ["SLURM_FT_CYCLE"])
    print(f"rank {rank} in cycle {cycle}", flush=True)
    first_cycle = int(os.environ.get("SLURM_FT_PROBE_FIRST_CYCLE", "0"))
    if cycle == first_cycle:
        wait = os.environ.get("SLURM_FT_PROBE_WAIT_STANDBYS")
        if wait:
            wait_for_standbys(os.getppid(), int(os.environ["LOCAL_WORLD_SIZE"]), kill=wait == "kill")
        if os.environ.get("SLURM_FT_PROBE_WAIT_LOG"):
            wait_for_log(os.environ["SLURM_FT_PROBE_WAIT_LOG"])
        if rank == 1:
            sys.exit(1)
        time.sleep(30)  # stopped by the launcher once rank 1 failed
        return
    describe(os.path.join(os.environ["SLURM_FT_PROBE_DIR"], f"seen-rank{rank}.json"))
    end = os.environ.get("SLURM_FT_PROBE_END", "ok") if rank == 0 else "ok"
    if end == "exit3":
        sys.exit(3)
    if end == "raise":
        raise ValueError(f"rank {rank} raised on purpose")
    if end == "interrupt":
        raise KeyboardInterrupt
    if end == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if end == "hang":
        hang_here()


def hang_here() -> None:
    while True:  # silent: the launcher's hang detector finds it and asks for the stacks
        time.sleep(1)


if __name__ == "__main__":
    main()
