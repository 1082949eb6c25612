"""This node's workers of one cycle, with their application log: start, wait, stop, close.

The cycle loop sees only this small object (like torch elastic's ``PContext``): how a
worker is spawned, where its output goes and how its error file is read stay here.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from slurm_ft import health, records, worker
from slurm_ft.exitcodes import signal_name
from slurm_ft.launch import hang
from slurm_ft.launch.books.stateio import StateIO
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.output import applog as applog_mod
from slurm_ft.launch.output import streams
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.output.tracebacks import exception_line
from slurm_ft.launch.rendezvous.protocol import Decision
from slurm_ft.launch.workers import process as wk
from slurm_ft.launch.workers import standby
from slurm_ft.launch.workers.env import CycleEnv, JobEnv, RankFiles, worker_env
from slurm_ft.launch.workers.standby import StandbyPool
from slurm_ft.launch.workers.survivors import Survivor
from slurm_ft.logline import rank_width
from slurm_ft.records import Failure, FailureKind

# How long a failure record waits for the failed rank's output to end, to take the last
# traceback from it. The pipe ends as the worker exits; only one held open by a process the
# worker started keeps it, and then the record goes without (the cycle log has it).
TRACEBACK_WAIT_S = 0.5


def _open_applog(
    cfg: AgentConfig,
    cycle: int,
    events: EventLog,
    rules: streams.OutputRules,
    heard: Callable[[], None] | None,
) -> applog_mod.AppLog | None:
    s = cfg.settings.applog
    if not s.prefix and not s.tee and not rules.rank_files:
        return None
    path = (
        applog_mod.cycle_log_path(s.prefix, cycle, cfg.job.node_rank if s.per_node else None)
        if s.prefix
        else None
    )
    return applog_mod.AppLog(
        path,
        rank_width=rank_width(cfg.topo.world_size),
        line_cap=s.line_cap_bytes,
        drain_timeout=s.drain_timeout,
        tee=s.tee,
        tee_local_ranks=frozenset(s.local_ranks_filter) if s.local_ranks_filter is not None else None,
        events=events,
        stall_after=cfg.settings.launch.write_timeout,
        heard=heard,
    )


def _fresh_files(job: JobEnv, rank: int) -> RankFiles:
    """The rank's files for a new cycle: an empty monitor slot, no stack file of the last."""
    files = job.files(rank)
    worker.new_slot(files.slot)
    if files.stack is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(files.stack)
    return files


def _specs(
    cfg: AgentConfig, job: JobEnv, i: int, cycle: int, d: Decision, io: StateIO | None = None
) -> list[wk.WorkerSpec]:
    topo = cfg.topo
    cyc = CycleEnv(topo=topo, master_port=d.master_port, restart_count=i, cycle=cycle)
    argv = tuple(cfg.entry.argv(cfg.python))
    specs = []
    node = cfg.job.node_name
    own = cfg.state.node_dir(node)  # the workers' error files go there: it must exist
    if io is not None:  # bounded: the state dir may sit on a mount that stopped answering
        with contextlib.suppress(OSError):
            io.mkdirs(own)
    else:
        own.mkdir(parents=True, exist_ok=True)
    for local in range(topo.nproc_per_node):
        rank = topo.global_rank(local)
        err = cfg.state.error_file(node, cycle, rank)  # a stale one would be read as this cycle's
        if io is not None:
            with contextlib.suppress(OSError):
                io.unlink(err)
        else:
            with contextlib.suppress(FileNotFoundError):
                err.unlink()
        env = worker_env(job, cyc, local)
        place = cfg.placement.ranks[local] if cfg.placement else None
        cpus, mem_node = (place.cpus, place.mem_node) if place is not None else (None, None)
        specs.append(wk.WorkerSpec(local, rank, argv, env, cpus=cpus, mem_node=mem_node))
    return specs


