"""Node 0's duties on top of its member's: host the store, wait for the joins, make the
one decision of each cycle, judge the peers' heart-beats, close the cycle's books, and
keep the store up until every peer has read the final answer.

Gathering facts (store reads) and deciding (``policy``) are kept apart, so each step
reads as one call: :meth:`Coordinator.gather` then :meth:`Coordinator.decide`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable
from functools import partial

from slurm_ft.launch import hang, hostprobe, policy, spares, wayout
from slurm_ft.launch.books import cyclecount
from slurm_ft.launch.books.bookkeeper import Bookkeeper, RunSummary
from slurm_ft.launch.context import AgentConfig, BadInput
from slurm_ft.launch.farewell import Farewell
from slurm_ft.launch.hang.judge import JobJudge
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.rendezvous import stores
from slurm_ft.launch.rendezvous.background import BackgroundSet
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import Action, Base, CycleResult, Decision, JoinInfo, Keys
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.stores import StoreBindError, StoreLost
from slurm_ft.launch.roles import decisions, joins
from slurm_ft.launch.roles.joins import JoinWait, Roster
from slurm_ft.launch.wayout import Exit
from slurm_ft.progress import LedgerError, ProgressTracker
from slurm_ft.records import CycleOutcome, Failure


class PortsInUse(Exception):
    """Node 0 found every port of the job's sequence in use: retryable (another job's
    store may be gone by the next attempt), never bad input."""


def open_store(cfg: AgentConfig, keys: Keys, sealer: Sealer, events: EventLog) -> Client:
    """Node 0's store: in memory for one node, else a TCPStore on the first free port of
    the job's sequence (where the peers look for it, in the same order)."""
    if cfg.num_nodes == 1:
        return Client.local(keys)
    in_use: list[str] = []
    job = cfg.job  # node 0, or a successor: the peers reach it by its host's name
    here = job.hosts[job.node_rank] if job.node_rank < len(job.hosts) else cfg.topo.master_addr
    backlog = stores.backlog_warning(cfg.num_nodes)
    if backlog is not None:
        events.event(backlog)
    for port in cfg.rdzv_ports:
        try:
            return Client.host(port, keys, cfg.settings.launch.heartbeat_timeout, sealer, address=here)
        except StoreBindError as exc:
            events.event(f"rendezvous port {port} in use ({exc})")
            in_use.append(str(port))
    raise PortsInUse(f"every rendezvous port of this job is in use ({', '.join(in_use)})")


