"""The loop's steps that differ by role, kept out of the loop so that it reads as one.

At the start: node 0 opens the store, runs the coordinator and publishes the run; a peer
finds node 0's store and reads the run; each starts its role's background threads (again
in each store epoch). At the end of a last cycle (the decision said
stop, or the watch ended in success, a signal or a blind spot): node 0's coordinator says
the way out for the job, a peer what it saw, as a way out for ``lifetime.finish``. What
each role does meanwhile is ``member``'s and ``coordinator``'s."""

from __future__ import annotations

import time
from collections.abc import Callable

from slurm_ft.launch import wayout
from slurm_ft.launch.books.bookkeeper import Bookkeeper
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.rendezvous.background import BackgroundSet
from slurm_ft.launch.rendezvous.client import Client, find_run
from slurm_ft.launch.rendezvous.protocol import Base, Decision, Keys
from slurm_ft.launch.rendezvous.sealing import Sealer
from slurm_ft.launch.rendezvous.stores import StoreLost
from slurm_ft.launch.roles.coordinator import Coordinator, open_store
from slurm_ft.launch.roles.member import Member
from slurm_ft.launch.roles.watchend import WatchEnd, WatchEndKind
from slurm_ft.launch.wayout import Exit


def open_as_node0(
    cfg: AgentConfig,
    keys: Keys,
    sealer: Sealer,
    given: Client | None,
    books: Bookkeeper,
    events: EventLog,
    clock: Callable[[], float],
    snapshot_step: Callable[[], int | None] | None,
) -> tuple[Client, Coordinator, Base]:
    """Node 0: its store (``given`` in the tests), its coordinator, and the run it published."""
    client = given or open_store(cfg, keys, sealer, events)
    coordinator = Coordinator(cfg, client, books, events, clock=clock, snapshot_step=snapshot_step)
    return client, coordinator, coordinator.open()


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


def start_threads(
    client: Client,
    cfg: AgentConfig,
    wake_fd: int,
    emergency: Callable[[str], None],
    on_lost: Callable[[str], None],
    clock: Callable[[], float],
) -> BackgroundSet:
    """The background threads of this launcher's role in the current store's epoch (the
    heart-beat, node 0's watch of the peers, a peer's watchdog of the store)."""
    launch = cfg.settings.launch
    return BackgroundSet.start(
        client,
        node_rank=cfg.job.node_rank,
        num_nodes=cfg.num_nodes,
        interval=launch.heartbeat_interval,
        timeout=launch.heartbeat_timeout,
        wake_fd=wake_fd,
        emergency=emergency,
        on_lost=on_lost,
        clock=clock,
        host=cfg.store_host,
    )


def stopped(coordinator: Coordinator | None, i: int, decision: Decision, linger: float) -> Exit:
    if coordinator is None:
        return wayout.stopped(decision, None, linger)
    return coordinator.stopping(i, decision)


def after(
    end: WatchEnd,
    i: int,
    cycle: int,
    coordinator: Coordinator | None,
    member: Member,
    events: EventLog,
    arrived: Callable[[], bool],
    node_name: str,
) -> Exit:
    """After the watch of the last cycle (any end but a failure, which another cycle follows)."""
    if end.kind is WatchEndKind.SUCCESS:
        events.event(f"cycle {cycle}: all workers on all nodes finished")
        if coordinator is None:
            member.confirm_success(i, cycle, arrived)
            return wayout.finished(None, 0.0)
        return coordinator.finished(i)
    if end.kind is WatchEndKind.SIGNAL:
        assert end.signum is not None
        return wayout.signalled(end.signum, node_name)
    return wayout.blind(end.detail)
