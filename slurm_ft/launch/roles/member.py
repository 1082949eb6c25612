"""What every launcher does in a cycle, node 0 included: check its health, join, start its
workers, watch them and the job, stop them.

Node 0's additional duties (deciding, judging heart-beats) are the coordinator's; the
member only asks its ``judge`` during the watch, which node 0 supplies. The node's own
watchers beside its workers (NIC monitor, health check while training) are its
``companions``: the member asks them and publishes what they find. Its health (the checks
before a join, a failure while training remembered) is ``nodehealth``'s; how its workers
are stopped the way the watch ended is ``workerstop``'s; why a watch ended is ``watchend``.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import time
from collections.abc import Callable

from slurm_ft.launch import hang, policy
from slurm_ft.launch.books.bookkeeper import Bookkeeper
from slurm_ft.launch.companions import Companions
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.rendezvous.background import BackgroundSet, WakePipe
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.decisionwait import await_decision, wait_slice
from slurm_ft.launch.rendezvous.protocol import Decision, JoinInfo
from slurm_ft.launch.rendezvous.reads import Pace
from slurm_ft.launch.rendezvous.stores import Interrupted, StoreLost
from slurm_ft.launch.roles.nodehealth import NodeHealth
from slurm_ft.launch.roles.watchend import WatchEnd, WatchEndKind
from slurm_ft.launch.roles.workerstop import WorkerStop
from slurm_ft.launch.signals import SignalBox
from slurm_ft.launch.workers.group import CycleWorkers
from slurm_ft.launch.workers.survivors import Survivor
from slurm_ft.records import Failure, FailureKind

DECISION_GRACE_S = 30.0
STANDBY_TICK_S = 1.0  # a spare peer's look at the store when the halt waiter is quiet

Judge = Callable[[int], Failure | None]


class Member:
    def __init__(
        self,
        cfg: AgentConfig,
        client: Client,
        threads: BackgroundSet,
        books: Bookkeeper,
        events: EventLog,
        signals: SignalBox,
        wake: WakePipe,
        hangs: hang.NodeWatch,
    ) -> None:
        self.cfg = cfg
        self.client = client
        self.threads = threads
        self.books = books
        self.ev = events
        self.sig = signals
        self._wake = wake
        self.companions = Companions(cfg, events, wake_fd=wake.write_fd)
        self.health = NodeHealth(cfg, books, events, self.companions)
        self.hangs = hangs
        self._stop = WorkerStop(cfg, events, signals, self.publish_quietly)
        for warning in cfg.placement.warnings if cfg.placement else ():
            self.ev.event(f"placement: {warning}")

    # ------------------------------------------------------------------ health + join

    def check_health(self, i: int) -> str | None:
        """None when healthy (or checks are off this cycle), else '<check>: <detail>' (see
        :meth:`NodeHealth.check`)."""
        return self.health.check(i)

    def join(
        self, i: int, unhealthy: str | None, stuck: str | None = None, snapshots: bool = False
    ) -> JoinInfo:
        """``stuck``: a worker of the last cycle could not be killed. With spares node 0
        then gives this node's rank to a spare (the hook for the bounded worker stop).
        ``snapshots``: this launcher published its snapshot holdings for cycle i. Returns
        the record, which node 0's own wait for the joins takes as read (see
        :class:`~slurm_ft.launch.roles.joins.JoinRecords`)."""
        job = self.cfg.job
        host, pid = socket.gethostname(), os.getpid()
        info = JoinInfo(job.node_rank, job.node_name, host, pid, unhealthy, stuck, snapshots)
        self.client.join(i, info)
        return info

    def await_decision(self, i: int) -> Decision:
        """A peer waits for node 0's decision (raises StoreLost when none comes)."""
        launch = self.cfg.settings.launch
        deadline = time.monotonic() + launch.join_timeout + DECISION_GRACE_S
        abort = self.threads.abort_check(self.sig.arrived)
        decision = await_decision(
            self.client, i, self.cfg.num_nodes, deadline=deadline, abort=abort, signal_fd=self.sig.fd
        )
        if decision is None:
            raise StoreLost("no decision from node 0 within the join timeout")
        return decision

    # ------------------------------------------------------------------ watch

    def watch(
        self,
        i: int,
        workers: CycleWorkers,
        judge: Judge | None,
        active: tuple[int, ...],
        on_tick: Callable[[], None] | None = None,
    ) -> WatchEnd:
        """Until this cycle ends anywhere; the first reason found is the answer. ``active``:
        the launchers that run workers this cycle (all must finish for a success)."""
        self.threads.watch_halt(i)
        self.companions.rebase()
        done_marked = False
        slots = {rank: f.slot for rank, f in workers.files.items()}
        with self.hangs.watching(i, workers.pids_by_rank, slots):
            while True:
                exits = workers.wait(self._sleep(on_tick is not None), [self.sig.fd, self._wake.fd])
                self.sig.drain()
                self._wake.drain()
                if self.sig.received is not None:
                    return WatchEnd(WatchEndKind.SIGNAL, signum=int(self.sig.received))
                if on_tick is not None:
                    on_tick()
                lost = self._store_view()  # before any store call: one to a frozen host blocks
                if lost is not None:
                    return lost
                try:
                    failed = workers.note_exits(exits)
                    if failed is not None:
                        won = self.client.publish_failure(i, workers.failure_of(failed))
                        return WatchEnd(WatchEndKind.FAILURE, failure=won)
                    if not done_marked and workers.all_succeeded():
                        self.client.mark_done(i, self.cfg.job.node_rank)
                        done_marked = True
                    end = (
                        self._nic_view(i)
                        or (None if done_marked else self._health_view(i))  # none left to guard
                        or self._rank_view(i)
                        or self._job_view(i, judge, active)
                    )
                except StoreLost as exc:
                    return WatchEnd(WatchEndKind.STORE_LOST, detail=str(exc))
                end = end or self._threads_view()
                if end is not None:
                    return end

    def _store_view(self) -> WatchEnd | None:
        why = self.threads.store_lost()
        return WatchEnd(WatchEndKind.STORE_LOST, detail=why) if why else None

    def _threads_view(self) -> WatchEnd | None:
        """What the background threads know: node 0's store lost (a peer's heart-beat), or a
        thread that died (the launcher would be blind)."""
        why = self.threads.store_lost()
        if why:
            return WatchEnd(WatchEndKind.STORE_LOST, detail=why)
        died = self.threads.died()
        return WatchEnd(WatchEndKind.BLIND, detail=died) if died else None

    def _sleep(self, metrics: bool) -> float:
        return policy.watch_sleep(
            self.cfg.settings.launch.monitor_interval,
            self.hangs.period,
            self.companions.nic_period,
            metrics,
            self.companions.check_period,
        )

    def _rank_view(self, i: int) -> WatchEnd | None:
        """The opt-in rank monitor (heart-beats, sections) over this node's workers; a
        peer also tells node 0 when its workers fall silent (node 0 judges the job)."""
        if not self.cfg.is_node0:
            report = self.hangs.silence_report()
            if report is not None:
                self.client.report_silence(self.cfg.job.node_rank, report)
        found = self.hangs.rank_hang()
        if found is None:
            return None
        job = self.cfg.job
        failure = hang.failure_of(found, job.node_name, job.node_rank, time.time())
        return WatchEnd(WatchEndKind.FAILURE, failure=self.client.publish_failure(i, failure))

    def _nic_view(self, i: int) -> WatchEnd | None:
        """A fatal change of a monitored NIC ends the cycle as this node's failure."""
        fault = self.companions.nic_fault()
        if fault is None:
            return None
        won = self.client.publish_failure(i, self.own_failure(FailureKind.NIC, fault))
        return WatchEnd(WatchEndKind.FAILURE, failure=won)

    def _health_view(self, i: int) -> WatchEnd | None:
        """The health check while training (``health.check_interval``): a failed run ends
        the cycle as this node's failure, kind ``unhealthy``, and the node joins the next
        cycle unhealthy (a spare takes its node rank, or the attempt stops with 94)."""
        report = self.companions.failed_check()
        if report is None:
            return None
        detail = self.health.failed_while_training(report)
        failure = self.own_failure(FailureKind.UNHEALTHY, f"health check while training: {detail}")
        return WatchEnd(WatchEndKind.FAILURE, failure=self.client.publish_failure(i, failure))

    def close(self) -> None:
        """Before the launcher closes its wake pipe (a check may still be running)."""
        self.companions.close()

    def stand_by(self, i: int, judge: Judge | None, active: tuple[int, ...]) -> WatchEnd:
        """A spare's cycle: no workers, only the job's view, woken by the halt waiter, a
        lost peer or a signal; node 0 (which judges the job) also at its periodic duties."""
        self.threads.watch_halt(i)
        tick = self._sleep(False) if judge is not None else STANDBY_TICK_S
        poller = select.poll()
        for fd in (self.sig.fd, self._wake.fd):
            poller.register(fd, select.POLLIN)
        while True:
            poller.poll(tick * 1000)
            self.sig.drain()
            self._wake.drain()
            if self.sig.received is not None:
                return WatchEnd(WatchEndKind.SIGNAL, signum=int(self.sig.received))
            try:
                end = self._store_view() or self._job_view(i, judge, active) or self._threads_view()
            except StoreLost as exc:
                return WatchEnd(WatchEndKind.STORE_LOST, detail=str(exc))
            if end is not None:
                return end

    def _job_view(self, i: int, judge: Judge | None, active: tuple[int, ...]) -> WatchEnd | None:
        """One look at the job as a whole: a failure elsewhere, everyone done, a lost peer.
        Also this launcher's published values again, where someone overwrote them."""
        self.client.reassert()
        poll = self.client.poll(i, active, judging=judge is not None)
        if poll.failure is not None:
            return WatchEnd(WatchEndKind.FAILURE, failure=poll.failure)
        if poll.finished:
            self.client.halt(i)  # wakes the others at once
            return WatchEnd(WatchEndKind.SUCCESS)
        if judge is not None:
            failure = judge(i)
            if failure is not None:
                return WatchEnd(WatchEndKind.FAILURE, failure=self.client.publish_failure(i, failure))
        return None

    def publish_quietly(self, i: int, kind: FailureKind, detail: str, *, signame: str | None = None) -> None:
        """A failure of this launcher itself, best effort: the store may already be gone
        when this launcher is leaving."""
        with contextlib.suppress(StoreLost):
            self.client.publish_failure(i, self.own_failure(kind, detail, signame=signame))

    def own_failure(self, kind: FailureKind, detail: str, *, signame: str | None = None) -> Failure:
        """A failure of this launcher itself (a signal it received, a bug, blindness)."""
        job = self.cfg.job
        return Failure(
            kind=kind,
            node=job.node_name,
            node_rank=job.node_rank,
            time=time.time(),
            detail=detail,
            signal=signame,
        )

    def confirm_success(self, i: int, cycle: int, abort: Callable[[], bool]) -> None:
        """A peer reads node 0's result (so the records agree) and says it read it."""
        client = self.client
        try:
            result = client.wait_result(
                i,
                deadline=time.monotonic() + self.cfg.settings.launch.result_linger_timeout,
                abort=abort,
                pace=Pace(wait_slice(self.cfg.num_nodes), self.sig.fd),  # every peer waits here
            )
            client.ack(self.cfg.job.node_rank)
        except (StoreLost, Interrupted):
            result = None
        self.books.peer_close(cycle, lambda: client.result(i))
        if result is None:
            self.ev.event("finished, but node 0 did not confirm the result")

    def stop(self, i: int, cycle: int, workers: CycleWorkers | None, end: WatchEnd) -> list[Survivor]:
        """Stop this node's workers the way the watch ended (see :class:`WorkerStop`);
        the processes that outlived SIGKILL (normally none)."""
        return self._stop.stop(i, cycle, workers, end)
