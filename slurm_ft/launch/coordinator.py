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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from slurm_ft.launch import cyclecount, hang, hostprobe, policy, spares, wayout
from slurm_ft.launch.bookkeeping import Bookkeeper, RunSummary
from slurm_ft.launch.context import AgentConfig, BadInput
from slurm_ft.launch.farewell import Farewell
from slurm_ft.launch.hang.judge import JobJudge
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.rendezvous import stores
from slurm_ft.launch.rendezvous.background import BackgroundSet
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import Action, Base, CycleResult, Decision, JoinInfo, Keys
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.stores import StoreBindError, StoreLost, poll_until
from slurm_ft.launch.snapshots import readings
from slurm_ft.launch.wayout import Exit
from slurm_ft.progress import LedgerError, ProgressTracker
from slurm_ft.records import CycleOutcome, Failure, node_name

JOIN_CHUNK = 64  # join records node 0 looks for in one poll
REASSERT_S = 1.0  # how often node 0 writes the run's base again while it waits for the joins


@dataclass(frozen=True)
class Roster:
    """Who joined cycle i, as node 0 found it when the waiting ended."""

    names: tuple[str, ...]
    complete: bool
    missing: tuple[str, ...]
    unhealthy: tuple[tuple[str, str], ...]
    lost: tuple[str, ...]
    joins: tuple[JoinInfo | None, ...] = ()
    lost_ranks: tuple[int, ...] = ()

    @classmethod
    def of(
        cls, infos: Sequence[JoinInfo | None], known: tuple[str, ...], lost_ranks: tuple[int, ...]
    ) -> Roster:
        """The roster from each launcher's join record (None: none); ``known``: every
        node's name from the last complete roster (empty before there was one)."""
        names = tuple(info.node_name if info else node_name(known, k) for k, info in enumerate(infos))
        return cls(
            names=names,
            complete=all(info is not None for info in infos),
            missing=tuple(names[k] for k, info in enumerate(infos) if info is None),
            unhealthy=tuple((info.node_name, info.unhealthy) for info in infos if info and info.unhealthy),
            lost=tuple(node_name(known or names, k) for k in lost_ranks),
            joins=tuple(infos),
            lost_ranks=lost_ranks,
        )

    def verdict(self, restart: int, max_restarts: int, previous: Failure | None) -> policy.Verdict:
        """The policy's verdict on this roster, without spares (see ``SpareBook.verdict``)."""
        return policy.decide(
            restart=restart,
            max_restarts=max_restarts,
            previous_failure=previous,
            unhealthy=self.unhealthy,
            lost=self.lost,
            missing=self.missing,
        )