class Coordinator:
    def __init__(
        self,
        cfg: AgentConfig,
        client: Client,
        books: Bookkeeper,
        events: EventLog,
        *,
        clock: Callable[[], float] = time.time,
        snapshot_step: Callable[[], int | None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.client = client
        self.books = books
        self.ev = events
        self.clock = clock
        self.snapshot_step = snapshot_step
        self.threads = BackgroundSet()  # set by the agent once the threads run
        self.nodes: tuple[str, ...] = ()  # every node's name, once all joined
        launch = cfg.settings.launch
        self.spares: spares.SpareBook | None = (
            spares.SpareBook.for_job(cfg.num_nodes, launch.spare_nodes, launch.segment, launch.suspect_after)
            if launch.spare_nodes > 0
            else None
        )
        self.jury: JobJudge | None = None  # once the background threads run
        self.published = -1  # the last cycle index whose decision peers can read
        self.departed: set[int] = set()  # a lost store host this successor took over from
        try:
            self.tracker: ProgressTracker | None = ProgressTracker(
                cfg.state,
                cfg.settings.progress,
                cfg.job.attempt,
                on_warning=events.event,
                files=books.io,
                snapshot_step=snapshot_step,
            )
        except LedgerError as exc:
            raise BadInput(str(exc)) from None

    def open(self) -> Base:
        """Publish the run: its first global cycle number and a fresh run uuid."""
        if self.tracker is not None:
            self.ev.event(self.tracker.start_line())
        base = Base(cyclecount.read_next_cycle(self.cfg.state, self.books.io), os.urandom(16).hex())
        self.client.prepare(self.cfg.num_nodes, base)
        where = f"listening on port {self.client.port}" if self.cfg.num_nodes > 1 else "in process (one node)"
        self.ev.event(f"rendezvous store {where}; run {self.cfg.run_id}, first cycle {base.first_cycle}")
        return base

    def take_over(self, base: Base, last: Decision, lost_host: int) -> None:
        """A successor's :meth:`open`: the same run in the next epoch, with the store host's
        memory of the placement (its last decision) and the lost host as a launcher that
        will not join (it is retired as lost at the next decision, its ranks move)."""
        launch = self.cfg.settings.launch
        if self.spares is not None and last.active:
            self.spares = spares.SpareBook.restored(
                last, self.cfg.num_nodes, launch.segment, launch.suspect_after
            )
        self.nodes = last.nodes
        # Not waited for at the joins: the lost host, and the launchers the last host had
        # found lost (their heart-beats were its peer monitor's; this one never saw them).
        gone = self.spares.retired.items() if self.spares is not None else ()
        self.departed = {lost_host, *(k for k, r in gone if r.why is spares.Why.LOST)}
        self.published = base.index - 1
        if self.tracker is not None:
            self.ev.event(self.tracker.start_line())
        self.client.prepare(self.cfg.num_nodes, base)
        self.ev.event(
            f"rendezvous store (epoch {base.epoch}) listening on port {self.client.port}; "
            f"run {self.cfg.run_id}, next cycle {base.first_cycle + base.index}"
        )

    # ------------------------------------------------------------------ join + decide

    def gather(
        self,
        i: int,
        previous: Failure | None,
        own: JoinInfo,
        abort: Callable[[], bool],
        sleep: Callable[[float], None],
    ) -> Roster:
        """Wait for the launchers' joins of cycle i (see :func:`joins.gather`); ``own``: this
        launcher's own join record."""
        with_spares, departed = self.spares is not None, frozenset(self.departed)
        lost_peers = self.threads.lost_peers
        wait = JoinWait(self.client, self.cfg.num_nodes, with_spares, departed, lost_peers, own)
        timeout = self.cfg.settings.launch.join_timeout
        return joins.gather(wait, i, previous, self.nodes, timeout, abort, sleep)

    def decide(self, i: int, cycle: int, roster: Roster, previous: Failure | None) -> Decision:
        """The policy's verdict, then the progress guard's; a run gets a fresh MASTER_PORT."""
        if roster.complete:
            self.nodes = roster.names
        stop = policy.signalled_stop(previous, cycle, self.clock(), self.nodes or roster.names)
        if stop is not None:
            return stop
        if self.spares is not None:
            return self._decide_with_spares(i, cycle, roster, previous)
        verdict = roster.verdict(i, self.cfg.settings.launch.max_restarts, previous)
        now = self.clock()
        verdict = self._guarded(verdict, cycle)
        if verdict.run:
            return Decision(
                Action.RUN, cycle, master_port=hostprobe.free_port(), start_time=now, nodes=roster.names
            )
        self.books.peers_unhealthy(list(roster.unhealthy), now)
        return decisions.stopped(verdict, cycle, now, roster, previous)

    def _guarded(self, verdict: policy.Verdict, cycle: int) -> policy.Verdict:
        """The progress guard's veto of a run (asked only then: asking records the start of
        the cycle in the ledger)."""
        if verdict.run and self.tracker is not None:
            reason = self.tracker.before_cycle(cycle)
            if reason is not None:
                return policy.no_progress(reason)
        return verdict

    def _decide_with_spares(self, i: int, cycle: int, roster: Roster, previous: Failure | None) -> Decision:
        """Retire the bad launchers, place the node ranks, then decide as without spares
        (every bad node named when a node rank could not be filled)."""
        book = self.spares
        assert book is not None
        names = self.nodes or roster.names
        verdict, moves = book.verdict(
            i, roster.joins, roster.lost_ranks, previous, names, self.cfg.settings.launch.max_restarts
        )
        now = self.clock()
        verdict = self._guarded(verdict, cycle)
        for move in moves:
            self.ev.event(f"cycle {cycle}: replacing {move}")
        if roster.unhealthy:
            self.books.peers_unhealthy(list(roster.unhealthy), now)
        if verdict.run:
            standby = ", ".join(names[k] for k in book.spares) or "none"
            self.ev.event(
                f"cycle {cycle}: active {', '.join(names[k] for k in book.active)}; spare {standby}"
            )
        hosts = self.cfg.job.hosts
        return decisions.placed(verdict, cycle, now, names, book, moves, previous, hosts, hostprobe.free_port)

    def retired(self, run: RunSummary) -> RunSummary:
        """``run`` with the lost and suspect nodes known so far (spares that died during
        the last cycle included), for the outcome record."""
        if self.spares is None:
            return run
        lost, suspect = self.spares.gone(self.nodes, self.jury.lost_spares if self.jury else ())
        return dataclasses.replace(run, lost_nodes=lost, suspect_nodes=suspect)

    def begin_cycle(self, run: RunSummary, i: int, cycle: int, decision: Decision) -> None:
        """The start record must exist before workers read SLURM_FT_CYCLE_INFO; the counter
        can wait until they run (the records alone also give the number)."""
        if self.jury is not None:
            self.jury.new_cycle(self.tracker.known_startup() if self.tracker is not None else 0.0)
        self.books.open_cycle(run, i, cycle, decision)
        self.books.defer(lambda: cyclecount.write_next_cycle(self.cfg.state, cycle + 1, self.books.io))
        self.client.publish_decision(i, decision)
        self.published = i

    # ------------------------------------------------------------------ watch

    def watch_job(self, threads: BackgroundSet, hangs: hang.NodeWatch) -> None:
        """Once the background threads run: the judge of the job as a whole (a successor's
        replaces the one of the epoch before, whose progress watch ends)."""
        self.close()
        self.threads = threads
        history = self.tracker.learned_gaps() if self.tracker is not None else (0.0, 0.0)
        startup = self.tracker.known_startup() if self.tracker is not None else 0.0
        add_line = self.books.io.add_line
        self.jury = JobJudge(
            self.cfg,
            self.client,
            threads,
            hangs,
            self.ev,
            self.spares,
            self.clock,
            add_line,
            history,
            startup=startup,
        )

    def judge(self, i: int) -> Failure | None:
        return self.jury.judge(i, self.nodes) if self.jury is not None else None

    def close(self) -> None:
        """The judge's progress watch (a thread that reads the progress source) ends."""
        if self.jury is not None:
            self.jury.stop()

    # ------------------------------------------------------------------ stop + end

    def cycle_ending(self) -> None:
        """The watch is over: the progress guard starts its look now, while the workers are
        being stopped, so the next decision does not wait for it."""
        if self.tracker is not None:
            self.tracker.begin_reading()

    def close_cycle(
        self, run: RunSummary, i: int, cycle: int, decision: Decision, result: CycleResult
    ) -> None:
        """Record the cycle's end. After a failure the record file is written once the next
        cycle's workers run (off the restart's critical path), and the result is published
        at once; after a success the result is the final answer, published by the ending
        once the outcome record is written. The ledger is updated now either way: the next
        decision reads it."""
        success = result.outcome is CycleOutcome.SUCCEEDED
        if not success:
            with contextlib.suppress(StoreLost):
                self.client.publish_result(i, result)
        self.books.close_cycle(run, i, cycle, decision, result, later=not success)
        if self.tracker is not None:
            gaps = self.jury.learned_gaps() if self.jury is not None else (None, None)
            startup = self.jury.learned_startup() if self.jury is not None else None
            self.tracker.after_cycle(cycle, result.outcome.value, gaps, startup)

    def stopping(self, i: int, decision: Decision) -> Exit:
        """Node 0 decided to stop: the decision is the final answer, announced on the way out."""
        linger = self.cfg.settings.launch.result_linger_timeout
        self.published = i
        return wayout.stopped(decision, partial(self.client.publish_decision, i, decision), linger)

    def finished(self, i: int) -> Exit:
        """Every worker finished: the cycle's result is the final answer, announced on the way out."""
        result = CycleResult(CycleOutcome.SUCCEEDED, self.clock())
        linger = self.cfg.settings.launch.result_linger_timeout
        return wayout.finished(partial(self.client.publish_result, i, result), linger)

    def announce(self, way_out: Exit, run: RunSummary) -> None:
        """After the outcome record is written: node 0's farewell (see :class:`Farewell`)."""
        Farewell(
            self.cfg.num_nodes, self.client, self.threads, self.ev, self.clock, self.cfg.store_host
        ).announce(way_out, run, self.published, frozenset(self.departed))
