"""What a launcher does when its store host is gone: find a successor and join the next
epoch (leading it or following it), or leave the way a launcher without one leaves; and,
when the host only froze, the watchdog's side of it (sever, wait for a successor, exit).

Kept apart from the agent's cycle loop because it is a flow of its own that cuts across
the cycle (it starts in a join, a decision or a watch and ends in the next epoch's store)
and because part of it runs on the watchdog thread. The rule of who may succeed and who
leads lives in ``rule`` (pure); the two sides of the handover in ``handover``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from slurm_ft.exitcodes import ExitCode
from slurm_ft.launch import policy, wayout
from slurm_ft.launch.books.bookkeeper import Bookkeeper, RunSummary
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.rendezvous.background import BackgroundSet
from slurm_ft.launch.rendezvous.beatperiod import beat_period
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import Base, CycleResult, Decision, Keys, next_epoch
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.stores import StoreLost
from slurm_ft.launch.roles.coordinator import Coordinator, PortsInUse
from slurm_ft.launch.signals import SignalBox
from slurm_ft.launch.succession import rule
from slurm_ft.launch.wayout import Exit
from slurm_ft.launch.workers import process as wk
from slurm_ft.launch.workers.group import CycleWorkers
from slurm_ft.records import CycleOutcome, Failure, FailureKind, SuccessionClaim, node_name

if TYPE_CHECKING:  # the handover (and the fence under it) loads when a store host is lost
    from slurm_ft.launch.snapshots.node import NodeSnapshots
    from slurm_ft.launch.succession.handover import EpochStore, FenceJob

SUCCESSION_TURN_MIN_S = 2.0  # the least time a candidate gives the one before it to claim
HANDOVER_GRACE_S = 5.0  # a frozen store's watchdog waits this long past the operation timeout
NODE0_LOST_WRITE_S = 5.0  # how long a peer whose node 0 froze waits for the state dir


class Superseded(Exception):
    """This store host was lost and a successor took over (it froze, then thawed)."""


class Launcher(Protocol):
    """The agent as this flow sees it: the store's epoch it serves (configuration with the
    store host, keys, client, threads, coordinator) and its view of the run, which a
    succession replaces; the workers, which a frozen store's watchdog kills."""

    cfg: AgentConfig
    run: RunSummary
    client: Client | None
    coordinator: Coordinator | None
    keys: Keys
    sealer: Sealer
    threads: BackgroundSet
    workers: CycleWorkers | None
    snapshots: NodeSnapshots
    unhealthy: str | None
    next_index: int

    def enter_epoch(self, keys: Keys) -> None: ...


