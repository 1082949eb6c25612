"""Node 0's duties on top of its member's: host the store, wait for the joins, make the
one decision of each cycle, judge the peers' heart-beats, close the cycle's books, and
keep the store up until every peer has read the final answer.

Gathering facts (store reads) and deciding (``policy``) are kept apart, so each step
reads as one call: :meth:`Coordinator.gather` then :meth:`Coordinator.decide`.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from slurm_ft import progress
from slurm_ft.launch import cyclecount, hang, hostprobe, policy
from slurm_ft.launch.background import BackgroundSet
from slurm_ft.launch.bookkeeping import Bookkeeper, RunSummary
from slurm_ft.launch.client import Client
from slurm_ft.launch.context import AgentConfig, BadInput
from slurm_ft.launch.eventlog import EventLog
from slurm_ft.launch.protocol import Action, Base, CycleResult, Decision, Keys
from slurm_ft.launch.records import CycleOutcome, Failure, FailureKind
from slurm_ft.launch.sealing import Sealer
from slurm_ft.launch.stores import StoreBindError, StoreLost, poll_until
from slurm_ft.launch.wayout import Exit
from slurm_ft.progress import LedgerError, ProgressTracker


@dataclass(frozen=True)
class Roster:
    """Who joined cycle i, as node 0 found it when the waiting ended."""

    names: tuple[str, ...]
    complete: bool
    missing: tuple[str, ...]
    unhealthy: tuple[tuple[str, str], ...]
    lost: tuple[str, ...]


class PortsInUse(Exception):
    """Node 0 found every port of the job's sequence in use: retryable (another job's
    store may be gone by the next attempt), never bad input."""


def open_store(cfg: AgentConfig, keys: Keys, sealer: Sealer, events: EventLog) -> Client:
    """Node 0's store: in memory for one node, else a TCPStore on the first free port of
    the job's sequence (where the peers look for it, in the same order)."""
    if cfg.num_nodes == 1:
        return Client.local(keys)
    in_use: list[str] = []
    for port in cfg.rdzv_ports:
        try:
            return Client.host(port, keys, cfg.settings.launch.heartbeat_timeout, sealer)
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
    ) -> None:
        self.cfg = cfg
        self.client = client
        self.books = books
        self.ev = events
        self.clock = clock
        self.threads = BackgroundSet()  # set by the agent once the threads run
        self.nodes: tuple[str, ...] = ()  # every node's name, once all joined
        self.hangs: hang.NodeWatch | None = None
        self.iterations: hang.IterationWatch | None = None
        try:
            self.tracker: ProgressTracker | None = ProgressTracker(
                cfg.state, cfg.settings.progress, cfg.job.attempt, on_warning=events.event
            )
        except LedgerError as exc:
            raise BadInput(str(exc)) from None

    def open(self) -> Base:
        """Publish the run: its first global cycle number and a fresh run uuid."""
        base = Base(cyclecount.read_next_cycle(self.cfg.state), uuid.uuid4().hex)
        self.client.prepare(self.cfg.num_nodes, base)
        where = f"listening on port {self.client.port}" if self.cfg.num_nodes > 1 else "in process (one node)"
        self.ev.event(f"rendezvous store {where}; run {self.cfg.run_id}, first cycle {base.first_cycle}")
        return base

    # ------------------------------------------------------------------ join + decide

    def _name(self, names: tuple[str, ...], node_rank: int) -> str:
        return names[node_rank] if node_rank < len(names) else f"node-rank-{node_rank}"

    def gather(
        self, i: int, previous: Failure | None, abort: Callable[[], bool], sleep: Callable[[float], None]
    ) -> Roster:
        """Wait until every launcher joined (or one is unhealthy or lost, or the join
        timeout passed); no wait at all when the previous failure cannot be retried."""
        n = self.cfg.num_nodes

        def settled() -> bool | None:
            if self.threads.lost_peers():
                return True
            joined, unhealthy = self.client.join_counts(i)
            if joined < n and unhealthy == 0:
                return None
            infos = self.client.join_records(i, n)  # the counters are hints; records are sealed
            return True if all(infos) or any(info and info.unhealthy for info in infos) else None

        if previous is None or previous.retryable:
            poll_until(
                settled,
                deadline=time.monotonic() + self.cfg.settings.launch.join_timeout,
                abort=abort,
                sleep=sleep,
                max_interval=0.25,
            )
        infos = self.client.join_records(i, n)
        names = tuple(info.node_name if info else f"node-rank-{k}" for k, info in enumerate(infos))
        return Roster(
            names=names,
            complete=all(info is not None for info in infos),
            missing=tuple(names[k] for k, info in enumerate(infos) if info is None),
            unhealthy=tuple((info.node_name, info.unhealthy) for info in infos if info and info.unhealthy),
            lost=tuple(self._name(self.nodes, k) for k in sorted(self.threads.lost_peers())),
        )

    def decide(self, i: int, cycle: int, roster: Roster, previous: Failure | None) -> Decision:
        """The policy's verdict, then the progress guard's; a run gets a fresh MASTER_PORT."""
        verdict = policy.decide(
            restart=i,
            max_restarts=self.cfg.settings.launch.max_restarts,
            previous_failure=previous,
            unhealthy=roster.unhealthy,
            lost=roster.lost,
            missing=roster.missing,
        )
        if roster.complete:
            self.nodes = roster.names
        now = self.clock()
        if verdict.run and self.tracker is not None:
            reason = self.tracker.before_cycle(cycle)
            if reason is not None:
                verdict = policy.no_progress(reason)
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

    def begin_cycle(self, run: RunSummary, i: int, cycle: int, decision: Decision) -> None:
        """The start record must exist before workers read SLURM_FT_CYCLE_INFO; the counter
        can wait until they run (the records alone also give the number)."""
        if self.iterations is not None:
            self.iterations.restart()
        self.books.open_cycle(run, i, cycle, decision)
        self.books.defer(lambda: cyclecount.write_next_cycle(self.cfg.state, cycle + 1))
        self.client.publish_decision(i, decision)

    # ------------------------------------------------------------------ watch

    def watch_job(self, threads: BackgroundSet, hangs: hang.NodeWatch) -> None:
        """Once the background threads run: what the judge reads (peers' heart-beats and
        activity reports, this node's own workers), and the iteration watch if asked for."""
        self.threads = threads
        self.hangs = hangs
        path = self.cfg.settings.progress.checkpoint_iteration_file
        if hangs.limits.iteration and path:
            period = min(5.0, max(0.1, hangs.limits.iteration / 4))
            self.iterations = hang.IterationWatch(lambda: progress.read_iteration(path).iteration, period)
            self.iterations.start()

    def judge(self, i: int) -> Failure | None:
        """Node 0's verdicts on the job as a whole: a lost peer (the lowest rank first), a
        silent job, a stalled iteration."""
        found = self._hang(i)
        if found is not None:
            job = self.cfg.job
            return hang.failure_of(found, job.node_name, job.node_rank, self.clock())
        lost = self.threads.lost_peers()
        if not lost:
            return None
        node = min(lost)
        return Failure(
            kind=FailureKind.LOST_NODE,
            node=self._name(self.nodes, node),
            node_rank=node,
            time=self.clock(),
            detail=f"launcher silent for {lost[node]:.1f}s (heartbeat lost)",
        )

    def _hang(self, i: int) -> hang.Hang | None:
        limits = self.hangs.limits if self.hangs is not None else None
        if limits is None:
            return None
        own = self.hangs.quiet() if self.hangs is not None and limits.silence else 0.0
        if limits.silence and own >= limits.silence:  # only then can the job be silent
            peers = range(1, self.cfg.num_nodes)
            reports = self.client.silences(peers) if peers else []
            quiet = [own, *((hang.parse_report(r, i) or 0.0) for r in reports)]
            silent = hang.judge_silence(quiet, limits.silence)
            if silent is not None:
                return silent
        if self.iterations is not None:
            return self.iterations.stalled(limits.iteration)
        return None

    # ------------------------------------------------------------------ stop + end

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
            self.tracker.after_cycle(cycle, result.outcome.value)

    def publish_stop(self, i: int, cycle: int, ending: policy.Ending, nodes: tuple[str, ...]) -> None:
        """Node 0 leaves between cycles: peers that did not see why learn it at their next
        join, with the exit code a departed launcher means for them."""
        verdict = policy.departed(ending.reason)
        stop = Decision(
            Action.STOP,
            cycle,
            reason=verdict.reason,
            exit_code=verdict.exit_code,
            start_time=self.clock(),
            nodes=nodes,
        )
        with contextlib.suppress(StoreLost):
            self.client.publish_decision(i, stop)

    def linger(self, gone: set[int], limit: float) -> None:
        """Keep the store up until every live peer has read the final answer. Peers known
        to be gone (lost, or left on a signal) are not waited for."""
        n = self.cfg.num_nodes
        if n <= 1:
            return

        def all_acked() -> bool | None:
            expected = len(set(range(1, n)) - gone - set(self.threads.lost_peers()))
            try:
                return True if self.client.acks() >= expected else None
            except StoreLost:
                return True

        deadline = time.monotonic() + limit
        if (
            poll_until(all_acked, deadline=deadline, abort=lambda: False, sleep=time.sleep, max_interval=0.1)
            is None
        ):
            self.ev.event(f"not every peer confirmed the final answer within {limit:.0f}s")

    def announce(self, way_out: Exit, run: RunSummary, published: int) -> None:
        """After the outcome record is written: tell the peers (the final message of the
        way out, or a stop for the next cycle when node 0 leaves on its own), then keep the
        store up while they read it."""
        with contextlib.suppress(StoreLost):
            if way_out.announce is not None:
                way_out.announce()
            elif way_out.departing:
                nxt = published + 1
                self.publish_stop(nxt, run.first_cycle + nxt, way_out.ending, run.nodes)
        gone: set[int] = set()
        f = run.last_failure
        if f is not None and not f.retryable and f.node_rank != 0:
            gone.add(f.node_rank)
        if way_out.linger > 0:
            self.linger(gone, way_out.linger)
