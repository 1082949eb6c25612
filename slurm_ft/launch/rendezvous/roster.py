"""A big job's decision names its placement by a digest; the placement (every node's name,
the launcher of each node rank) goes under a key of its own, which a launcher reads only
when the digest is new to it and the decision's patch cannot make it (issue 45).

Every launcher reads every decision, and a decision named every node (about 15 bytes each)
and each node rank's launcher (about 5). Node 0 therefore sent N decisions of 20 N bytes
each cycle: 295 MB through the store's one thread at 4,096 nodes, 4.9 GB at 16,384; and
each launcher decoded both lists every cycle, 0.39 ms of its CPU at 4,096 nodes
(``benchmarks.restart_cost``), which the scale harness's 4,095 launchers pay on two cores.
The placement changes only when a spare replaces a node or a node is lost, so past
:data:`INLINE_MAX` nodes node 0 writes it beside each decision (one value, one write) and
the decision names its digest: a launcher that read that placement before takes it from
memory. When it changed, it changed in a few places: the decision also says how to make it
from node 0's last one (what to keep of each list's head and tail, what goes between), and
a launcher holding that one makes the new one itself and checks it against the digest. Only
a launcher holding neither (a spare's first cycle, a patch too long) reads the placement:
the 4,094 survivors of a 4,096-node succession each read 48 KB from the successor's store
before. Pure: the client does the I/O.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from slurm_ft.launch.rendezvous.protocol import Decision, Malformed, Placement, decode, encode

INLINE_MAX = 64  # decisions of up to this many nodes carry their placement themselves, as before
PATCH_MAX = 64  # entries a patch may put between the kept head and tail; past that, none

T = TypeVar("T")


def _digest(found: Placement) -> str | None:
    """The placement's identity: SHA-256 of its names joined by NUL (after their length)
    and its launchers as 8-byte little-endian integers; None where it has none (a name
    holding a NUL, which no host name does and which would make two placements one; a
    launcher past 64 bits).

    Not of its JSON: a launcher checks a placement made from a patch against its digest,
    and encoding 4,096 names and launchers to hash them took 0.31 ms of that check's 0.41
    (this 0.14 ms), which each of the 4,094 survivors of the scale harness's succession
    paid on two cores. hashlib is imported on first use (as the sealer's): only a job of
    more than 64 nodes digests, and a single node's launcher should not pay for it at
    start-up."""
    import hashlib

    names = "\0".join(found.nodes)
    if names.count("\0") != max(0, len(found.nodes) - 1):
        return None
    try:  # one C loop over the launchers: an array of them took 0.05 ms at 4,096, this 0.03
        # (the digest a follower makes of a patched placement: 0.165 -> 0.140 ms)
        launchers = struct.pack(f"<{len(found.active)}q", *found.active)
    except struct.error:
        return None
    text = names.encode(errors="surrogatepass")
    digest = hashlib.sha256(f"{len(text)}:".encode())  # where the names end
    digest.update(text)
    digest.update(launchers)
    return digest.hexdigest()[:32]


def _cut(old: Sequence[T], new: Sequence[T]) -> tuple[int, int]:
    """How many entries ``new`` keeps of ``old``'s head, and then of its tail."""
    limit = min(len(old), len(new))
    head = 0
    while head < limit and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < limit - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return head, tail


def _with_patch(wire: Decision, new: Placement, last: tuple[str, Placement]) -> Decision:
    """``wire`` with the patch from ``last`` (digest, placement) to ``new``; as it is where
    the change is too long."""
    digest, old = last
    nodes_cut, active_cut = _cut(old.nodes, new.nodes), _cut(old.active, new.active)
    nodes = new.nodes[nodes_cut[0] : len(new.nodes) - nodes_cut[1]]
    active = new.active[active_cut[0] : len(new.active) - active_cut[1]]
    if len(nodes) + len(active) > PATCH_MAX:
        return wire
    return dataclasses.replace(
        wire,
        roster_from=digest,
        roster_cut=(*nodes_cut, *active_cut),
        roster_nodes=nodes,
        roster_active=active,
    )


@dataclass(frozen=True)
class Written:
    """A placement to write beside its decision (``text``), kept by the writer for its next
    decision's patch."""

    digest: str
    placement: Placement
    text: str


def split(decision: Decision, last: tuple[str, Placement] | None = None) -> tuple[Decision, Written | None]:
    """The decision as it travels, and the placement to write beside it (None: inline);
    ``last``: the writer's last placement and its digest, the patch's base."""
    if len(decision.nodes) <= INLINE_MAX:
        return decision, None
    placement = Placement(decision.nodes, decision.active)
    digest = _digest(placement)
    if digest is None:  # names from Slurm hold no NUL: a placement not to be split
        return decision, None
    text = encode(placement)
    wire = dataclasses.replace(decision, nodes=(), active=(), roster=digest)
    if last is not None and last[0] != digest:  # the same placement: every holder has it
        wire = _with_patch(wire, placement, last)
    return wire, Written(digest, placement, text)


def placement(expected: str, raw: bytes) -> Placement:
    """The placement in ``raw`` when it is the one of digest ``expected``; :class:`Malformed`
    otherwise (an older one, or none: the wait goes on until node 0 writes it again)."""
    found = decode(Placement, raw)
    if _digest(found) != expected:
        raise Malformed("the placement is not the one the decision names")
    return found


def _spliced(old: Sequence[T], head: int, tail: int, between: Sequence[T]) -> tuple[T, ...] | None:
    if head < 0 or tail < 0 or head + tail > len(old):
        return None
    return (*old[:head], *between, *old[len(old) - tail :])


def patched(wire: Decision, base: Placement) -> Placement | None:
    """The placement ``wire`` names, made from ``base`` (the one of digest
    ``wire.roster_from``) by its patch; None when it does not come out as the digest says
    (then it is read)."""
    if len(wire.roster_cut) != 4:
        return None
    nodes_head, nodes_tail, active_head, active_tail = wire.roster_cut
    nodes = _spliced(base.nodes, nodes_head, nodes_tail, wire.roster_nodes)
    active = _spliced(base.active, active_head, active_tail, wire.roster_active)
    if nodes is None or active is None:
        return None
    made = Placement(nodes, active)
    return made if _digest(made) == wire.roster else None


def joined(wire: Decision, found: Placement) -> Decision:
    """The decision as node 0 made it."""
    return dataclasses.replace(
        wire,
        nodes=found.nodes,
        active=found.active,
        roster="",
        roster_from="",
        roster_cut=(),
        roster_nodes=(),
        roster_active=(),
    )