def _spawn(
    cfg: AgentConfig,
    cycle: int,
    specs: list[wk.WorkerSpec],
    app: applog_mod.AppLog | None,
    rules: streams.OutputRules,
    standbys: StandbyPool | None,
) -> wk.WorkerGroup:
    """The workers, their output into ``app``'s pipes; a spawn that fails closes the log
    (the pipes' ends it gave the workers are closed here either way)."""
    outs: dict[int, int | None] = {}
    errs: dict[int, int | None] = {}
    log_dir = cfg.settings.applog.log_dir
    try:
        if app is not None:
            for spec in specs:
                rank_dir = None
                if rules.rank_files and log_dir:
                    rank_dir = streams.rank_dir(log_dir, cfg.run_id, cycle, spec.rank)
                routes = streams.plan(rules, spec.local_rank)
                outs[spec.local_rank], errs[spec.local_rank] = app.attach_worker(
                    spec.rank, spec.local_rank, routes, rank_dir
                )
        return wk.spawn(
            specs,
            cwd=cfg.cwd,
            output_fds=outs or None,
            error_fds=errs or None,
            helper=cfg.spawn_helper,
            adopt=standbys.take if standbys is not None else None,
        )
    except BaseException:
        if app is not None:
            app.close()
        raise
    finally:
        for fd in {*outs.values(), *errs.values()} - {None}:
            assert fd is not None
            os.close(fd)


def standby_pool(cfg: AgentConfig, run_dir: Path, events: EventLog) -> StandbyPool | None:
    """This launcher's standbys (README: warm restarts), or None, said once, when it keeps
    none. A job without restarts has no next cycle to keep warm."""
    launch = cfg.settings.launch
    why = standby.off_reason(cfg.entry, launch.preload, cfg.cwd)
    if why is None and launch.max_restarts == 0:
        why = "no restarts (--max-restarts 0)"
    if why is not None:
        events.event(f"standby workers off: {why}")
        return None

    def placed(local: int) -> standby.Placement:
        place = cfg.placement.ranks[local] if cfg.placement else None
        return (
            standby.Placement(place.cpus, place.mem_node)
            if place is not None
            else standby.Placement(None, None)
        )

    return StandbyPool(
        job=cfg.job_env(str(run_dir)),
        interpreter=tuple(cfg.entry.interpreter(cfg.python)),
        script_argv=(cfg.entry.target, *cfg.entry.args),
        preload=launch.preload,
        cwd=cfg.cwd,
        nproc_per_node=cfg.topo.nproc_per_node,
        placement=placed,
        helper=cfg.spawn_helper,
        say=events.event,
    )