class StoreHostLoss:
    """The store host is gone (closed, or frozen): a successor, or the way out without one.

    Holds what only this flow needs: the last decision read (a successor's memory), the
    fence of a lost host a successor started, and the watchdog's handover timer."""

    def __init__(
        self,
        launcher: Launcher,
        events: EventLog,
        signals: SignalBox,
        books: Bookkeeper,
        *,
        clock: Callable[[], float],
        epoch_store: EpochStore | None,
    ) -> None:
        self.launcher = launcher
        self.ev = events
        self.sig = signals
        self.books = books
        self.clock = clock
        self.epoch_store = epoch_store  # a successor's store (in-memory in the tests)
        self.launch = launcher.cfg.settings.launch
        self.decision: Decision | None = None  # the last decision read
        self.seen = -1  # its cycle index
        self.fence: FenceJob | None = None
        self._handover: threading.Timer | None = None

    def saw(self, i: int, decision: Decision) -> None:
        """Every decision read: what a successor continues from."""
        self.decision, self.seen = decision, i

    # ------------------------------------------------------------------ the way out

    def way_out(self, detail: str, *, silent: bool = False) -> Exit:
        """A store host that closed its connections ended its own step task; a silent one
        (frozen) holds the step, so the way out names it and ends the step."""
        a = self.launcher
        unhealthy, received = a.unhealthy is not None, self.sig.received
        if silent:
            return wayout.store_host_silent(
                detail, self._store_host_name(), unhealthy=unhealthy, received=received
            )
        return wayout.store_lost(detail, unhealthy=unhealthy, received=received)

    def _store_host_name(self) -> str:
        a = self.launcher
        if a.run.nodes:
            return node_name(a.run.nodes, a.cfg.store_host)
        return a.cfg.topo.master_addr

    # ------------------------------------------------------------------ succession

    def gone(self, i: int, detail: str) -> Exit | None:
        """The store host is lost: a succession (None: the job goes on at the launcher's
        ``next_index``), or the way out as without one, its reason saying why there is no
        successor."""
        a = self.launcher
        if a.cfg.is_node0 or self.sig.received is not None:
            return self.way_out(detail)
        silent = a.threads.store_silent()  # read before a succession stops the threads
        why = self._why_no_successor() or self._succeed(i, detail)
        if why is None:
            return None
        self.ev.event(f"no store succession: {why}")
        return self.way_out(f"{detail}; no successor: {why}", silent=silent)

    def _why_no_successor(self) -> str | None:
        d, a = self.decision, self.launcher
        cfg = a.cfg
        shared = d is not None and self.books.shares_state(a.run.run_uuid, d.cycle)
        why = rule.why_not(
            launchers=cfg.num_nodes,
            spare_nodes=self.launch.spare_nodes,
            decision=d,
            me=cfg.job.node_rank,
            host=cfg.store_host,
            shared_state=shared,
            unhealthy=a.unhealthy,
        )
        return why if why is not None or d is None else rule.lost_ranks_fillable(d, cfg.store_host)

    def _succeed(self, i: int, detail: str) -> str | None:
        """Settle who hosts the next epoch's store (``succession``), then lead or follow
        (``handover``); None when this launcher is in the new epoch, else why not."""
        from slurm_ft.launch.succession import handover  # not on every launch's start

        self.cancel_handover()
        a = self.launcher
        a.threads.stop()
        d, cfg, me = self.decision, a.cfg, a.cfg.job.node_rank
        assert d is not None
        host, uuid = cfg.store_host, a.run.run_uuid
        lost = node_name(d.nodes, host)
        now = self.clock()
        failure = Failure(FailureKind.LOST_NODE, lost, host, now, detail=f"store host lost: {detail}")
        a.run = dataclasses.replace(a.run, last_failure=failure, failure_seen=failure)
        keys = next_epoch(a.keys)
        order = rule.candidates(d, cfg.num_nodes, host)
        # a turn spans the peers' spread in noticing the loss: up to a (stretched) beat period
        beats = beat_period(cfg.num_nodes, self.launch.heartbeat_interval, self.launch.heartbeat_timeout)
        turn = max(SUCCESSION_TURN_MIN_S, beats.timeout)
        wait = rule.Wait(order, turn, rule.give_up_after(order, turn, self.launch.join_timeout))
        self.ev.event(f"store host {lost} lost ({detail}); successor order: {rule.named_order(d, order)}")
        mine = SuccessionClaim(keys.epoch, me, cfg.job.node_name, uuid, lost, os.getpid(), now)
        found = rule.settle(cfg.state.succession_claim(cfg.run_id, keys.epoch), mine, wait, self.sig.arrived)
        if isinstance(found, str):
            return found
        if found.run_uuid != uuid or found.launcher not in order:
            return f"epoch {keys.epoch} was claimed by {found.node}, not a candidate of this run"
        a.cfg = cfg = dataclasses.replace(cfg, store_host=found.launcher)
        old = a.client
        try:
            if found.launcher == me:
                base = self._lead(i, keys, d, host, failure)
            else:
                a.client, base = handover.follow(
                    cfg, keys, a.sealer, found.launcher, uuid,
                    abort=self.sig.arrived, sleep=self.sig.sleep, given=self.epoch_store,
                )  # fmt: skip
                a.client.beat(me)
        except (StoreLost, PortsInUse) as exc:
            return f"{found.node} claimed epoch {keys.epoch}, but: {exc}"
        if old is not None and a.client is not None:  # the first decision's patch starts there
            a.client.inherit_placements(old)
        a.enter_epoch(keys)
        line = f"epoch {keys.epoch}: {found.node} hosts the store after {lost} was lost in cycle {d.cycle}"
        a.run = dataclasses.replace(a.run, successions=(*a.run.successions, line))
        self.ev.event(f"store succession: {line}")
        a.next_index = base.index
        return None

    def _lead(self, i: int, keys: Keys, last: Decision, lost_host: int, failure: Failure) -> Base:
        """This launcher won the claim: the next epoch's store, the coordinator's role, the
        fence of the lost host, and the lost cycle's books closed."""
        from slurm_ft.launch.snapshots import readings
        from slurm_ft.launch.succession import handover

        a = self.launcher
        cfg, run = a.cfg, a.run
        j = handover.next_index(cfg, self.books, run.first_cycle, self.seen)
        base = Base(run.first_cycle, run.run_uuid, keys.epoch, cfg.job.node_rank, j)
        step = readings.for_guard(a.snapshots.on, cfg.state.snapshot_readings, self.books.io)
        led = handover.lead(
            cfg, keys, a.sealer, self.books, self.ev, base, last, lost_host,
            clock=self.clock, given=self.epoch_store, snapshot_step=step,
        )  # fmt: skip
        a.client, a.coordinator = led.client, led.coordinator
        cycles = [c for c in range(last.cycle, last.cycle - 3, -1) if c >= run.first_cycle]
        self.fence = handover.start_fence(cfg, failure.node, cycles, run.run_uuid)
        if self.seen == i and last.run:  # the store was lost in this cycle's watch
            result = CycleResult(CycleOutcome.LOST, self.clock(), failure.to_json())
            led.coordinator.close_cycle(run, i, last.cycle, last, result)
        return base

    def await_fence(self) -> None:
        """A successor's first decision: the lost host's processes are dead first, or named."""
        if self.fence is None:
            return
        job, self.fence = self.fence, None
        fenced = job.result()
        if fenced is None:
            self.ev.event("fence of the lost store host: no answer within the wait; it may still write")
            return
        self.ev.event(fenced.describe())
        if fenced.unfenced:
            a = self.launcher
            a.run = dataclasses.replace(a.run, unfenced=(*a.run.unfenced, *fenced.unfenced))

    def superseded_by(self) -> str | None:
        """Who leads a later epoch of this run ('<node> leads epoch <E> of this run'), when
        a successor took over from this store host while it was frozen; else None."""
        if self.launch.spare_nodes < 1:
            return None
        cfg = self.launcher.cfg
        claim = rule.superseded(cfg.state, cfg.run_id, self.launcher.keys.epoch)
        return None if claim is None else f"{claim.node} leads epoch {claim.epoch} of this run"

    def stop_if_superseded(self) -> None:
        """A store host that froze and thawed after a successor took over writes nothing more."""
        by = self.superseded_by()
        if by is not None:
            raise Superseded(by)

    # ------------------------------------------------------------------ the watchdog's side

    def _may_hand_over(self) -> bool:
        d, cfg = self.decision, self.launcher.cfg
        return self.launch.spare_nodes > 0 and d is not None and d.run and not cfg.is_node0

    def sever(self, why: str) -> None:
        """On the watchdog thread, the moment the store host counts as lost: where a
        succession may follow, this launcher's connections to the host are shut down, so a
        main thread stuck in a call to a frozen host gets it back at once."""
        client = self.launcher.client
        if self._may_hand_over() and client is not None:
            with contextlib.suppress(OSError, ValueError):
                client.sever()

    def emergency_exit(self, why: str) -> None:
        """Called on the watchdog thread: the main thread is stuck on a frozen store. Where a
        succession may follow, the workers are killed now and the main thread gets the
        store's operation timeout (and a grace) to reach it; else, and after that, exit."""
        if self._may_hand_over():
            a = self.launcher
            self.ev.event(f"rendezvous store unresponsive ({why}); killing workers, looking for a successor")
            if a.workers is not None:
                a.workers.group.signal_groups(signal.SIGKILL)
            if a.client is not None:  # the main thread may be stuck in a call to the host
                with contextlib.suppress(OSError, ValueError):
                    a.client.sever()
            timer = threading.Timer(
                self.launch.heartbeat_timeout + HANDOVER_GRACE_S, self._frozen_exit, (why,)
            )
            timer.daemon = True
            self._handover = timer
            timer.start()
            return
        self._frozen_exit(why)

    def _frozen_exit(self, why: str) -> None:
        a = self.launcher
        self.ev.event(f"rendezvous store unresponsive ({why}); killing workers and exiting 1")
        if a.workers is not None:
            a.workers.group.signal_groups(signal.SIGKILL)
        wk.kill_orphans(os.getpid())
        node0 = self._store_host_name()
        ending = policy.node0_frozen(why, node0)
        if a.client is not None:
            a.run = dataclasses.replace(a.run, store_values_ignored=a.client.sealer.rejected())
        self.books.node0_lost(a.run, ending, NODE0_LOST_WRITE_S)
        # A frozen node 0 holds the step as a frozen peer does.
        wayout.end_step(a.cfg.step_killer, self.ev.event, (node0,))
        os._exit(int(ExitCode.WORKERS_FAILED))

    def cancel_handover(self) -> None:
        """A succession, or the launcher's own way out, ends the wait the watchdog started."""
        if self._handover is not None:
            self._handover.cancel()
            self._handover = None
