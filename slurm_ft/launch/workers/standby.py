"""Standby workers: the next cycle's interpreters, started while this cycle trains, with
the job's modules already imported (README: warm restarts).

After a failure, what a user waits for is not the launcher's restart but every new worker's
start-up: the interpreter, ``import torch``, the rest of the trainer's imports. A standby
(:mod:`~slurm_ft.launch.workers.standby_child`) has paid that while the last cycle
trained; the next cycle hands it the rank's complete environment and it runs the script
as ``__main__``. It is a fresh process born the way a cold worker is born
(:func:`~slurm_ft.launch.workers.process.popen`: own session, parent-death signal,
placement), never a fork of a worker, and it never touches a GPU.

Whatever does not match is started cold, said once in the launcher log: a standby that
died, one whose environment (less the cycle's variables) or placement differ from the
worker's, a module (``-m``) or plain command, ``--preload none``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from slurm_ft.launch.workers import process as wk
from slurm_ft.launch.workers.env import JobEnv, standby_env, without_cycle_vars
from slurm_ft.launch.workers.layout import Entry

CHILD = Path(__file__).resolve().with_name("standby_child.py")
# A cycle's workers are past their start-up once each has written something (a line, a
# checkpoint) or this long after they started, whichever comes first: a standby importing
# torch beside them would slow their own start.
START_AFTER_S = 30.0
LOOK_S = 0.5  # how often the watch looks whether to start the standbys, until they are
OUTPUT_MAX_LINES = 20  # of a standby's own output (import warnings) into the launcher log
MESSAGE_MAX = 64 * 1024


# A new session's autogroup starts at nice 0: the share a cold worker has.
COLD_AUTOGROUP_NICE = b"0"
SHARE_BACK_TRIES, SHARE_BACK_RETRY_S = 50, 0.11  # the kernel takes one change in 100 ms


def share_back(pid: int) -> None:
    """Give a standby that becomes a worker before its imports are done a cold worker's CPU
    share at once. It lowered its session's share for the imports (standby_child) and
    raises it only once they end, or after its timer: taken mid-import on a busy node, the
    worker it had become trained at 1.5 % of a core for up to 10 s, then finished imports
    that a cold worker would have done at full share (the goodput runs: 17-55 s to the first
    step of kills right after another restart, against about 1 s). An autogroup's nice can
    be set back without privilege; the kernel takes one such change in 100 ms machine-wide,
    so a busy moment is retried on a thread, not on the restart's path."""
    if not _write_autogroup(pid):
        threading.Thread(target=_retry_share_back, args=(pid,), daemon=True).start()


