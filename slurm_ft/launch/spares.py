"""Spare nodes: what node 0 remembers across cycles to place the active launchers, and
what a member derives from the placement.

Of a job's N+K launchers (hostlist order), N hold a node rank each cycle and K stand by.
Node 0 keeps, for the attempt, every launcher found bad (lost, missing at a join,
unhealthy, suspect, with a worker it could not kill): a bad launcher is never placed
again in this attempt, with one exception: a suspect one (only a pattern of first
failures, alive and healthy by every check) is placed once more when no healthy spare is
left, rather than end the attempt and wait in the queue for a resubmission without it;
its next first failure retires it for good (a store successor does not inherit the
reprieve: that launcher's streak starts again). Which launcher takes a node rank is
``policy.place``'s decision; this module only gathers its inputs and keeps its result.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from slurm_ft.launch import policy
from slurm_ft.launch.policy import Placement
from slurm_ft.launch.rendezvous.protocol import Decision, JoinInfo
from slurm_ft.launch.workers.layout import Topology
from slurm_ft.records import Failure, FailureKind, node_name


class SpareError(ValueError):
    """Spare nodes or a segment that this job's node count cannot hold."""


class Why(str, Enum):
    """Why a launcher was retired (the values appear in records and logs)."""

    LOST = "lost"  # its heart-beat stopped
    MISSING = "missing"  # it did not join within the join timeout
    UNHEALTHY = "unhealthy"  # a health check failed before the join
    STUCK = "stuck"  # a worker of the last cycle could not be killed
    SUSPECT = "suspect"  # it hosted the first failure of suspect_after cycles in a row


@dataclass(frozen=True)
class Retired:
    """Why a node stopped being a candidate for work."""

    why: Why
    detail: str

    def describe(self) -> str:
        return f"{self.why.value}: {self.detail}" if self.detail else self.why.value


