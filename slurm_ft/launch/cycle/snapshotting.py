"""The cycle loop's steps for snapshots (#44, #45): node 0's plan of who fetches which
lost node's keys, each node's fetch before its workers start, the record of where its ranks
resumed from, and the persist on the way out.

Kept out of the loop so that it reads as the protocol does; the snapshots themselves
(memory, peers, the plan's format) are ``launch.snapshots``'s. Each step takes what it
uses, so none depends on when the loop updated a field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from slurm_ft.launch.books.bookkeeper import Bookkeeper, RunSummary
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.policy import Ending
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import Decision, JoinInfo
from slurm_ft.launch.roles.member import Member
from slurm_ft.launch.snapshots.node import NodeSnapshots
from slurm_ft.records import FailureKind, RankResume
from slurm_ft.slurm import SlurmJob

if TYPE_CHECKING:
    from slurm_ft.launch.snapshots.lostnode import LostNodes


def plan(
    client: Client, i: int, decision: Decision, joins: Sequence[JoinInfo | None], cfg: AgentConfig
) -> bool:
    """Node 0, before it publishes the decision: the holdings of the launchers whose
    join says they published read here once (O(N) at node 0; nothing when none did)
    and each active launcher's part of the plan written, so a launcher reads one key,
    not every launcher's holdings. Whether any part was written."""
    from slurm_ft.launch.snapshots import lostnode  # only in a job that snapshots

    nodes = [k for k, info in enumerate(joins) if info is not None and info.snapshots]
    active = decision.active or tuple(range(cfg.num_nodes))
    if not nodes:
        return False
    published = dict(zip(nodes, client.snapshot_holdings(i, nodes), strict=True))
    planned = lostnode.parts(published, active, cfg.topo.nproc_per_node)
    if planned is None:
        return False
    client.publish_snapshot_parts(i, {n: part.encode() for n, part in planned.items()})
    return True


def fetch_sources(
    client: Client,
    lost_nodes: LostNodes,
    member: Member,
    on_event: Callable[[str], None],
    i: int,
    decision: Decision,
    node_rank: int,
) -> bool:
    """Before the workers start: this node's keys at the step every rank resumes from
    (fetched from another node where a lost node took them), as node 0's plan says.
    False when they cannot be (a copy no holder could give, or a part the decision names
    that the store does not hold sealed): the failure is said and published, the cycle
    ends before this node's workers start, and the next one plans again."""
    from slurm_ft.launch.snapshots import lostnode

    raw = client.snapshot_part(i, node_rank) if decision.snapshot_plan else None
    part = lostnode.Part.decode(raw) if raw is not None else None
    if decision.snapshot_plan and part is None:
        failed: str | None = lost_nodes.unplanned()
    else:
        failed = lost_nodes.prepare(part)
    if failed is not None:
        on_event(failed)
        member.publish_quietly(i, FailureKind.WORKER, failed)
    return failed is None


def after_cycle(
    snapshots: NodeSnapshots,
    books: Bookkeeper,
    on_event: Callable[[str], None],
    job: SlurmJob,
    cycle: int,
    run_uuid: str,
    ranks: range,
) -> None:
    """After a cycle's workers are gone (and before the next cycle's restore): where its
    ranks here resumed from (one launcher line) and the node's newest snapshot, for the
    records and the report, written off the restart's critical path."""
    resumed, asked = snapshots.resumed(ranks, cycle)
    books.defer(partial(record_resumed, snapshots, books, on_event, job, cycle, run_uuid, resumed, asked))


def record_resumed(
    snapshots: NodeSnapshots,
    books: Bookkeeper,
    on_event: Callable[[str], None],
    job: SlurmJob,
    cycle: int,
    run_uuid: str,
    resumed: list[RankResume],
    asked: bool,
) -> None:
    """Off the restart's critical path: the node's newest snapshot, the lines, the record."""
    rec = snapshots.cycle_record(cycle, job.node_name, job.node_rank, run_uuid, resumed)
    on_event(snapshots.resumed_line(rec))
    stalled = snapshots.stalled_line(rec, asked)
    if stalled is not None:
        on_event(stalled)
    books.node_snapshots(rec)


def persist(
    snapshots: NodeSnapshots,
    books: Bookkeeper,
    cfg: AgentConfig,
    run: RunSummary,
    ending: Ending,
    received_at: float | None,
    now: float,
) -> RunSummary:
    """The breakpoint: this node's newest snapshots to durable storage (the workers are
    gone), before the outcome record, which says what could not be persisted. After a
    signal, within what ``--term-timeout`` leaves (the records keep a little of it). The
    run, with what was persisted and what not."""
    if not snapshots.persists:
        return run
    launch = cfg.settings.launch
    timeout = launch.snapshot_persist_timeout
    if received_at is not None:
        left = received_at + launch.term_timeout - now
        timeout = min(timeout, left - min(2.0, launch.write_timeout))
    rec = snapshots.persist(ending, timeout, cfg, run.run_uuid)
    if rec is None:
        return run
    run = dataclasses.replace(
        run,
        snapshots_persisted=tuple(rec.persisted),
        snapshots_not_persisted=tuple(rec.not_persisted),
    )
    books.snapshots_persisted(rec)
    return run


def between_nodes(
    cfg: AgentConfig, snapshots: NodeSnapshots, on_event: Callable[[str], None]
) -> LostNodes | None:
    """The snapshots between nodes (#44), once node 0 is reached: a job of several nodes
    that snapshots in memory; None otherwise."""
    if snapshots.path is None or cfg.num_nodes <= 1:
        return None
    from slurm_ft.launch.snapshots import lostnode

    return lostnode.for_launcher(cfg, snapshots.path, snapshots.limit, on_event)
