"""This node's workers of one cycle, with their application log: start, wait, stop, close.

The cycle loop sees only this small object (like torch elastic's ``PContext``): how a
worker is spawned, where its output goes and how its error file is read stay here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable

from slurm_ft import health
from slurm_ft.launch import applog as applog_mod
from slurm_ft.launch import records
from slurm_ft.launch import workers as wk
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.eventlog import EventLog
from slurm_ft.launch.framing import rank_width
from slurm_ft.launch.policy import signal_name
from slurm_ft.launch.protocol import Decision
from slurm_ft.launch.records import Failure, FailureKind
from slurm_ft.launch.survivors import Survivor


def _open_applog(cfg: AgentConfig, cycle: int, events: EventLog) -> applog_mod.AppLog | None:
    s = cfg.settings.applog
    if not s.prefix and not s.tee:
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
    )


def _specs(cfg: AgentConfig, i: int, cycle: int, d: Decision) -> list[wk.WorkerSpec]:
    topo = cfg.topo
    cyc = wk.CycleEnv(
        master_port=d.master_port,
        restart_count=i,
        max_restarts=cfg.settings.launch.max_restarts,
        run_id=cfg.run_id,
        cycle=cycle,
        cycle_info=str(cfg.state.cycle_record(cycle)),
    )
    argv = tuple(cfg.entry.argv(cfg.python))
    specs = []
    for local in range(topo.nproc_per_node):
        rank = topo.global_rank(local)
        err = cfg.state.error_file(cycle, rank)
        err.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            err.unlink()
        env = wk.worker_env(cfg.base_env, topo, local, cyc, str(err))
        place = cfg.placement.ranks[local] if cfg.placement else None
        if place is not None:
            env.update(place.nic_env(cfg.base_env))
        cpus, mem_node = (place.cpus, place.mem_node) if place is not None else (None, None)
        specs.append(wk.WorkerSpec(local, rank, argv, env, cpus=cpus, mem_node=mem_node))
    return specs


class CycleWorkers:
    def __init__(
        self,
        cfg: AgentConfig,
        cycle: int,
        group: wk.WorkerGroup,
        app: applog_mod.AppLog | None,
        events: EventLog,
    ) -> None:
        self._cfg = cfg
        self.cycle = cycle
        self.group = group
        self._app = app
        self._events = events

    @classmethod
    def start(cls, cfg: AgentConfig, i: int, cycle: int, d: Decision, events: EventLog) -> CycleWorkers:
        """Spawn the node's workers; a spawn never leaves half a group or an open log behind."""
        specs = _specs(cfg, i, cycle, d)
        app = _open_applog(cfg, cycle, events)
        fds: dict[int, int] = {}
        try:
            if app is not None:
                for spec in specs:
                    r, w = applog_mod.open_worker_pipe()
                    fds[spec.local_rank] = w
                    app.attach(spec.rank, spec.local_rank, r)
            group = wk.spawn(specs, cwd=cfg.cwd, output_fds=fds or None, helper=cfg.spawn_helper)
        except BaseException:
            if app is not None:
                app.close()
            raise
        finally:
            for w in fds.values():
                os.close(w)
        return cls(cfg, cycle, group, app, events)

    @property
    def pids(self) -> list[int]:
        return self.group.pids

    def wait(self, timeout: float, extra_fds: Iterable[int]) -> list[wk.WorkerExit]:
        return self.group.wait(timeout, extra_fds=extra_fds)

    def all_succeeded(self) -> bool:
        return self.group.all_succeeded()

    def failure_of(self, e: wk.WorkerExit) -> Failure:
        """The failure record of a worker exit, with ``@record``'s message and traceback."""
        message, tb = records.read_error_file(self._cfg.state.error_file(self.cycle, e.rank))
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

    def stop(self, signum: int, timeout: float) -> list[Survivor]:
        """Stop every worker (``signum``, SIGKILL after ``timeout``), drain and close the
        log, and wait for the GPU memory they held to come back. Returns the processes
        that SIGKILL did not end within ``launch.kill_timeout`` (each one is an event)."""
        launch = self._cfg.settings.launch
        try:
            running = len(self.group.running())
            stuck = self.group.stop(signum, timeout, launch.kill_timeout)
            if running:
                self._events.event(f"stopped {running} worker(s) with {signal_name(signum)}")
            for s in stuck:
                self._events.event(
                    f"worker process survived SIGKILL for {launch.kill_timeout:g}s: {s.describe()}"
                )
        finally:
            if self._app is not None:
                stats = self._app.close()
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


__all__ = ["CycleWorkers"]
