"""Where each node's state comes from when a cycle starts after a node was lost (pure).

A node's memory holds, per key (``rank-RRRRR`` for a shard, ``replicated`` for DDP state),
the steps of its complete snapshots. A node that lost its memory (a spare taking a lost
node's rank, a restarted machine) needs its keys from another node: for replicated state
any surviving node's copy of the same step will do; for a shard, the copy that
``--snapshot-replicas 1`` placed on another node. The cycle resumes from the newest step
that every needed key is held at *somewhere*, so no rank ever resumes from a mix of steps;
each node then takes what it lacks from a holder of exactly that step. Nodes compute this
from the same published holdings, so they agree without another round.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from slurm_ft.snapshot.layout import REPLICATED
from slurm_ft.snapshot.layout import rank_key as shard_key


class Via(enum.Enum):
    """How a node gets one key's state at the chosen step."""

    OWN = "own memory"  # already in this node's memory (written here, or a replica placed here)
    PEER = "a peer's memory"  # fetched from another node's memory before the workers start
    NONE = "the checkpoint"  # no node holds it: the trainer falls back to its checkpoint


@dataclass(frozen=True)
class Source:
    key: str
    via: Via
    node: int | None = None  # the node it comes from (PEER)


@dataclass(frozen=True)
class Plan:
    """The cycle's resume step (None: no step every key is held at) and, per node, where
    each of its keys comes from."""

    step: int | None
    sources: Mapping[int, tuple[Source, ...]]


def plan(held: Mapping[int, Mapping[str, Collection[int]]], needs: Mapping[int, Collection[str]]) -> Plan:
    """``held``: node -> key -> steps its memory holds (the surviving nodes only);
    ``needs``: node -> the keys its workers restore this cycle."""
    wanted = {key for keys in needs.values() for key in keys}
    anywhere: dict[str, set[int]] = {key: set() for key in wanted}
    for holding in held.values():
        for key, steps in holding.items():
            if key in anywhere:
                anywhere[key].update(steps)
    common: set[int] | None = None
    for steps in anywhere.values():
        common = set(steps) if common is None else common & steps
    step = max(common) if common else None
    out: dict[int, tuple[Source, ...]] = {}
    for node, keys in needs.items():
        out[node] = tuple(_source(node, key, step, held) for key in sorted(keys))
    return Plan(step, out)


def _source(
    node: int, key: str, step: int | None, held: Mapping[int, Mapping[str, Collection[int]]]
) -> Source:
    if step is None:
        return Source(key, Via.NONE)
    if step in held.get(node, {}).get(key, ()):
        return Source(key, Via.OWN, node)
    for other in sorted(held):
        if other != node and step in held[other].get(key, ()):
            return Source(key, Via.PEER, other)
    return Source(key, Via.NONE)  # unreachable: the step was chosen among held ones


def replica_target(node: int, active: Sequence[int]) -> int | None:
    """The node that keeps ``node``'s replica: the next active node in a ring, so any one
    lost node's shards survive on its successor (None: no other node)."""
    ring = sorted(active)
    if node not in ring or len(ring) < 2:
        return None
    return ring[(ring.index(node) + 1) % len(ring)]


def says(plan_: Plan, node: int) -> str:
    """One line for the launcher log: where this node's keys come from, at which step."""
    sources = plan_.sources.get(node, ())
    if plan_.step is None:
        return "snapshots: no step is held for every rank; the workers start from the checkpoint"
    parts = []
    for s in sources:
        where = s.via.value if s.via is not Via.PEER else f"node {s.node}'s memory"
        parts.append(f"{s.key} from {where}")
    return f"snapshots: the cycle resumes at step {plan_.step}: {'; '.join(parts) or 'nothing needed here'}"


def needs_of(
    held: Mapping[int, Mapping[str, Collection[int]]], active: Sequence[int], nproc_per_node: int
) -> dict[int, list[str]] | None:
    """The keys each active launcher's workers restore (``active``: the launcher of each
    node rank): the node's replicated copy where the trainer snapshots replicated state,
    else one shard per global rank; None when no node holds any snapshot (a first cycle,
    a requeued attempt: nothing to plan)."""
    keys = {key for holding in held.values() for key in holding if holding[key]}
    if not keys:
        return None
    if REPLICATED in keys:
        return {launcher: [REPLICATED] for launcher in active}
    return {
        launcher: [shard_key(slot * nproc_per_node + local) for local in range(nproc_per_node)]
        for slot, launcher in enumerate(active)
    }
