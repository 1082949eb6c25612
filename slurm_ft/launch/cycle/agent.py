"""The launcher's cycle, read top to bottom: health, join, decide, run, watch, stop; then
the next cycle or the end.

Every launcher runs a :class:`~slurm_ft.launch.roles.member.Member`; node 0 also runs the
:class:`~slurm_ft.launch.roles.coordinator.Coordinator`; a one-node run uses the same two over
the in-memory store. Every way out of the loop is one
:class:`~slurm_ft.launch.policy.Ending` made by ``policy`` and passes through
``lifetime.finish``, the only place that writes the outcome record and picks the exit
code. (The one exception is the peers' store watchdog, which must end a launcher whose
main thread is stuck in a call to a frozen node 0: see ``background.StoreWatchdog`` and
``storeloss``, which also holds what happens when the store host is lost: a successor, or
the way out without one.) Whatever happens, no worker process group survives
``lifetime.run``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft import lifelong
from slurm_ft.launch import hang, policy, spares
from slurm_ft.launch.books.bookkeeper import Bookkeeper, RunSummary
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.cycle import roles
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.rendezvous import jobsecret
from slurm_ft.launch.rendezvous.background import BackgroundSet, WakePipe
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import Decision, JoinInfo, Keys
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.stores import StoreLost
from slurm_ft.launch.roles.coordinator import Coordinator
from slurm_ft.launch.roles.member import Member
from slurm_ft.launch.roles.watchend import WatchEnd, WatchEndKind
from slurm_ft.launch.signals import SignalBox
from slurm_ft.launch.snapshots import readings
from slurm_ft.launch.snapshots.node import NodeSnapshots
from slurm_ft.launch.succession.storeloss import StoreHostLoss
from slurm_ft.launch.wayout import Exit
from slurm_ft.launch.workers import rundir
from slurm_ft.launch.workers.group import CycleWorkers, standby_pool
from slurm_ft.launch.workers.layout import Topology
from slurm_ft.records import node_name

if TYPE_CHECKING:
    from slurm_ft.launch.metrics import LauncherMetrics, PromFileWriter
    from slurm_ft.launch.snapshots.lostnode import LostNodes
    from slurm_ft.launch.succession.handover import EpochStore


class Phase(Enum):
    START = "start"
    HEALTH = "health"
    JOIN = "join"
    DECIDE = "decide"
    RUN = "run"
    WATCH = "watch"
    STANDBY = "standby"  # a spare this cycle: no workers, only the job's view
    STOP = "stop"
    END = "end"


@dataclass(frozen=True)
class Seams:
    """What a launcher takes from the process it runs in. The defaults are the real
    process; the cycle's unit tests run several launchers in one process over one
    in-memory store (``client``), on a clock they move, without killing each other's
    children or the test (``on_frozen_store``)."""

    clock: Callable[[], float] = time.time
    monotonic: Callable[[], float] = time.monotonic
    client: Client | None = None
    on_frozen_store: Callable[[str], None] | None = None
    reap_orphans: bool = True
    epoch_store: EpochStore | None = None  # a successor's store (in-memory in the tests)


class Agent:
    """One launcher's cycle loop (its way out is ``lifetime``'s); the roles (member,
    coordinator) and the loss of the store host (``storeloss``) do the work, so the loop
    reads as the protocol does."""

    def __init__(
        self, cfg: AgentConfig, events: EventLog, signals: SignalBox, seams: Seams = Seams()
    ) -> None:
        self.snapshots = NodeSnapshots.for_launcher(cfg, events.event)
        cfg = self.cfg = self.snapshots.configure(cfg)
        self.lost_nodes: LostNodes | None = None  # snapshots between nodes (#44), made in _open
        self.ev, self.sig, self.seams = events, signals, seams
        self.launch = cfg.settings.launch
        self.phases: list[Phase] = [Phase.START]
        self.books = Bookkeeper.for_launcher(cfg, seams.clock, events.event, signals.arrived)
        self.run = RunSummary()
        self.threads = BackgroundSet()
        self.client: Client | None = None
        self.coordinator: Coordinator | None = None
        self.member: Member | None = None
        self.workers: CycleWorkers | None = None
        self.readings: readings.SnapshotReadings | None = None  # the report's, on node rank 0
        self.index: int | None = None  # the cycle (within the attempt) being joined or run
        self.unhealthy: str | None = None
        self.stuck: str | None = None  # workers that survived SIGKILL: no clean cycle here again
        self.next_index = 0  # the cycle index the loop goes on with
        self.keys = Keys(cfg.run_id)
        self.sealer = Sealer(None)
        self.hangs: hang.NodeWatch | None = None
        self.wake = WakePipe()
        self.run_dir = private_run_dir(events.event)
        self.prom = prom_writer(cfg.settings.launch.prom_file, events)
        self.standbys = standby_pool(cfg, self.run_dir, events)
        self.store_loss = StoreHostLoss(
            self, events, signals, self.books, clock=seams.clock, epoch_store=seams.epoch_store
        )

    @property
    def phase(self) -> Phase:
        return self.phases[-1]

    # ------------------------------------------------------------------ the cycle

    def invoke_run(self) -> Exit:
        member = self._open()
        i = 0
        while True:
            try:
                way_out = self._cycle(member, i)
            except StoreLost as exc:  # in the join or the decision; the watch returns it
                way_out = self.store_loss.gone(i, str(exc))
            if way_out is not None:
                return way_out
            i = self.next_index

    def _cycle(self, member: Member, i: int) -> Exit | None:
        """One cycle: None when another follows (at ``next_index``), else the way out."""
        cycle = self.run.first_cycle + i
        self.index = i
        self.phases.append(Phase.HEALTH)
        self.unhealthy = self.stuck or member.check_health(i) or self.books.io.problem()
        self.phases.append(Phase.JOIN)
        holdings = self.lost_nodes.holdings() if self.lost_nodes is not None else None
        if holdings is not None and self.client is not None:  # what this node's memory holds
            self.client.publish_snapshots(i, self.cfg.job.node_rank, holdings.encode())
        own_join = member.join(i, self.unhealthy, stuck=self.stuck, snapshots=holdings is not None)
        self.phases.append(Phase.DECIDE)
        decision = self._decision(i, cycle, own_join)
        self.store_loss.saw(i, decision)
        if i == 0:  # what the launcher lives with is made: connections, threads, the placement
            lifelong.keep_what_exists()
        if not decision.run:
            return roles.stopped(self.coordinator, i, decision, self.launch.result_linger_timeout)
        judge = self.coordinator.judge if self.coordinator else None
        active = decision.active or tuple(range(self.cfg.num_nodes))
        topo = spares.cycle_topology(self.cfg.topo, decision, self.cfg.job.node_rank)
        workers: CycleWorkers | None = None
        if topo is None:
            self.phases.append(Phase.STANDBY)
            self.ev.event(f"cycle {cycle}: standing by as a spare")
            self.books.node_processes(self.run, cycle, [])
            if self.standbys is not None and i < self.launch.max_restarts:
                self.standbys.tick(None, 0.0)  # no workers to slow: a spare starts warm
            end = member.stand_by(i, judge, active)
            if dropped := self.snapshots.forget():
                self.ev.event(f"cycle {cycle}: a spare's snapshots are stale: removed {', '.join(dropped)}")
        else:
            if self.unhealthy:  # node 0 must have stopped; never start workers on a bad node
                return Exit(policy.unhealthy_self(self.unhealthy))
            self.phases.append(Phase.RUN)
            if self.lost_nodes is not None and not self._snapshot_sources(i, decision):
                # The failure is out before any worker here starts: none trains this cycle
                # on a step the others do not have (the others' workers never get a step
                # done without this node's ranks), and none has to be stopped here.
                self.books.node_processes(self.run, cycle, [])
                end = member.stand_by(i, judge, active)
            else:
                workers = self._start(i, cycle, decision, topo)
                # the report's snapshot readings, from whichever launcher runs node rank 0
                step = self.snapshots.newest_step if self.snapshots.on else None
                where, slot = self.cfg.state.snapshot_readings, decision.slot_of(self.cfg.job.node_rank)
                add = self.books.io.add_line
                self.readings = readings.for_cycle(slot, step, where, add, self.seams.clock)
                self.phases.append(Phase.WATCH)
                self.export_metrics()
                on_tick = self.export_metrics if self.prom is not None else None  # no file: no 1 s tick
                end = member.watch(i, workers, judge, active, on_tick)
        self.phases.append(Phase.STOP)
        self._stop(i, cycle, decision, workers, end)
        self.export_metrics()
        if end.kind is WatchEndKind.STORE_LOST:
            return self.store_loss.gone(i, end.detail)
        if end.kind is not WatchEndKind.FAILURE:
            node = self.cfg.job.node_name
            return roles.after(end, i, cycle, self.coordinator, member, self.ev, self.sig.arrived, node)
        self.next_index = i + 1
        return None

    def _open(self) -> Member:
        """Node 0 opens the store and publishes the run; a peer connects and reads it."""
        cfg = self.cfg
        sealer = self.sealer = Sealer(cfg.auth.key, self.ev.event)
        keys = self.keys = Keys(cfg.run_id, sealer.namespace)
        given = self.seams.client.rekeyed(keys, sealer) if self.seams.client else None
        jobsecret.announce(cfg.auth, cfg.num_nodes, self.ev.event)
        if cfg.is_node0:
            step = readings.for_guard(self.snapshots.on, cfg.state.snapshot_readings, self.books.io)
            clock = self.seams.clock
            made = roles.open_as_node0(cfg, keys, sealer, given, self.books, self.ev, clock, step)
            self.client, self.coordinator, base = made
        else:
            arrived, sleep = self.sig.arrived, self.sig.sleep
            self.client, base = roles.reach_node0(cfg, keys, sealer, given, self.ev, arrived, sleep)
        self.run = RunSummary(first_cycle=base.first_cycle, run_uuid=base.run_uuid)
        if self.lost_nodes is None and self.snapshots.path is not None:
            from slurm_ft.launch.cycle import snapshotting  # a job that snapshots alone imports it

            self.lost_nodes = snapshotting.between_nodes(cfg, self.snapshots, self.ev.event)
        hangs = self.hangs = hang.NodeWatch(hang.Limits.from_settings(cfg.settings.hang))
        self._start_threads()
        if self.coordinator is not None:
            self.coordinator.watch_job(self.threads, hangs)
        self.member = Member(cfg, self.client, self.threads, self.books, self.ev, self.sig, self.wake, hangs)
        return self.member

    def _start_threads(self) -> None:
        assert self.client is not None
        emergency = self.seams.on_frozen_store or self.store_loss.emergency_exit
        on_lost, clock = self.store_loss.sever, self.seams.monotonic
        self.threads = roles.start_threads(
            self.client, self.cfg, self.wake.write_fd, emergency, on_lost, clock
        )

    def enter_epoch(self, keys: Keys) -> None:
        """After a succession: this launcher's roles in the next epoch's store (its keys,
        background threads, a successor's watch of the job, the member's connection)."""
        assert self.client is not None and self.member is not None
        self.keys = keys
        self._start_threads()
        if self.coordinator is not None:
            assert self.hangs is not None
            self.coordinator.watch_job(self.threads, self.hangs)
        self.member.cfg, self.member.client, self.member.threads = self.cfg, self.client, self.threads

    def _decision(self, i: int, cycle: int, own_join: JoinInfo) -> Decision:
        abort = self.threads.abort_check(self.sig.arrived)
        if self.coordinator is not None:
            roster = self.coordinator.gather(i, self.run.last_failure, own_join, abort, self.sig.sleep)
            self.store_loss.stop_if_superseded()
            self.store_loss.await_fence()
            decision = self.coordinator.decide(i, cycle, roster, self.run.last_failure)
            self.run = dataclasses.replace(self.run, nodes=self.coordinator.nodes or self.run.nodes)
            if decision.run and self.lost_nodes is not None:
                from slurm_ft.launch.cycle import snapshotting

                assert self.client is not None
                planned = snapshotting.plan(self.client, i, decision, roster.joins, self.cfg)
                decision = dataclasses.replace(decision, snapshot_plan=planned)
            if decision.run:
                self.coordinator.begin_cycle(self.run, i, cycle, decision)
            return decision
        assert self.member is not None and self.client is not None
        decision = self.member.await_decision(i)
        self.run = dataclasses.replace(self.run, nodes=decision.nodes)
        if i > 0:
            self.books.defer(partial(self.books.peer_close, cycle - 1, partial(self.client.result, i - 1)))
        return decision

    def _start(self, i: int, cycle: int, decision: Decision, topo: Topology) -> CycleWorkers:
        if not self.cfg.is_node0:
            self.books.open_cycle(self.run, i, cycle, decision)
        self.run = self.run.started(cycle)
        cfg = self.cfg if topo == self.cfg.topo else dataclasses.replace(self.cfg, topo=topo)
        first = self.run.cycles_run == 1
        self.workers = CycleWorkers.start(
            cfg,
            i,
            cycle,
            decision,
            self.ev,
            self.run_dir,
            first=first,
            io=self.books.io,
            standbys=self.standbys,
            heard=self.hangs.arrivals.heard if self.hangs is not None else None,
        )
        self.books.node_processes(self.run, cycle, self.workers.processes())
        self.books.flush()
        if first and self.cfg.is_node0:  # off the path to the first step
            self.books.leave_pointer(self.cfg, self.ev.event)
        return self.workers

    def _snapshot_sources(self, i: int, decision: Decision) -> bool:
        """Before the workers start: this node's keys at the step every rank resumes from,
        as node 0's plan says; False (the failure published) when they cannot be."""
        from slurm_ft.launch.cycle import snapshotting  # a job that snapshots alone imports it

        assert self.lost_nodes is not None and self.client is not None and self.member is not None
        where = (self.client, self.lost_nodes, self.member, self.ev.event)
        return snapshotting.fetch_sources(*where, i, decision, self.cfg.job.node_rank)

    def _stop(
        self, i: int, cycle: int, decision: Decision, workers: CycleWorkers | None, end: WatchEnd
    ) -> None:
        """Stop the node's workers (a spare has none) the way the ending asks, then close
        the cycle's books."""
        assert self.member is not None
        if self.coordinator is not None:
            self.coordinator.cycle_ending()  # the progress guard looks while workers stop
        stuck = self.member.stop(i, cycle, workers, end)
        if self.readings is not None:  # before this launcher joins the next cycle
            self.readings.stop()
            self.readings = None
        if stuck:
            self.stuck = self.unhealthy = self.books.stuck_workers(cycle, stuck)
        if workers is not None and self.snapshots.used():  # before the next cycle's restore
            from slurm_ft.launch.cycle import snapshotting

            snaps, job, uuid = self.snapshots, self.cfg.job, self.run.run_uuid
            snapshotting.after_cycle(snaps, self.books, self.ev.event, job, cycle, uuid, workers.ranks)
        lost = workers.log_lost if workers is not None else (0, 0)
        self.run = self.run.closed(end.failure, succeeded=end.kind is WatchEndKind.SUCCESS, log_lost=lost)
        if self.coordinator is not None:
            self.coordinator.close_cycle(self.run, i, cycle, decision, end.result(self.seams.clock()))

    def export_metrics(self) -> None:
        """The Prometheus file, when asked for (written on change, at most once a second)."""
        if self.prom is not None:
            self.prom.update(metrics_of(self))


