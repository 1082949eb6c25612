"""The scale harness's peer processes each on one core, in turn over the cores it may use
(``benchmarks.scale.peer_cores``): spread over two, the hand-overs of a packed process's
interpreter lock crossed cores and took a third of the survivors' CPU in a succession."""

from __future__ import annotations

import os
from collections import Counter

from benchmarks.scale import peer_cores


def test_each_peer_process_runs_on_one_core_and_the_cores_take_turns() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    processes = 2 * len(allowed) + 1
    cores = peer_cores(processes, spread=False)
    assert len(cores) == processes
    assert set(cores) == set(allowed)  # every core the harness may use, and no other
    uses = Counter(cores)
    assert max(uses.values()) - min(uses.values()) <= 1  # in turn: none idle while another doubles
    assert cores[: len(allowed)] == allowed


def test_spread_leaves_every_peer_process_to_the_scheduler() -> None:
    assert peer_cores(3, spread=True) == [None, None, None]