class JoinRecords:
    """What node 0 read of cycle ``i``'s join records. A sealed record read once stays
    read: someone overwriting it afterwards un-joins no one (a launcher joins a cycle once)."""

    def __init__(self, client: Client, i: int, n: int) -> None:
        self.client, self.i, self.n = client, i, n
        self.seen: dict[int, JoinInfo] = {}

    def read(self, only: list[int] | None = None) -> list[JoinInfo | None]:
        """Each launcher's record (reading those in ``only``, when given, else all); None
        where none was read yet."""
        for k, info in enumerate(self.client.join_records(self.i, self.n, only)):
            if info is not None:
                self.seen[k] = info
        return [self.seen.get(k) for k in range(self.n)]


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
        self.snapshot_readings: readings.SnapshotReadings | None = None  # the report's, with the judge
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
        self, i: int, previous: Failure | None, abort: Callable[[], bool], sleep: Callable[[float], None]
    ) -> Roster:
        """Wait until every launcher joined (or one is unhealthy or lost, or the join
        timeout passed); no wait at all when the previous failure cannot be retried. With
        spares an unhealthy or lost launcher is replaced, so the wait goes on for the others."""
        n = self.cfg.num_nodes
        with_spares = self.spares is not None
        next_reassert = time.monotonic() + REASSERT_S
        joins = JoinRecords(self.client, i, n)

        def settled() -> bool | None:
            nonlocal next_reassert
            if time.monotonic() >= next_reassert:  # the base, should someone have overwritten it
                self.client.reassert()
                next_reassert = time.monotonic() + REASSERT_S
            lost = {**dict.fromkeys(self.departed, 0.0), **self.threads.lost_peers()}
            if lost and not with_spares:
                return True
            # With spares a lost launcher is replaced: every live one must be in the roster
            # (a lost one may still join: it froze and thawed).
            # Looked at JOIN_CHUNK launchers at a time (one check of a few keys per poll,
            # whatever the job's size), or all that are left when one says it is unhealthy.
            waiting = [k for k in range(n) if k not in lost and k not in joins.seen]
            head = waiting[:JOIN_CHUNK]
            if self.client.joined(i, head):
                infos = joins.read(head)  # only sealed records count
            elif with_spares or not self.client.unhealthy_said(i):
                return None
            else:
                infos = joins.read(waiting)
            if with_spares:
                return True if all(info is not None or k in lost for k, info in enumerate(infos)) else None
            return True if all(infos) or any(info and info.unhealthy for info in infos) else None

        if previous is None or previous.retryable or (with_spares and policy.replaceable(previous)):
            poll_until(
                settled,
                deadline=time.monotonic() + self.cfg.settings.launch.join_timeout,
                abort=abort,
                sleep=sleep,
                max_interval=0.25,
            )
        lost = {*self.threads.lost_peers(), *self.departed}
        return Roster.of(joins.read(), self.nodes, tuple(sorted(lost)))

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
        return Decision(
            Action.STOP,
            cycle,
            reason=verdict.reason,
            exit_code=verdict.exit_code,
            start_time=now,
            nodes=roster.names,
            unhealthy_nodes=tuple(node for node, _ in roster.unhealthy),
            lost_nodes=roster.lost,
            first_failure=previous.to_json() if previous else None,
        )

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
        Why = spares.Why
        now = self.clock()
        verdict = self._guarded(verdict, cycle)
        for move in moves:
            self.ev.event(f"cycle {cycle}: replacing {move}")
        retired, charged, streak = book.memory()
        if roster.unhealthy:
            self.books.peers_unhealthy(list(roster.unhealthy), now)
        if verdict.run:
            standby = ", ".join(names[k] for k in book.spares) or "none"
            self.ev.event(
                f"cycle {cycle}: active {', '.join(names[k] for k in book.active)}; spare {standby}"
            )
            return Decision(
                Action.RUN,
                cycle,
                master_port=hostprobe.free_port(),
                start_time=now,
                nodes=names,
                active=book.active,
                spares=book.spares,
                master_addr=self.cfg.job.hosts[book.active[0]],
                replacements=moves,
                retired=retired,
                charged=charged,
                streak=streak,
            )
        return Decision(
            Action.STOP,
            cycle,
            reason=verdict.reason,
            exit_code=verdict.exit_code,
            start_time=now,
            nodes=names,
            unhealthy_nodes=book.named(names, (Why.UNHEALTHY, Why.STUCK)),
            first_failure=previous.to_json() if previous else None,
            active=book.active,
            spares=book.spares,
            replacements=moves,
            lost_nodes=book.named(names, (Why.LOST, Why.MISSING)),
            suspect_nodes=book.named(names, (Why.SUSPECT,)),
        )

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
        self.snapshot_readings = readings.watch(
            self.snapshot_step, self.cfg.state.snapshot_readings, add_line
        )

    def judge(self, i: int) -> Failure | None:
        return self.jury.judge(i, self.nodes) if self.jury is not None else None

    def close(self) -> None:
        """The judge's progress watch (a thread that reads the progress source) ends, and
        the snapshot readings' thread."""
        if self.jury is not None:
            self.jury.stop()
        if self.snapshot_readings is not None:
            self.snapshot_readings.stop()

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
