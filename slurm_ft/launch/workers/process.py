"""The node's worker processes: their command, their start and stop (their environment:
:mod:`slurm_ft.launch.workers.env`).

Each worker is the leader of its own session and process group, so a stop reaches every
process it forked (data-loader workers, compile helpers) with one ``killpg``, and a
terminal ^C reaches the launcher alone, which then forwards it. Each worker is also set to
receive SIGKILL when the launcher dies (``PR_SET_PDEATHSIG``): a launcher killed with
SIGKILL cannot clean up, and the kernel does it instead. PDEATHSIG fires when the
*spawning thread* exits, which is why workers are only ever spawned from the main thread.

Waiting is done on pidfds with ``select.poll`` so the launcher sleeps in the kernel while
workers train (CPU well below 1% of a core) and still wakes the moment one of them exits.
A kernel without ``pidfd_open`` (Linux before 5.3: RHEL/Rocky 8's 4.18, Ubuntu 18.04's
4.15) or a seccomp filter that refuses it gives no such fd: the wait then looks for exits
every ``EXIT_POLL_S`` instead, the way launchers without pidfds always do.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from slurm_ft import parentdeath
from slurm_ft.launch.workers import survivors
from slurm_ft.launch.workers.survivors import Survivor
from slurm_ft.topology.apply import inherited_by_children

PR_SET_CHILD_SUBREAPER = 36
EXIT_POLL_S = 0.05  # without pidfds: how late a worker's exit may be seen (20 looks a second)
SETPRIV_MAX_BYTES = 4 << 20  # how much of setpriv is read for its option table (util-linux: ~80 KB)
_NO_PIDFD_ERRNOS = (errno.ENOSYS, errno.EPERM, errno.EACCES, errno.EINVAL)


class NprocError(ValueError):
    """``--nproc-per-node`` cannot be turned into a positive process count."""


def resolve_nproc(
    value: str,
    *,
    slurm_gpus: int | None,
    gpu_count: Callable[[], int | None],
    cpu_count: int | None,
) -> int:
    """``auto``: GPUs on the node (Slurm, then NVML) or 1; ``gpu``: GPUs or error; ``cpu``; N."""
    text = value.strip().lower()
    if text in ("auto", "gpu"):
        gpus = slurm_gpus if slurm_gpus else gpu_count()
        if gpus:
            return int(gpus)
        if text == "gpu":
            raise NprocError("--nproc-per-node gpu: no GPUs found on this node (Slurm or NVML)")
        return 1
    if text == "cpu":
        return max(1, cpu_count or 1)
    try:
        n = int(text)
    except ValueError:
        raise NprocError(
            f"--nproc-per-node: expected a positive integer, 'auto', 'gpu' or 'cpu', got {value!r}"
        ) from None
    if n < 1:
        raise NprocError(f"--nproc-per-node: must be >= 1, got {n}")
    return n


@dataclass(frozen=True)
class WorkerExit:
    """How one worker ended, taken when the wait saw it (its pidfd, or the next look)."""

    rank: int
    local_rank: int
    pid: int
    exit_code: int | None  # None when ended by a signal
    signal: str | None  # "SIGSEGV"
    when: float  # wall clock, for the failure record

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def describe(self) -> str:
        if self.signal is not None:
            return f"killed by {self.signal}"
        return f"exit code {self.exit_code}"


def exit_from_status(status: int) -> tuple[int | None, str | None]:
    """(exit code, signal name) from a ``waitpid`` status."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"SIG{sig}"
        return None, name
    return os.waitstatus_to_exitcode(status), None


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def become_subreaper() -> None:
    """Orphaned grandchildren of workers re-parent to the launcher, so cleanup can find them."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


@dataclass
class Worker:
    """A running worker: its process and the pidfd the watch blocks on (when the kernel gives one)."""

    local_rank: int
    rank: int
    proc: subprocess.Popen[bytes]
    pidfd: int  # -1: the kernel gave none (see the module doc)
    exit: WorkerExit | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid


@dataclass
class WorkerGroup:
    """This node's workers of one cycle."""

    workers: list[Worker] = field(default_factory=list)
    stuck: bool = False  # a stop gave up on processes that outlived SIGKILL: never wait again
    killed: int = 0  # workers the last stop had to SIGKILL (still running at its deadline)

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def running(self) -> list[Worker]:
        return [w for w in self.workers if w.exit is None]

    def all_succeeded(self) -> bool:
        return all(w.exit is not None and w.exit.ok for w in self.workers)

    def wait(self, timeout: float, extra_fds: Iterable[int] = ()) -> list[WorkerExit]:
        """Sleep until a worker exits, an extra fd is readable, or ``timeout``; reap exits.
        Workers without a pidfd (see the module doc) are looked for every ``EXIT_POLL_S``
        within the same sleep, so the caller's duties keep their own pace."""
        extra = list(extra_fds)
        deadline = time.monotonic() + timeout
        left = timeout
        while True:
            running = self.running()
            unwatched = any(w.pidfd < 0 for w in running)
            exited, extra_ready = _poll(running, extra, min(left, EXIT_POLL_S) if unwatched else left)
            exits = self.reap() if exited or unwatched else []
            left = deadline - time.monotonic()
            if exits or extra_ready or not unwatched or left <= 0:
                return exits

    def reap(self) -> list[WorkerExit]:
        """Collect every worker that has exited, lowest rank first."""
        new: list[WorkerExit] = []
        for w in self.running():
            try:
                pid, status = os.waitpid(w.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status = w.pid, 0
            if pid == 0:
                continue
            code, sig = exit_from_status(status)
            w.proc.returncode = code if code is not None else -1
            w.exit = WorkerExit(w.rank, w.local_rank, w.pid, code, sig, time.time())
            if w.pidfd >= 0:
                with contextlib.suppress(OSError):
                    os.close(w.pidfd)
            w.pidfd = -1
            new.append(w.exit)
        return new

    def signal_groups(self, signum: int) -> None:
        """Send ``signum`` to every worker's process group, exited leaders included."""
        for w in self.workers:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(w.pid, signum)

    def stop(
        self,
        signum: int,
        timeout: float,
        kill_timeout: float,
        *,
        hurry: Callable[[], bool] | None = None,
        wake_fds: Iterable[int] = (),
    ) -> list[Survivor]:
        """``signum`` to each group, SIGKILL after ``timeout`` (or as soon as ``hurry()``
        says so, looked at whenever one of ``wake_fds`` is readable); then wait at most
        ``kill_timeout`` for the groups to go. Returns what is still there (a process in
        uninterruptible sleep ignores even SIGKILL): nothing, normally. ``killed`` says how
        many needed the SIGKILL."""
        wake = tuple(wake_fds)
        if self.running():
            self.signal_groups(signum)
            deadline = time.monotonic() + timeout
            while self.running():
                left = deadline - time.monotonic()
                if left <= 0 or (hurry is not None and hurry()):
                    break
                self.wait(min(left, 1.0), wake)
        self.killed = len(self.running())
        self.signal_groups(signal.SIGKILL)
        deadline = time.monotonic() + kill_timeout
        while True:
            self.reap()
            left = deadline - time.monotonic()
            stuck = survivors.in_groups(self.pids)
            if not stuck or left <= 0:
                self.reap()  # a leader that died since the look above is a zombie: no survivor
                self.stuck = bool(stuck)
                return stuck
            self.wait(min(left, 0.1))

    def kill_now(self) -> None:
        """Last-resort cleanup on the way out of an exception: SIGKILL and reap."""
        self.signal_groups(signal.SIGKILL)
        deadline = time.monotonic() + (0.0 if self.stuck else 5.0)
        while self.running() and time.monotonic() < deadline:
            self.wait(0.5)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything needed to start one worker, decided before any starts."""

    local_rank: int
    rank: int
    argv: tuple[str, ...]
    env: Mapping[str, str]
    cpus: frozenset[int] | None = None  # CPU affinity it starts with; None: the launcher's
    mem_node: int | None = None  # NUMA node its memory prefers; None: the kernel's default


def pdeathsig_helper(setpriv: str | None) -> tuple[str, ...]:
    """The argv prefix that sets the parent-death signal in the child, or () for none.

    ``Popen(preexec_fn=...)`` forces a full ``fork`` of the launcher, which with torch
    loaded costs ~30 ms per worker (page tables), on the restart's critical path. Without
    ``preexec_fn`` Python uses ``vfork`` (~0.3 ms); util-linux ``setpriv --pdeathsig``
    then sets PR_SET_PDEATHSIG and execs the worker, which keeps it across ``exec``.

    Builds before util-linux 2.33 lack the option: then the launcher falls back to
    ``preexec_fn``. Whether this one has it is read from the program itself (the option's
    name is in its option table): running ``setpriv --help`` cost every launch a process
    and ~1.3 ms before its first worker. A multi-call binary (busybox's ``setpriv`` has no
    such option) is never taken for util-linux's.
    """
    if (
        not setpriv
        or os.path.basename(os.path.realpath(setpriv)) != "setpriv"
        or not os.access(setpriv, os.X_OK)
    ):
        return ()
    try:
        with open(setpriv, "rb") as program:
            body = program.read(SETPRIV_MAX_BYTES)
    except OSError:
        return ()
    if b"pdeathsig" not in body:
        return ()
    return (setpriv, "--pdeathsig", "SIGKILL", "--")


def popen(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    cwd: str | None,
    stdout: int | None,
    stderr: int | None,
    helper: Sequence[str] = (),
    cpus: frozenset[int] | None = None,
    mem_node: int | None = None,
    pass_fds: Sequence[int] = (),
) -> subprocess.Popen[bytes]:
    """How every worker process is born, a cold worker or a standby
    (:mod:`~slurm_ft.launch.workers.standby`): leader of its own session, stdin from
    /dev/null, no descriptor of the launcher but ``pass_fds``, the parent-death signal
    set (``helper``, see :func:`pdeathsig_helper`; else a ``preexec_fn``, which also
    closes the race of a launcher dying before it), and ``cpus``/``mem_node`` inherited
    from this thread at the fork (:func:`slurm_ft.topology.apply.inherited_by_children`),
    so it is born placed. Main thread only: the parent-death signal follows the
    spawning thread."""
    preexec = None if helper else parentdeath.hook(os.getpid())
    with inherited_by_children(cpus, mem_node):
        return subprocess.Popen(
            [*helper, *argv],
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            preexec_fn=preexec,
            close_fds=True,
            pass_fds=tuple(pass_fds),
        )


# A ready process for a spec (a standby made the worker), or None: start it cold.
Adopt = Callable[[WorkerSpec, str | None, int | None, int | None], tuple[subprocess.Popen[bytes], int] | None]


def spawn(
    specs: Sequence[WorkerSpec],
    *,
    cwd: str | None = None,
    output_fds: Mapping[int, int | None] | None = None,
    helper: Sequence[str] = (),
    error_fds: Mapping[int, int | None] | None = None,
    adopt: Adopt | None = None,
) -> WorkerGroup:
    """Start the workers; ``output_fds`` maps local rank -> write end for stdout+stderr.

    ``error_fds`` gives a worker's stderr its own write end (None: inherited), for
    torchrun's per-stream ``--redirects``/``--tee`` (``AppLog.attach_worker``).
    ``adopt`` offers each spec to the standbys first (:meth:`StandbyPool.take`: the
    process and its pidfd), and what it does not take starts cold through :func:`popen`.
    On a failure part-way (an unexecutable command) the workers already started are killed
    and the error propagates, so a spawn never leaves half a group running.
    """
    group = WorkerGroup()
    try:
        for spec in specs:
            out = output_fds.get(spec.local_rank) if output_fds else None
            err = error_fds[spec.local_rank] if error_fds and spec.local_rank in error_fds else out
            ready = adopt(spec, cwd, out, err) if adopt is not None else None
            if ready is not None:
                proc, pidfd = ready
            else:
                proc = popen(
                    spec.argv,
                    spec.env,
                    cwd=cwd,
                    stdout=out,
                    stderr=err,
                    helper=helper,
                    cpus=spec.cpus,
                    mem_node=spec.mem_node,
                )
                pidfd = open_pidfd(proc.pid)
            group.workers.append(Worker(spec.local_rank, spec.rank, proc, pidfd))
    except BaseException:
        group.kill_now()
        raise
    return group


def _poll(running: Sequence[Worker], extra: Sequence[int], timeout: float) -> tuple[bool, bool]:
    """One sleep on the workers' pidfds and ``extra``: (a worker exited, an extra fd is ready)."""
    poller = select.poll()
    pidfds = {w.pidfd for w in running if w.pidfd >= 0}
    for fd in (*pidfds, *extra):
        poller.register(fd, select.POLLIN)
    try:
        ready = poller.poll(max(0, int(timeout * 1000)))
    except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for safety
        ready = []
    fds = {fd for fd, _ in ready}
    return bool(fds & pidfds), bool(fds - pidfds)


def open_pidfd(pid: int) -> int:
    """A pidfd for ``pid``, or -1 where the kernel has none to give (see the module doc)."""
    opener: Callable[[int], int] | None = getattr(os, "pidfd_open", None)
    if opener is None:
        return -1
    try:
        return opener(pid)
    except OSError as exc:
        if exc.errno in _NO_PIDFD_ERRNOS:
            return -1
        raise


def orphaned_children(self_pid: int) -> list[int]:
    """Children of the launcher that are not workers any more (re-parented grandchildren)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{self_pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{self_pid}/task/{tid}/children") as fh:
                out.extend(int(p) for p in fh.read().split())
        except OSError:
            continue
    return out


def kill_orphans(self_pid: int, timeout: float = 5.0) -> list[int]:
    """SIGKILL and reap every child left behind (a subreaper inherits escaped grandchildren).
    Reaping waits at most ``timeout``: a child in uninterruptible sleep may never go."""
    # Scribe children (writers that end on their own, or sit in state D) are left alone;
    # only a launcher that started one has loaded the scribe module.
    scribe = sys.modules.get("slurm_ft.scribe")
    scribes: frozenset[int] = scribe.leave_alone() if scribe is not None else frozenset()
    killed = []
    for pid in orphaned_children(self_pid):
        if pid in scribes:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    deadline = time.monotonic() + timeout
    left = set(killed)
    while left:
        for pid in list(left):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except (ChildProcessError, OSError):
                done = pid
            if done:
                left.discard(pid)
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    return killed
