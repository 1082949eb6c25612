"""The launcher's cycle, read top to bottom: health, join, decide, run, watch, stop; then
the next cycle or the end.

Every launcher runs a :class:`~slurm_ft.launch.member.Member`; node 0 also runs the
:class:`~slurm_ft.launch.coordinator.Coordinator`; a one-node run uses the same two over
the in-memory store. Every way out of :func:`run` is one
:class:`~slurm_ft.launch.policy.Ending` made by ``policy`` and passes through
:meth:`Agent.finish`, the only place that writes the outcome record and picks the exit
code. (The one exception is the peers' store watchdog, which must end a launcher whose
main thread is stuck in a call to a frozen node 0: see ``background.StoreWatchdog`` and
``storeloss``, which also holds what happens when the store host is lost: a successor, or
the way out without one.) Whatever happens, no worker process group survives :func:`run`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft import privatefiles
from slurm_ft.launch import hang, policy, spares, wayout
from slurm_ft.launch.bookkeeping import Bookkeeper, RunSummary
from slurm_ft.launch.context import AgentConfig, BadInput, run_id_for
from slurm_ft.launch.coordinator import Coordinator, PortsInUse, open_store
from slurm_ft.launch.member import Member, WatchEnd, WatchEndKind
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.policy import Ending
from slurm_ft.launch.rendezvous import jobsecret, openfiles
from slurm_ft.launch.rendezvous.background import STORE_CONNECTIONS, BackgroundDied, BackgroundSet, WakePipe
from slurm_ft.launch.rendezvous.client import Client, find_run
from slurm_ft.launch.rendezvous.protocol import Base, Decision, JoinInfo, Keys
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.stores import Interrupted, StoreLost
from slurm_ft.launch.signals import SignalBox
from slurm_ft.launch.snapshots.node import NodeSnapshots
from slurm_ft.launch.stateio import StateDirStalled
from slurm_ft.launch.storeloss import StoreHostLoss, Superseded
from slurm_ft.launch.wayout import Exit
from slurm_ft.launch.workers import process as wk
from slurm_ft.launch.workers.group import CycleWorkers, standby_pool
from slurm_ft.launch.workers.layout import Topology
from slurm_ft.records import FailureKind, RankResume, node_name

if TYPE_CHECKING:
    from slurm_ft.launch.handover import EpochStore
    from slurm_ft.launch.metrics import LauncherMetrics, PromFileWriter
    from slurm_ft.launch.snapshots.lostnode import LostNodes


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
    """One launcher's cycle loop and its one way out; the roles (member, coordinator) and
    the loss of the store host (``storeloss``) do the work, so the loop reads as the
    protocol does."""

    def __init__(
        self, cfg: AgentConfig, events: EventLog, signals: SignalBox, seams: Seams = Seams()
    ) -> None:
        self.snapshots = NodeSnapshots.for_launcher(cfg, events.event)
        cfg = self.cfg = self.snapshots.configure(cfg)
        self.lost_nodes: LostNodes | None = None  # snapshots between nodes (#44), made in _open
        self.ev = events
        self.sig = signals
        self.seams = seams
        self.launch = cfg.settings.launch
        self.phases: list[Phase] = [Phase.START]
        self.books = Bookkeeper.for_launcher(cfg, seams.clock, events.event, signals.arrived)
        self.run = RunSummary()
        self.threads = BackgroundSet()
        self.client: Client | None = None
        self.coordinator: Coordinator | None = None
        self.member: Member | None = None
        self.workers: CycleWorkers | None = None
        self.index: int | None = None  # the cycle (within the attempt) being joined or run
        self.unhealthy: str | None = None
        self.stuck: str | None = None  # workers that survived SIGKILL: no clean cycle here again
        self.next_index = 0  # the cycle index the loop goes on with
        self.keys = Keys(cfg.run_id)
        self.sealer = Sealer(None)
        self.hangs: hang.NodeWatch | None = None
        self._wake = WakePipe()
        self._run_dir = private_run_dir()
        self.prom = prom_writer(cfg.settings.launch.prom_file, events)
        self.standbys = standby_pool(cfg, self._run_dir, events)
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
        member.join(i, self.unhealthy, stuck=self.stuck, snapshots=holdings is not None)
        self.phases.append(Phase.DECIDE)
        decision = self._decide(i, cycle)
        if not decision.run:
            return self._stopped(i, decision)
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
            return self._after(i, cycle, end)
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
            self.client = given or open_store(cfg, keys, sealer, self.ev)
            self.coordinator = Coordinator(
                cfg,
                self.client,
                self.books,
                self.ev,
                clock=self.seams.clock,
                snapshot_step=self.snapshots.newest_step if self.snapshots.on else None,
            )
            base = self.coordinator.open()
        else:
            self.client, base = reach_node0(
                cfg, keys, sealer, given, self.ev, self.sig.arrived, self.sig.sleep
            )
        self.run = RunSummary(first_cycle=base.first_cycle, run_uuid=base.run_uuid)
        if self.snapshots.path is not None and cfg.num_nodes > 1 and self.lost_nodes is None:
            from slurm_ft.launch.snapshots import lostnode

            self.lost_nodes = lostnode.for_launcher(
                cfg, self.snapshots.path, self.snapshots.limit, self.ev.event
            )
        hangs = self.hangs = hang.NodeWatch(hang.Limits.from_settings(cfg.settings.hang))
        self._start_threads()
        if self.coordinator is not None:
            self.coordinator.watch_job(self.threads, hangs)
        self.member = Member(cfg, self.client, self.threads, self.books, self.ev, self.sig, self._wake, hangs)
        return self.member

    def _start_threads(self) -> None:
        """The background threads of this launcher's role in the current store's epoch."""
        assert self.client is not None
        self.threads = BackgroundSet.start(
            self.client,
            node_rank=self.cfg.job.node_rank,
            num_nodes=self.cfg.num_nodes,
            interval=self.launch.heartbeat_interval,
            timeout=self.launch.heartbeat_timeout,
            wake_fd=self._wake.write_fd,
            emergency=self.seams.on_frozen_store or self.store_loss.emergency_exit,
            on_lost=self.store_loss.sever,
            clock=self.seams.monotonic,
            host=self.cfg.store_host,
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

    def _decide(self, i: int, cycle: int) -> Decision:
        decision = self._decision(i, cycle)
        self.store_loss.saw(i, decision)
        return decision

    def _decision(self, i: int, cycle: int) -> Decision:
        abort = self.threads.abort_check(self.sig.arrived)
        if self.coordinator is not None:
            roster = self.coordinator.gather(i, self.run.last_failure, abort, self.sig.sleep)
            self.store_loss.stop_if_superseded()
            self.store_loss.await_fence()
            decision = self.coordinator.decide(i, cycle, roster, self.run.last_failure)
            self.run = dataclasses.replace(self.run, nodes=self.coordinator.nodes or self.run.nodes)
            if decision.run and self.lost_nodes is not None:
                planned = self._plan_snapshots(i, decision, roster.joins)
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
            self._run_dir,
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

    def _plan_snapshots(self, i: int, decision: Decision, joins: Sequence[JoinInfo | None]) -> bool:
        """Node 0, before it publishes the decision: the holdings of the launchers whose
        join says they published read here once (O(N) at node 0; nothing when none did)
        and each active launcher's part of the plan written, so a launcher reads one key,
        not every launcher's holdings. Whether any part was written."""
        from slurm_ft.launch.snapshots import lostnode

        assert self.client is not None
        nodes = [k for k, info in enumerate(joins) if info is not None and info.snapshots]
        active = decision.active or tuple(range(self.cfg.num_nodes))
        if not nodes:
            return False
        published = dict(zip(nodes, self.client.snapshot_holdings(i, nodes), strict=True))
        planned = lostnode.parts(published, active, self.cfg.topo.nproc_per_node)
        if planned is None:
            return False
        self.client.publish_snapshot_parts(i, {n: part.encode() for n, part in planned.items()})
        return True

    def _snapshot_sources(self, i: int, decision: Decision) -> bool:
        """Before the workers start: this node's keys at the step every rank resumes from
        (fetched from another node where a lost node took them), as node 0's plan says.
        False when they cannot be (a copy no holder could give, or a part the decision
        names that the store does not hold sealed): the failure is published, the cycle
        ends before this node's workers start, and the next one plans again."""
        from slurm_ft.launch.snapshots import lostnode

        assert self.lost_nodes is not None and self.client is not None and self.member is not None
        raw = self.client.snapshot_part(i, self.cfg.job.node_rank) if decision.snapshot_plan else None
        part = lostnode.Part.decode(raw) if raw is not None else None
        if decision.snapshot_plan and part is None:
            failed: str | None = self.lost_nodes.unplanned()
        else:
            failed = self.lost_nodes.prepare(part)
        if failed is not None:
            self.ev.event(failed)
            self.member.publish_quietly(i, FailureKind.WORKER, failed)
        return failed is None

    def _stop(
        self, i: int, cycle: int, decision: Decision, workers: CycleWorkers | None, end: WatchEnd
    ) -> None:
        """Stop the node's workers (a spare has none) the way the ending asks, then close
        the cycle's books."""
        assert self.member is not None
        if self.coordinator is not None:
            self.coordinator.cycle_ending()  # the progress guard looks while workers stop
        stuck = self.member.stop(i, cycle, workers, end)
        if stuck:
            self.stuck = self.unhealthy = self.books.stuck_workers(cycle, stuck)
        if workers is not None and self.snapshots.used():
            self._snapshot_books(cycle, workers)
        lost = workers.log_lost if workers is not None else (0, 0)
        self.run = self.run.closed(end.failure, succeeded=end.kind is WatchEndKind.SUCCESS, log_lost=lost)
        if self.coordinator is not None:
            self.coordinator.close_cycle(self.run, i, cycle, decision, end.result(self.seams.clock()))

    def _snapshot_books(self, cycle: int, workers: CycleWorkers) -> None:
        """After a cycle's workers are gone: where its ranks here resumed from (one launcher
        line) and the node's newest snapshot, for the records and the report."""
        resumed, asked = self.snapshots.resumed(workers.ranks, cycle)  # before the next cycle's restore
        self.books.defer(partial(self._snapshot_record, cycle, resumed, asked))

    def _snapshot_record(self, cycle: int, resumed: list[RankResume], asked: bool) -> None:
        """Off the restart's critical path: the node's newest snapshot, the lines, the record."""
        job = self.cfg.job
        rec = self.snapshots.cycle_record(cycle, job.node_name, job.node_rank, self.run.run_uuid, resumed)
        self.ev.event(self.snapshots.resumed_line(rec))
        stalled = self.snapshots.stalled_line(rec, asked)
        if stalled is not None:
            self.ev.event(stalled)
        self.books.node_snapshots(rec)

    # ------------------------------------------------------------------ endings

    def _stopped(self, i: int, decision: Decision) -> Exit:
        if self.coordinator is None:
            return wayout.stopped(decision, None, self.launch.result_linger_timeout)
        return self.coordinator.stopping(i, decision)

    def _after(self, i: int, cycle: int, end: WatchEnd) -> Exit:
        if end.kind is WatchEndKind.SUCCESS:
            self.ev.event(f"cycle {cycle}: all workers on all nodes finished")
            if self.coordinator is None:
                assert self.member is not None
                self.member.confirm_success(i, cycle, self.sig.arrived)
                return wayout.finished(None, 0.0)
            return self.coordinator.finished(i)
        if end.kind is WatchEndKind.SIGNAL:
            assert end.signum is not None
            return wayout.signalled(end.signum, self.cfg.job.node_name)
        return wayout.blind(end.detail)

    def signalled_between_cycles(self) -> Exit:
        assert self.sig.received is not None
        return wayout.signalled(int(self.sig.received), None)

    def launcher_failed(self, exc: Exception) -> Exit:
        """Tell the other launchers at once instead of letting them wait for the heart-beat."""
        way_out = wayout.crashed(exc)
        if self.member is not None and self.index is not None:
            with contextlib.suppress(Exception):
                self.member.publish_quietly(self.index, FailureKind.LAUNCHER, way_out.ending.reason)
        return way_out

    def finish(self, way_out: Exit) -> Ending:
        """The one way out: event line, outcome record, node 0's announcement and linger, a
        peer's confirmation. A store host that a successor superseded writes nothing."""
        self.phases.append(Phase.END)
        self.store_loss.cancel_handover()
        if self.workers is not None:
            self.workers.kill_now()
        if way_out.message:
            self.ev.event(way_out.message)
        superseder = self.store_loss.superseded_by() if self.coordinator is not None else None
        if superseder is not None:
            ending = policy.superseded(superseder)
            self.ev.event(f"{ending.reason}: this launcher writes nothing more; exiting {ending.exit_code}")
            return ending
        budget = policy.records_budget(
            self.launch.write_timeout, self.launch.term_timeout, self.sig.received_at, time.monotonic()
        )
        self.books.io.timeout = min(self.books.io.timeout, max(0.1, budget))
        with contextlib.suppress(OSError):
            self.books.flush()
        # Node 0 (or a peer that writes the outcome itself) persists before the outcome
        # record, which says what could not be; the other peers after their last word with
        # node 0, which may leave meanwhile (see the end).
        persists_last = self.coordinator is None and not way_out.ends_step
        if not persists_last:
            self._persist_snapshots(way_out.ending)
        if way_out.ends_step:  # node 0 writes nothing any more: this peer's view is the outcome
            self.books.node0_lost(self.run, way_out.ending, budget)
        if self.coordinator is not None:
            self.run = self.coordinator.retired(self.run)
        if self.client is not None:
            self.run = dataclasses.replace(self.run, store_values_ignored=self.client.sealer.rejected())
        ending, problem = self.books.settle(self.run, way_out.ending, budget)
        if problem is not None:
            self.ev.event(f"records not written: {problem}; exiting {ending.exit_code}")
            way_out = dataclasses.replace(way_out, ending=ending)
        if self.prom is not None:
            self.export_metrics()
            self.prom.flush()
        if self.coordinator is not None:
            self.coordinator.announce(way_out, self.run)
            if way_out.ending.lost_nodes:
                wayout.end_step(self.cfg.step_killer, self.ev.event, way_out.ending.lost_nodes)
        elif way_out.ends_step:
            wayout.end_step(self.cfg.step_killer, self.ev.event, way_out.ending.lost_nodes)
        elif way_out.ack and self.client is not None:
            with contextlib.suppress(StoreLost):
                self.client.ack(self.cfg.job.node_rank)
        if persists_last and self.snapshots.persists:
            self.threads.stop()  # node 0 leaving now is no store loss: nothing may kill the persist
            self._persist_snapshots(way_out.ending)
            self.books.io.settle(budget)
        return way_out.ending

    def _persist_snapshots(self, ending: Ending) -> None:
        """The breakpoint: this node's newest snapshots to durable storage (the workers are
        gone), before the outcome record, which says what could not be persisted. After a
        signal, within what ``--term-timeout`` leaves (the records keep a little of it)."""
        if not self.snapshots.persists:
            return
        timeout = self.launch.snapshot_persist_timeout
        if self.sig.received_at is not None:
            left = self.sig.received_at + self.launch.term_timeout - time.monotonic()
            timeout = min(timeout, left - min(2.0, self.launch.write_timeout))
        rec = self.snapshots.persist(ending, timeout, self.cfg, self.run.run_uuid)
        if rec is None:
            return
        self.run = dataclasses.replace(
            self.run,
            snapshots_persisted=tuple(rec.persisted),
            snapshots_not_persisted=tuple(rec.not_persisted),
        )
        self.books.snapshots_persisted(rec)

    def export_metrics(self) -> None:
        """The Prometheus file, when asked for (the writer writes only on change, at most
        once a second)."""
        if self.prom is not None:
            self.prom.update(metrics_of(self))

    def cleanup(self) -> None:
        """Runs on every way out: no worker group, no orphan, survives the launcher."""
        if self.workers is not None:
            self.workers.kill_now()
        if self.standbys is not None:
            self.standbys.close()
        self.books.io.close(1.0)
        if self.seams.reap_orphans:
            wk.kill_orphans(os.getpid())
        self.threads.stop()
        if self.coordinator is not None:
            self.coordinator.close()
        privatefiles.remove_tree(self._run_dir)
        if self.lost_nodes is not None:
            self.lost_nodes.close()
        self.snapshots.close()
        if self.member is not None:
            self.member.close()
        self._wake.close()


