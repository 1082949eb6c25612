"""A peer's wait for node 0's decision after its join, paced so that every launcher of a
big job waiting at once costs node 0 a bounded number of requests a second (issue 45).

Apart from the client because it is a policy over the client's verbs (a wait, a rejoin),
with the one rule of how often a waiting launcher comes back to node 0 (:func:`wait_slice`).
"""

from __future__ import annotations

import time

from slurm_ft.launch.rendezvous.beatperiod import look_period
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.connection import Abort
from slurm_ft.launch.rendezvous.protocol import Decision
from slurm_ft.launch.rendezvous.reads import WAIT_CHUNK_S, Pace

REJOIN_S = 1.0  # how often a launcher waiting for the decision writes its join record again


def wait_slice(num_nodes: int) -> float:
    """How long each store wait of a launcher that waits with the whole job (for a decision,
    for the result) may be. Where node 0 serves every launcher's look each
    :data:`REJOIN_S` (up to 513 nodes, as the heart-beat), 0.2 s on the caller's thread,
    as always; past that the stretched look period, on a thread of its own
    (``longwaits.LongWaits``): 8 s at 4,096 nodes, where 0.2 s slices were 20,000 waits a
    second at node 0. Small jobs keep the caller's thread because the thread's hand-over
    is what a wait on it adds: nothing on a node of its own, but a 256-launcher
    simulation of 32 launchers a process took 2-3 times as long a cycle with it."""
    every = look_period(num_nodes, REJOIN_S)
    return every if every > REJOIN_S else WAIT_CHUNK_S


def await_decision(
    client: Client, i: int, num_nodes: int, *, deadline: float, abort: Abort, signal_fd: int | None = None
) -> Decision | None:
    """Node 0's decision of cycle i; None at ``deadline``.

    Store waits of :func:`wait_slice`, and every :data:`REJOIN_S` the join record written
    again should someone have overwritten or deleted it (node 0 would wait for it in
    vain), stretched with the job's size (``beatperiod.look_period``: one of each every
    8 s at 4,096 nodes). The decision wakes every waiter at once whatever the period, and
    a signal is noticed at once through ``signal_fd`` (the signal box's), else within
    ``longwaits.ABORT_LOOK_S``. Each wait comes first, the read after it (``read_first``
    False): node 0 decides only once it saw this launcher's join, so a decision that is
    there already is rare, and the wait on it returns at once."""
    every = look_period(num_nodes, REJOIN_S)
    pace = Pace(wait_slice(num_nodes), signal_fd, read_first=False)
    while True:
        until = min(deadline, time.monotonic() + every)
        decision = client.wait_decision(i, deadline=until, abort=abort, pace=pace)
        if decision is not None or time.monotonic() >= deadline:
            return decision
        client.reassert()
