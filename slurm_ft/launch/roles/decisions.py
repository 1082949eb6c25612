"""The decision node 0 publishes, built from the policy's verdict: who runs, where, and what
a stop says (the nodes it names, the first failure). Pure: the clock's reading and the free
port come in as arguments.

Apart from the coordinator, which gathers the facts and asks the policy, because a
decision record has many fields and two shapes (with spares and without), and none of
them is a duty of node 0's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from slurm_ft.launch import policy
from slurm_ft.launch.rendezvous.protocol import Action, Decision
from slurm_ft.launch.roles.joins import Roster
from slurm_ft.launch.spares import SpareBook, Why
from slurm_ft.records import Failure


def stopped(
    verdict: policy.Verdict, cycle: int, now: float, roster: Roster, previous: Failure | None
) -> Decision:
    """A stop without spares: the roster's unhealthy and lost nodes named."""
    return dataclasses.replace(
        policy.stop_record(verdict, cycle, now, roster.names, previous),
        unhealthy_nodes=tuple(node for node, _ in roster.unhealthy),
        lost_nodes=roster.lost,
    )


def placed(
    verdict: policy.Verdict,
    cycle: int,
    now: float,
    names: tuple[str, ...],
    book: SpareBook,
    moves: tuple[str, ...],
    previous: Failure | None,
    hosts: Sequence[str],
    free_port: Callable[[], int],
) -> Decision:
    """With spares: a run on the book's active launchers (the first one's host is the
    master), carrying the book's memory for a successor; or a stop naming every bad node."""
    if verdict.run:
        retired, charged, streak = book.memory()
        return Decision(
            Action.RUN,
            cycle,
            master_port=free_port(),
            start_time=now,
            nodes=names,
            active=book.active,
            spares=book.spares,
            master_addr=hosts[book.active[0]],
            replacements=moves,
            retired=retired,
            charged=charged,
            streak=streak,
        )
    return dataclasses.replace(
        policy.stop_record(verdict, cycle, now, names, previous),
        unhealthy_nodes=book.named(names, (Why.UNHEALTHY, Why.STUCK)),
        active=book.active,
        spares=book.spares,
        replacements=moves,
        lost_nodes=book.named(names, (Why.LOST, Why.MISSING)),
        suspect_nodes=book.named(names, (Why.SUSPECT,)),
    )