def reach_node0(
    cfg: AgentConfig,
    keys: Keys,
    sealer: Sealer,
    given: Client | None,
    events: EventLog,
    abort: Callable[[], bool],
    sleep: Callable[[float], None],
) -> tuple[Client, Base]:
    """A peer: node 0's store (found among the job's ports) and the run it published; the
    first heart-beat is sent at once."""
    launch = cfg.settings.launch
    deadline = time.monotonic() + launch.join_timeout
    if given is None:
        client, base = find_run(
            cfg.topo.master_addr,
            cfg.rdzv_ports,
            keys,
            sealer,
            deadline=deadline,
            op_timeout=launch.heartbeat_timeout,
            abort=abort,
            sleep=sleep,
        )
    else:
        client, found = given, given.wait_base(deadline=deadline, abort=abort)
        if found is None:
            raise StoreLost("node 0 did not publish the run within the join timeout")
        base = found
    client.beat(cfg.job.node_rank)
    events.event(f"joined rendezvous store at {cfg.topo.master_addr}:{client.port}")
    return client, base


def private_run_dir() -> Path:
    """The workers' heart-beat slots and stack files: in shared memory when there is."""
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    return privatefiles.create_dir(shm, "slurm-ft-")


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


def run(cfg: AgentConfig, events: EventLog) -> Ending:
    """Run the launcher of this process until its ending. Raises BadInput for exit-2
    conditions found after start; everything else, a launcher bug included, ends through
    :meth:`Agent.finish`."""
    limits = openfiles.raise_soft_limit()
    if cfg.is_node0 and cfg.num_nodes > 1:
        problem = openfiles.shortfall(cfg.num_nodes, STORE_CONNECTIONS, limits)
        if problem is not None:
            raise BadInput(problem)
    if limits.raised:
        events.event(f"open-files limit raised from {limits.before} to {limits.soft}")
    wk.become_subreaper()
    signals = SignalBox(cfg.signals)
    try:
        return drive(Agent(cfg, events, signals))
    finally:
        signals.close()


def drive(agent: Agent) -> Ending:
    """The agent's run from start to ending, whatever happens on the way."""
    try:
        try:
            way_out = agent.invoke_run()
        except Interrupted:
            way_out = agent.signalled_between_cycles()
        except StoreLost as exc:
            way_out = agent.store_loss.way_out(str(exc))
        except BackgroundDied as exc:
            way_out = wayout.blind(str(exc))
        except PortsInUse as exc:
            way_out = wayout.ports_in_use(str(exc))
        except StateDirStalled as exc:  # no first cycle number without it: the node is unhealthy
            ending = policy.unhealthy_self(str(exc))
            way_out = Exit(ending, f"{ending.reason}; exiting {ending.exit_code}")
        except Superseded as exc:
            way_out = Exit(policy.superseded(str(exc)))
        except BadInput:
            raise
        except Exception as exc:
            way_out = agent.launcher_failed(exc)
        return agent.finish(way_out)
    finally:
        agent.cleanup()


__all__ = ["Agent", "AgentConfig", "BadInput", "Phase", "Seams", "drive", "run", "run_id_for"]
