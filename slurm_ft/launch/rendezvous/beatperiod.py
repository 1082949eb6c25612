"""How often peers heart-beat, how often node 0 looks, and when silence means lost, for a
job of N nodes.

Node 0's store serves every peer's beat, and every key of node 0's look at all the beats,
on its one event-loop thread, so node 0's steady CPU is linear in both: with every peer
beating and node 0 looking each second, 9.8 % of a core for 4,096 nodes
(docs/design/scale.md), a quarter of it the looks. A budget caps both: past
:data:`NODE0_BEATS_PER_S` peers, each peer beats less often and node 0 reads the beats at
one wake of its monitor in several (it still wakes each configured interval: its hang
learning samples there), so node 0's load stays flat in N, while a job of up to
:data:`NODE0_BEATS_PER_S` + 1 nodes beats and looks exactly as configured.

The timeout grows by what the beat and look periods grew, no more: a beat seen late by a
look lags by at most those two, and the configured pair's slack (timeout less two
intervals, 4 s by default) is how long a beat may stall before node 0 counts its peer
lost; that stays what it was. A peer, which has no look to wait for, gets more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Beats, and keys of node 0's looks, node 0's store serves a second at most (each): about
# 21 and 7 us of node 0's CPU each, so 1.4 % of a core (1.3-1.4 % measured at 4,096 nodes
# with the beats in groups, the shared 2-core machine of docs/benchmarks.md#scale): under
# the 2 % goal.
NODE0_BEATS_PER_S = 512
# Peers whose beats fall in the same second of a period beat at its start, together
# (:func:`next_beat_in`).
BEAT_GROUP_S = 1.0


@dataclass(frozen=True)
class BeatPeriod:
    """``interval``: a peer's beat period; ``timeout``: the silence after which a peer
    counts the store host lost, or node 0 a peer; ``look_every``: node 0 reads every
    peer's beat at one in this many of its monitor's wakes (one each configured interval)."""

    interval: float
    timeout: float
    look_every: int


def look_period(num_nodes: int, every: float) -> float:
    """How often each peer of a job of ``num_nodes`` launchers comes back to node 0's store
    for one recurring request (a beat; a store wait that times out, or a join record
    written again, while it waits for a key): ``every`` as configured, stretched so that
    node 0 serves at most :data:`NODE0_BEATS_PER_S` of them a second. The one rule for
    every such loop: a loop that kept its own period would make node 0's load grow with
    N again (a wait in 0.2 s slices was 20,000 requests a second at 4,096 nodes)."""
    return max(every, max(0, num_nodes - 1) / NODE0_BEATS_PER_S)


def beat_period(num_nodes: int, interval: float, timeout: float) -> BeatPeriod:
    """The configured ``interval`` and ``timeout`` stretched for ``num_nodes`` launchers
    so that node 0 serves at most :data:`NODE0_BEATS_PER_S` beats and reads as many beat
    keys a second."""
    stretched = look_period(num_nodes, interval)
    look_every = max(1, math.ceil(stretched / interval - 1e-9))
    grown = (stretched - interval) + (look_every - 1) * interval
    return BeatPeriod(interval=stretched, timeout=timeout + grown, look_every=look_every)


def next_beat_in(wall_now: float, period: float, phase: float) -> float:
    """Seconds from ``wall_now`` (the wall clock, which a cluster's nodes share) to a
    launcher's next beat, in (0, period]. ``phase`` (its node rank over the job's nodes)
    places it in one second of each period of the wall clock, and it beats at that
    second's start, with every other launcher of the same second: node 0 serves a group of
    at most :data:`NODE0_BEATS_PER_S` beats each second.

    Each peer used to beat a period after its last beat, so beats kept the phase of the
    job's start, when every launcher connects within a few seconds: at 4,096 nodes all
    4,095 beats of an 8 s period came within 4 s, twice the budget a second, then nothing.
    Spread one by one over the period, each beat cost node 0's store a wake of its thread
    of its own (1.78-2.01 % of a core at 4,096 nodes against 1.65-1.73 % with the bursts);
    in groups its loop takes a second's beats in one pass (1.35 %). A beat never drifts by
    its own latency, and a wall clock that jumps only moves the next slot: the wait is
    never longer than a period."""
    offset = math.floor(phase * period / BEAT_GROUP_S) * BEAT_GROUP_S
    into = (wall_now - offset) % period
    return period - into
