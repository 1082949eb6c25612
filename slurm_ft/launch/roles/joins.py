"""Node 0's wait for the launchers' joins of a cycle, and who joined as it found them.

Apart from the coordinator because the wait is a loop of its own (a chunk of join records
at a time, the base written again, lost and unhealthy launchers) that ends in one fact,
the :class:`Roster`, which the decision reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from slurm_ft.launch import policy
from slurm_ft.launch.rendezvous.client import Client
from slurm_ft.launch.rendezvous.protocol import JoinInfo
from slurm_ft.launch.rendezvous.stores import poll_until
from slurm_ft.records import Failure, node_name

JOIN_CHUNK = 64  # join records node 0 looks for in one poll
REASSERT_S = 1.0  # how often node 0 writes the run's base again while it waits for the joins


@dataclass(frozen=True)
class Roster:
    """Who joined cycle i, as node 0 found it when the waiting ended."""

    names: tuple[str, ...]
    complete: bool
    missing: tuple[str, ...]
    unhealthy: tuple[tuple[str, str], ...]
    lost: tuple[str, ...]
    joins: tuple[JoinInfo | None, ...] = ()
    lost_ranks: tuple[int, ...] = ()

    @classmethod
    def of(
        cls, infos: Sequence[JoinInfo | None], known: tuple[str, ...], lost_ranks: tuple[int, ...]
    ) -> Roster:
        """The roster from each launcher's join record (None: none); ``known``: every
        node's name from the last complete roster (empty before there was one)."""
        names = tuple(info.node_name if info else node_name(known, k) for k, info in enumerate(infos))
        return cls(
            names=names,
            complete=all(info is not None for info in infos),
            missing=tuple(names[k] for k, info in enumerate(infos) if info is None),
            unhealthy=tuple((info.node_name, info.unhealthy) for info in infos if info and info.unhealthy),
            lost=tuple(node_name(known or names, k) for k in lost_ranks),
            joins=tuple(infos),
            lost_ranks=lost_ranks,
        )

    def verdict(self, restart: int, max_restarts: int, previous: Failure | None) -> policy.Verdict:
        """The policy's verdict on this roster, without spares (see ``SpareBook.verdict``)."""
        return policy.decide(
            restart=restart,
            max_restarts=max_restarts,
            previous_failure=previous,
            unhealthy=self.unhealthy,
            lost=self.lost,
            missing=self.missing,
        )


class JoinRecords:
    """What node 0 read of cycle ``i``'s join records. A sealed record read once stays
    read: someone overwriting it afterwards un-joins no one (a launcher joins a cycle once).

    Node 0's own record (``own``) counts as read from the start, never read back from the
    store: the wait looks for a chunk of records with one ``check`` that needs every one
    of them there at once, and node 0 writes its own again only once a second
    (``REASSERT_S``). Someone who deleted the keys over and over (issue 29's test, every
    0.15 s) left node 0's and a peer's record there together only now and then: 26 s of
    the test's 40 s join timeout on an idle host, past it under load."""

    def __init__(self, client: Client, i: int, n: int, own: JoinInfo | None = None) -> None:
        self.client, self.i, self.n = client, i, n
        self.seen: dict[int, JoinInfo] = {own.node_rank: own} if own is not None else {}

    def take(self, only: Sequence[int] | None = None) -> None:
        """Read the records of ``only`` (every launcher's when None) that were not read yet.
        Only those: the wait's end read every record again, 4,096 sealed ones opened again on
        the way to a 4,096-node job's decision, and each chunk taken made a list of all N."""
        unread = [k for k in (range(self.n) if only is None else only) if k not in self.seen]
        if not unread:
            return
        for k, info in zip(unread, self.client.join_records(self.i, unread), strict=True):
            if info is not None:
                self.seen[k] = info

    def infos(self) -> list[JoinInfo | None]:
        """Each launcher's record; None where none was read."""
        return [self.seen.get(k) for k in range(self.n)]


@dataclass(frozen=True)
class JoinWait:
    """What the wait for cycle ``i``'s joins reads: the store, the job's size, whether
    spares replace lost launchers, the launchers already known gone, the lost peers as
    the peer monitor finds them, and the waiting launcher's own join record."""

    client: Client
    num_nodes: int
    with_spares: bool
    departed: frozenset[int]
    lost_peers: Callable[[], Mapping[int, float]]
    own: JoinInfo | None = None


def gather(
    wait: JoinWait,
    i: int,
    previous: Failure | None,
    known: tuple[str, ...],
    join_timeout: float,
    abort: Callable[[], bool],
    sleep: Callable[[float], None],
) -> Roster:
    """Wait until every launcher joined (or one is unhealthy or lost, or the join
    timeout passed); no wait at all when the previous failure cannot be retried. With
    spares an unhealthy or lost launcher is replaced, so the wait goes on for the others.
    ``known``: every node's name from the last complete roster."""
    client, n, with_spares = wait.client, wait.num_nodes, wait.with_spares
    next_reassert = time.monotonic() + REASSERT_S
    joins = JoinRecords(client, i, n, wait.own)
    unread = list(range(n))  # in rank order; shrinks as records are read (a look is O(unread))

    def settled() -> bool | None:
        nonlocal next_reassert, unread
        if time.monotonic() >= next_reassert:  # the base, should someone have overwritten it
            client.reassert()
            next_reassert = time.monotonic() + REASSERT_S
        lost = {**dict.fromkeys(wait.departed, 0.0), **wait.lost_peers()}
        if lost and not with_spares:
            return True
        # With spares a lost launcher is replaced: every live one must be in the roster
        # (a lost one may still join: it froze and thawed).
        # Looked at JOIN_CHUNK launchers at a time (one check of a few keys, whatever the
        # job's size), chunk after chunk while each is whole: one chunk a look made 4,096
        # joins 64 looks, up to 16 s at the polls' 0.25 s. All that are left are read when
        # the first chunk is not whole and one says it is unhealthy.
        unread = [k for k in unread if k not in joins.seen]
        waiting = [k for k in unread if k not in lost] if lost else unread
        took = False
        for start in range(0, max(len(waiting), 1), JOIN_CHUNK):
            head = waiting[start : start + JOIN_CHUNK]
            if not client.joined(i, head):
                break
            joins.take(head)  # only sealed records count
            took = True
        if not took:
            if with_spares or not client.unhealthy_said(i):
                return None
            joins.take(waiting)
        infos = joins.infos()
        if with_spares:
            return True if all(info is not None or k in lost for k, info in enumerate(infos)) else None
        return True if all(infos) or any(info and info.unhealthy for info in infos) else None

    if previous is None or previous.retryable or (with_spares and policy.replaceable(previous)):
        poll_until(
            settled,
            deadline=time.monotonic() + join_timeout,
            abort=abort,
            sleep=sleep,
            max_interval=0.25,
        )
    lost = {*wait.lost_peers(), *wait.departed}
    joins.take()  # those not read yet: the wait may have ended without them
    return Roster.of(joins.infos(), known, tuple(sorted(lost)))