def _write_autogroup(pid: int) -> bool:
    """True when written or when there is nothing to write (no autogroups, the process gone)."""
    try:
        fd = os.open(f"/proc/{pid}/autogroup", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return True
    try:
        os.write(fd, COLD_AUTOGROUP_NICE)
        return True
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def _retry_share_back(pid: int) -> None:
    for _ in range(SHARE_BACK_TRIES):
        time.sleep(SHARE_BACK_RETRY_S)
        if _write_autogroup(pid):
            return


class Placement(NamedTuple):
    cpus: frozenset[int] | None
    mem_node: int | None


def off_reason(entry: Entry, preload: str, cwd: str) -> str | None:
    """Why this launcher keeps no standbys, or None when it does."""
    if preload == "none":
        return "--preload none"
    if entry.kind == "module":
        return "the workers run a module (-m), which always starts cold"
    if entry.kind != "script":
        return "the workers run a plain command (--no-python), which always starts cold"
    path = os.path.join(cwd, entry.target)
    if not os.path.isfile(path) or _zip_archive(path):
        return f"{entry.target} is not a plain script file"
    return None


ZIP_END = b"PK\x05\x06"  # a zip archive's end record, within its last 64 KiB + 22 bytes
ZIP_TAIL = 65536 + 22


def _zip_archive(path: str) -> bool:
    """A zip application (``python app.pyz``), which Python runs from the archive: only
    ever started cold. Read from the file's end as ``zipfile`` does, without importing it
    on every launch's start (3 ms); a false positive only costs a cold start."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - ZIP_TAIL))
            return ZIP_END in fh.read()
    except OSError:
        return True


def mismatch(
    env: Mapping[str, str], place: Placement, wanted_env: Mapping[str, str], wanted: Placement
) -> str | None:
    """Why a standby built with ``env``/``place`` cannot become the worker that wants
    ``wanted_env``/``wanted`` (None: it can). The cycle's own variables do not count."""
    if place != wanted:
        return "its CPU/NUMA placement differs"
    ours, theirs = without_cycle_vars(env), without_cycle_vars(wanted_env)
    for key in sorted(ours.keys() | theirs.keys()):
        if ours.get(key) != theirs.get(key):
            return f"the environment variable {key} differs"
    return None


def past_start_up(wrote: Mapping[int, int | None], age: float) -> bool:
    """Every worker wrote something, or they have been running :data:`START_AFTER_S`."""
    return age >= START_AFTER_S or (bool(wrote) and all(n for n in wrote.values()))


class Standby:
    """One waiting interpreter and what it was built with. (Plain classes here, not
    dataclasses: this module loads on every launch's start, where defining a dataclass
    costs about a millisecond.)"""

    def __init__(
        self,
        local_rank: int,
        proc: subprocess.Popen[bytes],
        pidfd: int,
        control: socket.socket,
        output: int,
        env: dict[str, str],
        place: Placement,
    ) -> None:
        self.local_rank = local_rank
        self.proc = proc
        self.pidfd = pidfd
        self.control = control
        self.output = output  # read end of its stdout+stderr, until it becomes a worker
        self.env = env
        self.place = place
        self.ready: float | None = None  # seconds its preloads took, once it said so
        self.modules: tuple[str, ...] = ()
        self.failed: str | None = None  # what it said before exiting, when a preload failed
        self.cpu_at_ready: float | None = None
        self.said = b""

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.control.close()
        for fd in (self.output, self.pidfd):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.output = self.pidfd = -1


class StandbyPool:
    """This launcher's standbys, one per local rank at most.

    ``tick`` (from the watch) reads what they said and starts the missing ones once the
    cycle's workers are past their start-up; ``take`` (from the spawn) makes one a worker;
    ``close`` ends the waiting ones."""

    def __init__(
        self,
        *,
        job: JobEnv,
        interpreter: tuple[str, ...],  # python and flags, as a cold start has them
        script_argv: tuple[str, ...],
        preload: str,
        cwd: str,
        nproc_per_node: int,
        placement: Callable[[int], Placement],
        helper: tuple[str, ...],
        say: Callable[[str], None],
    ) -> None:
        self.job = job
        self.interpreter = interpreter
        self.script_argv = script_argv
        self.preload = preload
        self.cwd = cwd
        self.nproc_per_node = nproc_per_node
        self.placement = placement
        self.helper = helper
        self.say = say
        self.waiting: dict[int, Standby] = {}
        self.warm = 0  # workers started from a standby, over the launcher's life
        self.broken: str | None = None  # a preload failed: no more standbys (said once)

    # ----------------------------------------------------------- starting

    @property
    def settling(self) -> bool:
        """A standby has started and not yet said whether its preloads worked."""
        return any(s.ready is None and s.failed is None for s in self.waiting.values())

    @property
    def missing(self) -> bool:
        """Some local rank has no standby, and one could be started."""
        return self.broken is None and len(self.waiting) < self.nproc_per_node

    def tick(self, wrote: Mapping[int, int | None] | None, age: float) -> None:
        """``wrote``: bytes each running worker has written (None: a spare, no workers)."""
        for standby in list(self.waiting.values()):
            self._listen(standby)
        if self.missing and (wrote is None or past_start_up(wrote, age)):
            for local in range(self.nproc_per_node):
                if local not in self.waiting:
                    self._start(local)

    def _start(self, local: int) -> None:
        env = standby_env(self.job, self.nproc_per_node, local)
        place = self.placement(local)
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        read_end, write_end = os.pipe()
        argv = (*self.interpreter, str(CHILD), str(child.fileno()), self.preload, "--", *self.script_argv)
        try:
            proc = wk.popen(
                argv,
                env,
                cwd=self.cwd,
                stdout=write_end,
                stderr=write_end,
                helper=self.helper,
                cpus=place.cpus,
                mem_node=place.mem_node,
                pass_fds=(child.fileno(),),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            parent.close()
            os.close(read_end)
            self.broken = f"cannot start a standby: {exc}"
            self.say(f"standby workers off: {self.broken}")
            return
        finally:
            child.close()
            os.close(write_end)
        parent.setblocking(False)
        os.set_blocking(read_end, False)
        standby = Standby(local, proc, wk.open_pidfd(proc.pid), parent, read_end, env, place)
        self.waiting[local] = standby

    def _listen(self, standby: Standby) -> None:
        """What a standby said on its socket and its output, without waiting."""
        self._relay_output(standby)
        if standby.ready is not None or standby.failed is not None:
            return
        with contextlib.suppress(BlockingIOError, OSError):
            standby.said += standby.control.recv(MESSAGE_MAX)
        if not standby.said:
            return
        kind, body = standby.said[:1], _parsed(standby.said[1:])
        if body is None:
            return  # not all of it yet
        if kind == b"R":
            standby.ready = float(body.get("seconds", 0.0))  # type: ignore[arg-type]
            standby.modules = tuple(str(m) for m in body.get("modules", ()))  # type: ignore[attr-defined]
            standby.cpu_at_ready = cpu_seconds(standby.proc.pid)
            what = f"preloaded {', '.join(standby.modules)}" if standby.modules else "nothing to preload"
            rss = rss_bytes(standby.proc.pid)
            size = f", RSS {rss / 2**20:.0f} MiB" if rss is not None else ""
            self.say(
                f"standby for local rank {standby.local_rank} ready in {standby.ready:.2f} s ({what}{size})"
            )
        elif kind == b"F":
            standby.failed = f"{body.get('module')}: {body.get('error')}"
            if self.broken is None:  # said once, whichever standby said it first
                self.broken = f"preloading {standby.failed}"
                self.say(f"standby workers off: {self.broken}; workers start cold")

    def _relay_output(self, standby: Standby) -> None:
        if standby.output < 0:
            return
        try:
            data = os.read(standby.output, MESSAGE_MAX)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            os.close(standby.output)
            standby.output = -1
            return
        lines = data.decode(errors="replace").splitlines()
        for line in lines[:OUTPUT_MAX_LINES]:
            self.say(f"standby for local rank {standby.local_rank}: {line}")
        if len(lines) > OUTPUT_MAX_LINES:
            self.say(
                f"standby for local rank {standby.local_rank}: ({len(lines) - OUTPUT_MAX_LINES} more lines)"
            )

    # ----------------------------------------------------------- becoming a worker

    def take(
        self, spec: wk.WorkerSpec, cwd: str | None, out: int | None, err: int | None
    ) -> tuple[subprocess.Popen[bytes], int] | None:
        """The standby of ``spec``'s local rank made its worker (its process and pidfd),
        or None with the reason said: then the spawn starts it cold."""
        standby = self.waiting.pop(spec.local_rank, None)
        if standby is None:
            return None
        self._listen(standby)
        why = self._unusable(standby, spec)
        if why is not None:
            self.say(f"standby for local rank {spec.local_rank} not used: {why}; starting it cold")
            self._end(standby)
            return None
        payload = json.dumps(
            {"argv": list(self.script_argv), "cmdline": list(spec.argv), "env": dict(spec.env), "cwd": cwd}
        ).encode()
        try:
            with _memfd(payload) as body:
                socket.send_fds(
                    standby.control, [b"A"], [1 if out is None else out, 2 if err is None else err, body]
                )
        except OSError as exc:
            self.say(
                f"standby for local rank {spec.local_rank} not used: {exc.strerror or exc}; starting it cold"
            )
            self._end(standby)
            return None
        self._relay_output(standby)
        if standby.ready is None and standby.failed is None:
            share_back(standby.proc.pid)  # still importing: a worker now, at a cold one's share
        proc, pidfd = standby.proc, standby.pidfd
        standby.pidfd = -1  # the worker's now
        standby.close()
        self.warm += 1
        return proc, pidfd

    def _unusable(self, standby: Standby, spec: wk.WorkerSpec) -> str | None:
        if standby.failed is not None:
            return f"its preload failed ({standby.failed})"
        code = standby.proc.poll()
        if code is not None:
            return f"it had exited ({'signal ' + str(-code) if code < 0 else 'exit code ' + str(code)})"
        return mismatch(standby.env, standby.place, spec.env, Placement(spec.cpus, spec.mem_node))

    # ----------------------------------------------------------- ending

    def _end(self, standby: Standby) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(standby.proc.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError, OSError, subprocess.TimeoutExpired):
            standby.proc.wait(timeout=5.0)
        standby.close()

    def close(self) -> None:
        """End every waiting standby (the launcher is leaving)."""
        while self.waiting:
            self._end(self.waiting.popitem()[1])

    # ----------------------------------------------------------- cost

    def cost(self) -> tuple[int | None, int, float]:
        """(ready standbys, their RSS in bytes, CPU seconds they used since they were ready)."""
        ready = [s for s in self.waiting.values() if s.ready is not None]
        rss = sum(rss_bytes(s.proc.pid) or 0 for s in ready)
        cpu = sum(max(0.0, (cpu_seconds(s.proc.pid) or 0.0) - (s.cpu_at_ready or 0.0)) for s in ready)
        return len(ready), rss, cpu


def _parsed(raw: bytes) -> dict[str, object] | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


@contextlib.contextmanager
def _memfd(payload: bytes) -> Iterator[int]:
    """A descriptor holding ``payload`` from its start: the activation travels as one, so
    sending it never waits on a standby still importing."""
    fd = os.memfd_create("slurm-ft-activation", os.MFD_CLOEXEC)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


def rss_bytes(pid: int) -> int | None:
    """Resident memory of ``pid`` (VmRSS of /proc/<pid>/status)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of ``pid`` (/proc/<pid>/stat)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
        fields = raw[raw.rfind(b")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


__all__ = ["StandbyPool", "mismatch", "off_reason", "past_start_up"]
