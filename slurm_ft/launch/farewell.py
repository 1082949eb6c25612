"""Node 0's way out: tell the peers the final answer, then keep the store up while they
read it (a peer that finds the store gone cannot tell an ending from a crash)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from slurm_ft.launch import policy
from slurm_ft.launch.books.bookkeeper import RunSummary
from slurm_ft.launch.output.eventlog import EventLog
from slurm_ft.launch.rendezvous.background import BackgroundSet
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import Action, Decision
from slurm_ft.launch.rendezvous.stores import StoreLost, poll_until
from slurm_ft.launch.wayout import Exit

REANNOUNCE_S = 1.0


class Farewell:
    def __init__(
        self,
        num_nodes: int,
        client: Client,
        threads: BackgroundSet,
        events: EventLog,
        clock: Callable[[], float],
        host: int = 0,
    ) -> None:
        self.num_nodes = num_nodes
        self.host = host  # the launcher that hosts the store
        self.client = client
        self.threads = threads
        self.ev = events
        self.clock = clock

    def publish_stop(self, i: int, cycle: int, ending: policy.Ending, nodes: tuple[str, ...]) -> None:
        """Node 0 leaves between cycles: peers that did not see why learn it at their next
        join, with the exit code a departed launcher means for them."""
        verdict = policy.departed(ending.reason)
        stop = Decision(
            Action.STOP,
            cycle,
            reason=verdict.reason,
            exit_code=verdict.exit_code,
            start_time=self.clock(),
            nodes=nodes,
        )
        with contextlib.suppress(StoreLost):
            self.client.publish_decision(i, stop)

    def linger(self, gone: set[int], limit: float) -> None:
        """Keep the store up until every live peer has read the final answer (its sealed
        ack is there). Peers known to be gone (lost, or left on a signal) are not waited
        for. The final answer is written again every ``REANNOUNCE_S`` where someone
        overwrote it meanwhile."""
        n = self.num_nodes
        if n <= 1:
            return
        next_again = time.monotonic() + REANNOUNCE_S

        def all_acked() -> bool | None:
            nonlocal next_again
            expected = sorted((set(range(n)) - {self.host}) - gone - set(self.threads.lost_peers()))
            try:
                if time.monotonic() >= next_again:
                    self.client.reassert()
                    next_again = time.monotonic() + REANNOUNCE_S
                return True if self.client.acked(expected) >= len(expected) else None
            except StoreLost:
                return True

        deadline = time.monotonic() + limit
        if (
            poll_until(all_acked, deadline=deadline, abort=lambda: False, sleep=time.sleep, max_interval=0.1)
            is None
        ):
            self.ev.event(f"not every peer confirmed the final answer within {limit:.0f}s")

    def announce(
        self, way_out: Exit, run: RunSummary, published: int, departed: frozenset[int] = frozenset()
    ) -> None:
        """After the outcome record is written: tell the peers (the final message of the
        way out, or a stop for the next cycle when node 0 leaves on its own), then keep the
        store up while they read it (``departed``: a lost store host, never waited for)."""
        with contextlib.suppress(StoreLost):
            if way_out.announce is not None:
                way_out.announce()
            elif way_out.departing:
                nxt = published + 1
                self.publish_stop(nxt, run.first_cycle + nxt, way_out.ending, run.nodes)
        gone: set[int] = set(departed)
        f = run.last_failure
        if f is not None and not f.retryable and f.node_rank != self.host:
            gone.add(f.node_rank)
        if way_out.linger > 0:
            self.linger(gone, way_out.linger)
