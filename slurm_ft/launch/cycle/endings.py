"""How a cycle that no other follows ends, as a way out for ``lifetime.finish``: the
decision said stop, or the watch ended in success, a signal or a blind spot. Node 0's
coordinator says it for the job; a peer from what it saw."""

from __future__ import annotations

from collections.abc import Callable

from slurm_ft.launch import wayout
from slurm_ft.launch.coordinator import Coordinator
from slurm_ft.launch.member import Member, WatchEnd, WatchEndKind
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.rendezvous.protocol import Decision
from slurm_ft.launch.wayout import Exit


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