def private_run_dir(event: Callable[[str], None]) -> Path:
    """The workers' heart-beat slots and stack files: in shared memory when there is. The
    run dirs that ended launchers of this user left beside it go."""
    shm = Path("/dev/shm") if os.access("/dev/shm", os.W_OK) else None
    path = rundir.create(shm)
    removed = rundir.sweep(path.parent, os.getuid(), keep=path)
    if removed:
        event(f"removed {len(removed)} run dir(s) left by ended launchers in {path.parent}")
    return path


def prom_writer(path: str | None, events: EventLog) -> PromFileWriter | None:
    """The metrics file's writer where one is asked for; the metrics module is imported only
    then (it is a launch's start-up time)."""
    if not path:
        return None
    from slurm_ft.launch.metrics import PromFileWriter

    return PromFileWriter(path, on_error=events.event)


def metrics_of(agent: Agent) -> LauncherMetrics:
    from slurm_ft.launch.metrics import LauncherMetrics

    job, run, workers, failure = agent.cfg.job, agent.run, agent.workers, agent.run.failure_seen
    monitor = agent.threads.monitor
    ages = monitor.ages() if monitor is not None else {}
    names = run.nodes
    pool = agent.standbys
    ready, rss, cpu = pool.cost() if pool is not None else (None, 0, 0.0)

    return LauncherMetrics(
        job=job.job_key,
        node=job.node_name,
        node_rank=job.node_rank,
        attempt=job.attempt,
        cycle=run.last_cycle,
        restarts_used=agent.index or 0,
        restart_budget=agent.launch.max_restarts,
        workers_running=len(workers.group.running()) if workers is not None else 0,
        last_failure_time=failure.time if failure else None,
        last_failure_kind=failure.kind.value if failure else None,
        log_lines_lost=run.log_lost[0],
        log_bytes_lost=run.log_lost[1],
        store_values_ignored=len(agent.client.sealer.rejected()) if agent.client is not None else 0,
        peer_heartbeat_age_s=tuple((node_name(names, k), round(age, 1)) for k, age in sorted(ages.items())),
        standby_ready=ready,
        standby_rss_bytes=rss,
        standby_wait_cpu_s=cpu,
        warm_starts=pool.warm if pool is not None else 0,
    )


__all__ = ["Agent", "Phase", "Seams"]
