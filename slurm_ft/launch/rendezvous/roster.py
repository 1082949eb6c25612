"""A big job's decision names its placement by a digest; the placement (every node's name,
the launcher of each node rank) goes under a key of its own, which a launcher reads only
when the digest is new to it (issue 45).

Every launcher reads every decision, and a decision named every node (about 15 bytes each)
and each node rank's launcher (about 5). Node 0 therefore sent N decisions of 20 N bytes
each cycle: 295 MB through the store's one thread at 4,096 nodes, 4.9 GB at 16,384; and
each launcher decoded both lists every cycle, 0.39 ms of its CPU at 4,096 nodes
(``benchmarks.restart_cost``), which the scale harness's 4,095 launchers pay on two cores.
The placement changes only when a spare replaces a node, so past :data:`INLINE_MAX` nodes
node 0 writes it beside each decision (one value, one write) and the decision names its
digest: a launcher that read that placement before takes it from memory, else it reads it
(sealed as every value) and checks it against the digest. Pure: the client does the I/O.
"""

from __future__ import annotations

import dataclasses

from slurm_ft.launch.rendezvous.protocol import Decision, Malformed, Placement, decode, encode

INLINE_MAX = 64  # decisions of up to this many nodes carry their placement themselves, as before


def _digest(text: bytes) -> str:
    """hashlib is imported on first use (as the sealer's): only a job of more than 64 nodes
    digests, and a single node's launcher should not pay for it at start-up."""
    import hashlib

    return hashlib.sha256(text).hexdigest()[:32]


def split(decision: Decision) -> tuple[Decision, str | None]:
    """The decision as it travels, and the placement to write beside it (None: inline)."""
    if len(decision.nodes) <= INLINE_MAX:
        return decision, None
    text = encode(Placement(decision.nodes, decision.active))
    wire = dataclasses.replace(decision, nodes=(), active=(), roster=_digest(text.encode()))
    return wire, text


def placement(expected: str, raw: bytes) -> Placement:
    """The placement in ``raw`` when it is the one of digest ``expected``; :class:`Malformed`
    otherwise (an older one, or none: the wait goes on until node 0 writes it again)."""
    if _digest(raw) != expected:
        raise Malformed("the placement is not the one the decision names")
    return decode(Placement, raw)


def joined(wire: Decision, found: Placement) -> Decision:
    """The decision as node 0 made it."""
    return dataclasses.replace(wire, nodes=found.nodes, active=found.active, roster="")
