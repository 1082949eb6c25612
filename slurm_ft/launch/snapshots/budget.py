"""How much shared memory a node's snapshots may take: the user's ``--snapshot-memory`` or
a default derived from the node. Pure: the facts are read by the caller
(:func:`slurm_ft.launch.snapshots.node.node_memory`); whether ``/dev/shm`` can hold it now
is :func:`slurm_ft.snapshot.area.space_problem`'s question.

The default is a quarter of the node's memory, and at most half of what ``/dev/shm`` can
hold: a trainer's host memory (data loaders, pinned buffers, the page cache of its
dataset) must stay larger than its snapshots, and ``/dev/shm`` is shared with NCCL's and
the data loaders' own segments.
"""

from __future__ import annotations

from typing import NamedTuple

from slurm_ft.snapshot.area import human

MEMORY_SHARE = 4  # the default: total memory / 4 ...
SHM_SHARE = 2  # ... and at most /dev/shm's size / 2


# NamedTuples, not dataclasses: defined on every launch's start (see workers/env.py).
class NodeMemory(NamedTuple):
    """What the node has, in bytes (None: unknown)."""

    total: int | None
    shm_total: int | None


class Budget(NamedTuple):
    """The node's cap in bytes (0: snapshots off) and the launcher's line about it."""

    limit: int
    line: str


def default_limit(mem: NodeMemory) -> int:
    shares = [n // d for n, d in ((mem.total, MEMORY_SHARE), (mem.shm_total, SHM_SHARE)) if n is not None]
    return min(shares) if shares else 0


def plan(asked: int | None, mem: NodeMemory, shm: str) -> Budget:
    """``asked``: ``--snapshot-memory`` in bytes (None: auto; 0: off)."""
    if asked == 0:
        return Budget(0, "snapshots: off (--snapshot-memory 0)")
    if mem.shm_total is None:
        return Budget(0, f"snapshots: off: no shared memory at {shm}")
    if asked is None:
        limit = default_limit(mem)
        if mem.total is not None and limit == mem.total // MEMORY_SHARE:
            of = f"a quarter of the node's {human(mem.total)}"
        else:
            of = f"half of {shm}'s {human(mem.shm_total)}"
        return Budget(limit, f"snapshots: up to {human(limit)} on this node in {shm} (auto: {of})")
    return Budget(asked, f"snapshots: up to {human(asked)} on this node in {shm} (--snapshot-memory)")