class CycleWorkers:
    def __init__(
        self,
        cfg: AgentConfig,
        cycle: int,
        group: wk.WorkerGroup,
        app: applog_mod.AppLog | None,
        events: EventLog,
        files: dict[int, RankFiles],
    ) -> None:
        self._cfg = cfg
        self.cycle = cycle
        self.group = group
        self._app = app
        self._events = events
        self.files = files
        self.log_lost = (0, 0)  # lines, bytes the cycle log could not take (after stop)
        self.io: StateIO | None = None  # the launcher's bounded state-dir access
        self.standbys: StandbyPool | None = None  # the next cycle's, started while this one runs
        self._started = time.monotonic()

    @property
    def ranks(self) -> range:
        """The global ranks of this node's workers in this cycle."""
        return self._cfg.topo.ranks

    @classmethod
    def start(
        cls,
        cfg: AgentConfig,
        i: int,
        cycle: int,
        d: Decision,
        events: EventLog,
        run_dir: Path,
        *,
        first: bool = False,
        io: StateIO | None = None,
        standbys: StandbyPool | None = None,
        heard: Callable[[], None] | None = None,
    ) -> CycleWorkers:
        """Spawn the node's workers, from ``standbys`` where they match; a spawn never
        leaves half a group or an open log behind. ``first``: this launcher's first workers
        (what a kernel without pidfds changes is said then, once). ``heard``: called for
        every chunk of output the cycle log reads (the hang watch's clock)."""
        topo = cfg.topo
        events.event(
            f"cycle {cycle} (restart {i}/{cfg.settings.launch.max_restarts}): starting {topo.nproc_per_node} "
            f"worker(s), ranks {topo.ranks.start}-{topo.ranks.stop - 1} of {topo.world_size}, "
            f"MASTER_PORT {d.master_port}"
        )
        job = cfg.job_env(str(run_dir))
        files = {rank: _fresh_files(job, rank) for rank in cfg.topo.ranks}
        specs = _specs(cfg, job, i, cycle, d, io)
        rules = streams.rules_for(cfg.settings.applog)
        app = _open_applog(cfg, cycle, events, rules, heard)
        warm_before = standbys.warm if standbys is not None else 0
        group = _spawn(cfg, cycle, specs, app, rules, standbys)
        if first and any(w.pidfd < 0 for w in group.workers):
            events.event(
                "this kernel gives no pidfds (Linux < 5.3, or a seccomp filter): "
                f"worker exits are looked for every {wk.EXIT_POLL_S:g} s"
            )
        if standbys is not None and standbys.warm > warm_before:
            events.event(
                f"cycle {cycle}: {standbys.warm - warm_before} of {len(specs)} worker(s) started warm"
            )
        workers = cls(cfg, cycle, group, app, events, files)
        workers.io = io
        if standbys is not None and i < cfg.settings.launch.max_restarts:
            workers.standbys = standbys  # a next cycle can follow this one: keep it warm
        return workers

    @property
    def pids(self) -> list[int]:
        return self.group.pids

    def wait(self, timeout: float, extra_fds: Iterable[int]) -> list[wk.WorkerExit]:
        if self.standbys is not None:
            wrote = (
                {w.rank: hang.bytes_written(w.pid) for w in self.group.running()}
                if self.standbys.missing
                else {}
            )
            self.standbys.tick(wrote, time.monotonic() - self._started)
            if self.standbys.missing or self.standbys.settling:  # look again soon: start them, hear them
                timeout = min(timeout, standby.LOOK_S)
        return self.group.wait(timeout, extra_fds=extra_fds)

    def all_succeeded(self) -> bool:
        return self.group.all_succeeded()

    def note_exits(self, exits: list[wk.WorkerExit]) -> wk.WorkerExit | None:
        """The event lines of ``exits``; the first failed one, which alone is said then."""
        bad = [e for e in exits if not e.ok]
        if bad:
            self._events.event(f"worker rank {bad[0].rank} (local {bad[0].local_rank}) {bad[0].describe()}")
            return bad[0]
        for e in exits:
            self._events.event(f"worker rank {e.rank} (local {e.local_rank}) finished")
        return None

    def failure_of(self, e: wk.WorkerExit) -> Failure:
        """The failure record of a worker exit, with ``@record``'s message and traceback,
        else the last traceback the rank wrote to its output (most trainers do not use
        ``@record``; the crash is in their stderr)."""
        reader = self.io.read_json if self.io is not None else None
        err = self._cfg.state.error_file(self._cfg.job.node_name, self.cycle, e.rank)
        message, tb = records.read_error_file(err, reader)
        if tb is None and self._app is not None:
            tb = self._app.last_traceback(e.rank, wait=TRACEBACK_WAIT_S)
            if tb is not None and message is None:
                message = exception_line(tb)
        return Failure(
            kind=FailureKind.WORKER,
            node=self._cfg.job.node_name,
            node_rank=self._cfg.job.node_rank,
            time=e.when,
            rank=e.rank,
            local_rank=e.local_rank,
            exit_code=e.exit_code,
            signal=e.signal,
            detail=e.describe(),
            message=message,
            traceback=tb,
        )

    @property
    def pids_by_rank(self) -> dict[int, int]:
        return {w.rank: w.pid for w in self.group.workers}

    def processes(self) -> list[tuple[int, int, int]]:
        """(rank, local rank, pid) of each worker, for the node's process record."""
        return [(w.rank, w.local_rank, w.pid) for w in self.group.workers]

    def keep_stacks(self, why: str) -> None:
        """Before a hang is stopped: every thread's Python stack of every running worker,
        into ``nodes/<node>/cycle<N>-rank<R>.stacks.txt`` and, as launcher notes, the cycle log."""
        asking = {
            w.rank: (w.pid, stack)
            for w in self.group.running()
            if (stack := self.files[w.rank].stack) is not None
        }
        if not asking:
            return
        stacks = hang.collect_stacks(asking, self._cfg.settings.hang.stack_dump_timeout)
        node = self._cfg.job.node_name
        for rank in sorted(asking):
            text = stacks.get(rank)
            if text is None:
                self._events.event(f"no stack from rank {rank} within the stack dump timeout")
                continue
            path = self._cfg.state.stacks_file(node, self.cycle, rank)
            try:
                if self.io is not None:  # bounded: kept in memory while the state dir stalls
                    self.io.write_bytes(path, text.encode())
                else:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
            except OSError as exc:
                self._events.event(f"cannot keep the stacks of rank {rank} in {path}: {exc.strerror or exc}")
            self._events.event(f"stacks of rank {rank} kept in {path} ({why})")
            if self._app is not None:
                self._app.note(rank, f"stacks at hang ({why}):\n{text}")

    def _grace(self, short: float, long: float) -> None:
        """After the stop signal: the workers get ``short`` seconds, extended up to ``long``
        while any of them is still writing (an unmodified trainer saving a checkpoint) or is
        inside a section (a trainer that says so). A worker that only tears down slowly
        (Lightning's SIGTERM handling takes seconds) is killed after ``short``."""
        start = last_busy = time.monotonic()
        written = {w.rank: hang.bytes_written(w.pid) for w in self.group.running()}
        while self.group.running():
            now = time.monotonic()
            for w in self.group.running():
                count = hang.bytes_written(w.pid)
                if count != written.get(w.rank) or worker.in_section(self.files[w.rank].slot):
                    written[w.rank] = count
                    last_busy = now
            left = min(start + long, last_busy + short) - now
            if left <= 0:
                return
            self.group.wait(min(left, 0.05))

    def stop(
        self,
        signum: int,
        timeout: float,
        *,
        short_grace: float | None = None,
        hurry: Callable[[], bool] | None = None,
        wake_fds: Iterable[int] = (),
    ) -> list[Survivor]:
        """Stop every worker (``signum``, SIGKILL after ``timeout`` or once ``hurry()``
        says so; with ``short_grace``, SIGKILL once the workers have been idle that long,
        see :meth:`_grace`), drain and close the log, and wait for the GPU memory they held
        to come back. Returns the processes that SIGKILL did not end within
        ``launch.kill_timeout`` (each one is an event)."""
        launch = self._cfg.settings.launch
        hurried: list[bool] = []

        def hurry_seen() -> bool:
            if hurry is not None and hurry():
                hurried.append(True)
            return bool(hurried)

        try:
            running = len(self.group.running())
            given = timeout
            if short_grace is not None and running:
                self.group.signal_groups(signum)
                self._grace(short_grace, timeout)
                given, timeout = short_grace, 0.0
            stuck = self.group.stop(signum, timeout, launch.kill_timeout, hurry=hurry_seen, wake_fds=wake_fds)
            if running:
                self._events.event(_stopped_line(running, self.group.killed, signum, given, bool(hurried)))
            for s in stuck:
                self._events.event(
                    f"worker process survived SIGKILL for {launch.kill_timeout:g}s: {s.describe()}"
                )
        finally:
            if self._app is not None:
                stats = self._app.close()
                self.log_lost = (stats.lost_lines, stats.lost_bytes)
                if stats.lost_lines:
                    self._events.event(
                        f"application log lost {stats.lost_lines} line(s) in cycle {self.cycle}"
                    )
        if stuck:
            return stuck  # their GPU memory cannot come back while they are there
        ok, detail = health.wait_for_release(
            self.pids, launch.gpu_release_timeout, launch.gpu_release_tolerance_mib
        )
        if not ok:
            self._events.event(f"GPU memory not released: {detail}")
        return stuck

    def kill_now(self) -> None:
        """Last resort on the way out of an exception."""
        self.group.kill_now()
        if self._app is not None:
            self._app.close()


def _stopped_line(running: int, killed: int, signum: int, grace: float, hurried: bool) -> str:
    """What stopping the workers took, SIGKILL said when it was needed."""
    name = signal_name(signum)
    if not killed:
        return f"stopped {running} worker(s) with {name}"
    why = f"on a second {name}" if hurried else f"still running {grace:g} s after {name}"
    if killed == running:
        return f"stopped {running} worker(s) with SIGKILL ({why})"
    return f"stopped {running} worker(s): {running - killed} with {name}, {killed} with SIGKILL ({why})"


__all__ = ["CycleWorkers"]