@dataclass
class SpareBook:
    """Node 0's memory of the roles; ``active`` is the placement now in force."""

    launchers: int
    active: tuple[int, ...]
    segment: int = 1
    suspect_after: int = 2
    retired: dict[int, Retired] = field(default_factory=dict)
    charged: int = 0  # replacements beyond each cycle's own restart: they spend the budget too
    _streak: tuple[int, int] | None = None  # (launcher, consecutive cycles its node failed first)
    reprieved: set[int] = field(default_factory=set)  # suspects placed again as the last resort
    _last_reprieve: dict[int, Retired] = field(default_factory=dict)

    @classmethod
    def for_job(cls, launchers: int, spares: int, segment: int, suspect_after: int) -> SpareBook:
        """The first placement: the first ``launchers - spares`` launchers, in hostlist order.
        :class:`SpareError` when the counts cannot be placed (the launcher checks this
        before it starts, as bad input)."""
        if spares >= launchers:
            raise SpareError(
                f"--spare-nodes {spares}: the job has only {launchers} node(s); at least one must be active"
            )
        if launchers % segment or (launchers - spares) % segment:
            raise SpareError(
                f"--segment {segment}: the job's {launchers} node(s) and its {launchers - spares} "
                "active node(s) must both be whole segments"
            )
        return cls(launchers, tuple(range(launchers - spares)), segment, suspect_after)

    def memory(self) -> tuple[tuple[str, ...], int, tuple[int, ...]]:
        """What a successor needs of this book, as a decision carries it (``retired``,
        ``charged``, ``streak``: see ``protocol.Decision``)."""
        retired = tuple(f"{k}:{r.why.value}:{r.detail}" for k, r in sorted(self.retired.items()))
        return retired, self.charged, tuple(self._streak or ())

    @classmethod
    def restored(cls, decision: Decision, launchers: int, segment: int, suspect_after: int) -> SpareBook:
        """A successor's book: the placement and memory of the store host's last decision
        (an entry that is not what :meth:`memory` writes is left out)."""
        book = cls(launchers, decision.active or tuple(range(launchers)), segment, suspect_after)
        for entry in decision.retired:
            k, _, rest = entry.partition(":")
            why, _, detail = rest.partition(":")
            with contextlib.suppress(ValueError):
                if k.isdigit() and int(k) < launchers:
                    book.retired[int(k)] = Retired(Why(why), detail)
        book.charged = max(0, decision.charged)
        if len(decision.streak) == 2:
            book._streak = (decision.streak[0], decision.streak[1])
        return book

    @property
    def spares(self) -> tuple[int, ...]:
        """The spares that could still take a node rank."""
        return tuple(k for k in range(self.launchers) if k not in self.active and k not in self.retired)

    def _retire(self, launcher: int, why: Why, detail: str) -> bool:
        """True when ``launcher`` was not retired before."""
        if launcher in self.retired:
            return False
        self.retired[launcher] = Retired(why, detail)
        return True

    def note_failure(self, failure: Failure | None, *, explained: bool) -> None:
        """After a failed cycle: a node that hosted the first failure ``suspect_after``
        cycles in a row is suspect. A failure ``explained`` by a node found lost or bad at
        this join (a survivor's worker that lost its peer fails first) counts for no one,
        and neither does a hang: one stuck rank stops every rank in its collective, so the
        node whose detector fires first is a race among them, not the culprit (a drill's
        SIGSTOPped rank on node3 was named as rank 0 on node1, which the next crash there
        then made suspect)."""
        if (
            explained
            or failure is None
            or failure.node_rank not in self.active
            or failure.kind is FailureKind.HANG
        ):
            self._streak = None
            return
        k = failure.node_rank
        count = self._streak[1] + 1 if self._streak and self._streak[0] == k else 1
        self._streak = (k, count)
        if k in self.reprieved:
            self._retire(k, Why.SUSPECT, "hosted a first failure again after it was placed as the last spare")
            self._streak = None
        elif count >= self.suspect_after:
            self._retire(k, Why.SUSPECT, f"hosted the first failure of {count} cycles in a row")
            self._streak = None

    def note_roster(self, joins: Sequence[JoinInfo | None], lost: Sequence[int]) -> bool:
        """What node 0 found at this cycle's join; True when an active node was newly
        found bad."""
        new: list[int] = []
        for k in lost:
            if self._retire(k, Why.LOST, "launcher silent (heart-beat lost)"):
                new.append(k)
        for k, info in enumerate(joins):
            if info is None:
                found = self._retire(k, Why.MISSING, "did not join within the join timeout")
            elif info.unhealthy:
                found = self._retire(k, Why.UNHEALTHY, info.unhealthy)
            elif info.stuck:
                found = self._retire(k, Why.STUCK, info.stuck)
            else:
                found = False
            if found:
                new.append(k)
        return any(k in self.active for k in new)

    def plan(self, restart: int) -> Placement:
        """Place this cycle's node ranks; keep the placement when every rank is filled.
        When a node rank is left unfilled, the suspects not yet reprieved are placed too
        (see the module's docstring) before the attempt is given up."""
        self._last_reprieve = {}
        placement = self._place()
        if placement.unfilled:
            back = {k: r for k, r in self.retired.items() if r.why is Why.SUSPECT and k not in self.reprieved}
            for k in back:
                del self.retired[k]
            retry = self._place() if back else placement
            if retry.unfilled:
                self.retired.update(back)
            else:
                placement = retry
                self._last_reprieve = {k: r for k, r in back.items() if k in retry.active}
                self.reprieved.update(self._last_reprieve)
                for k in back.keys() - set(retry.active):  # not needed after all: still suspect
                    self.retired[k] = back[k]
        if not placement.unfilled:
            replaced = len({r.old for r in placement.replacements if r.old in self.retired})
            self.charged += max(0, replaced - (1 if restart > 0 else 0))
            self.active = placement.active
        return placement

    def _place(self) -> Placement:
        bad = {k: r.describe() for k, r in self.retired.items()}
        return policy.place(self.active, self.launchers, bad, self.segment)

    def named(self, names: Sequence[str], why: Sequence[Why]) -> tuple[str, ...]:
        """The names of the launchers retired for one of ``why``, in hostlist order."""
        return tuple(node_name(names, k) for k, r in sorted(self.retired.items()) if r.why in why)

    def gone(
        self, names: Sequence[str], lost_spares: Iterable[int]
    ) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The names of the lost launchers (missing ones and spares lost meanwhile
        included) and of the suspect ones, for the outcome record."""
        lost = {*self.named(names, (Why.LOST, Why.MISSING))} | {node_name(names, k) for k in lost_spares}
        return tuple(sorted(lost)), self.named(names, (Why.SUSPECT,))

    def verdict(
        self,
        restart: int,
        joins: Sequence[JoinInfo | None],
        lost: Sequence[int],
        previous: Failure | None,
        names: Sequence[str],
        max_restarts: int,
    ) -> tuple[policy.Verdict, tuple[str, ...]]:
        """Node 0's join of cycle ``restart``: retire the bad launchers and place the node
        ranks; the policy's verdict on that, and the moves (replacements) as text."""
        explained = self.note_roster(joins, lost)
        if restart > 0:
            self.note_failure(previous, explained=explained)
        placement = self.plan(restart)
        verdict = policy.decide(
            restart=restart + self.charged,
            max_restarts=max_restarts,
            previous_failure=previous,
            unhealthy=[
                (names[k], r.detail)
                for k, r in sorted(self.retired.items())
                if r.why in (Why.UNHEALTHY, Why.STUCK)
            ],
            lost=self.named(names, (Why.LOST,)),
            missing=self.named(names, (Why.MISSING,)),
            suspect=self.named(names, (Why.SUSPECT,)),
            placement=placement,
        )
        moves = [describe(r, names) for r in placement.replacements]
        moves += [  # read after "replacing", as the coordinator logs a move
            f"nobody: {names[k]} ({r.describe()}) takes node rank {placement.active.index(k)} again, "
            "no healthy spare being left"
            for k, r in sorted(self._last_reprieve.items())
        ]
        return verdict, tuple(moves)


def describe(r: policy.Replacement, names: Sequence[str]) -> str:
    return f"node rank {r.slot}: {names[r.old]} -> {names[r.new]} ({r.why})"


def cycle_topology(base: Topology, decision: Decision, launcher: int) -> Topology | None:
    """This launcher's place in the cycle, or None when it stands by as a spare."""
    slot = decision.slot_of(launcher)
    if slot is None:
        return None
    return dataclasses.replace(
        base,
        node_rank=slot,
        num_nodes=len(decision.active) or base.num_nodes,
        master_addr=decision.master_addr or base.master_addr,
    )
