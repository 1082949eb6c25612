"""Replicas on a job-wide step grid: a lagging replica still gives every rank one step (#44).

Each rank keeps its two newest snapshots. A replica that lags the trainer by more than
that (large shards, slow copies, a busy node) is of a step no other rank holds any more,
and a node lost then used to cost the job everything since the checkpoint. So replicas
are taken on steps the whole job agrees on, and each node keeps its snapshot of such a
step until a newer one has landed everywhere:

- **The grid.** The planner (node 0's launcher) names a *candidate* step a little ahead of
  the newest step any node reported. Every node's pusher, when its trainer writes that
  step, keeps the snapshot (a link, ``<key>.3.snap``, which the writer never fills again)
  and sends it to its ring successor; then it tells the planner it *landed*.
- **Agreed.** When every active node landed the candidate, it is the *agreed* step: each
  node's link of it becomes ``<key>.2.snap`` (the previous agreed one is freed), and the
  next candidate is named. A receiver never puts a replica in place of the agreed step's
  (:func:`slurm_ft.snapshot.ship.receive`'s ``keep``), so a lost node's shards are always
  on its successor at the agreed step, and every survivor still holds that step: the
  plan (:mod:`sources`) finds it, or the candidate where that landed everywhere it is
  needed, and every rank resumes from one recent step, not from the checkpoint.
- **Missed.** A node whose trainer was past the candidate before it heard of it says so,
  and the planner names a new one further ahead (the lead doubles, up to :data:`MAX_LEAD`;
  each round that completes halves it again, down to :data:`LEAD`).

Cost: one more snapshot per key on its node (the agreed step's, besides the two newest and
the one being sent), outside the node's cap; per node one small authenticated request to
the planner per candidate, which waits there until the round moves on (a long poll, so a
node that waits costs the planner a connection, not a request a second).
"""

from __future__ import annotations

import enum
import fcntl
import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from slurm_ft.snapshot import layout, reader

LEAD = 2  # steps ahead of the newest step reported: the time the nodes take to hear of a candidate
MAX_LEAD = 64
WAIT_S = 5.0  # the longest the planner holds a request while the round does not move


@dataclass(frozen=True)
class Round:
    """The planner's view, one per cycle (``epoch``): the agreed step, the candidate, the
    nodes that landed it, of how many."""

    epoch: int
    nodes: int
    agreed: int | None = None
    candidate: int | None = None
    landed: frozenset[int] = frozenset()
    newest: int | None = None
    lead: int = LEAD

    @property
    def word(self) -> tuple[int | None, int | None]:
        return self.agreed, self.candidate


def reported(r: Round, node: int, newest: int | None, landed: int | None, missed: int | None) -> Round:
    """The round after one node's report (pure): the newest step it has, the candidate it
    landed, or the candidate its trainer passed before it could keep it."""
    seen = max((s for s in (r.newest, newest) if s is not None), default=None)
    r = replace(r, newest=seen)
    if seen is None:
        return r
    if r.candidate is None:
        return replace(r, candidate=seen + r.lead)
    if missed is not None and missed == r.candidate:
        lead = min(2 * r.lead, MAX_LEAD)
        return replace(r, candidate=max(seen, r.candidate) + lead, landed=frozenset(), lead=lead)
    if landed is not None and landed == r.candidate:
        got = r.landed | {node}
        if len(got) < r.nodes:
            return replace(r, landed=got)
        lead = max(LEAD, r.lead // 2)  # a round that completes gives back what misses added
        return replace(
            r, agreed=r.candidate, candidate=max(seen, r.candidate) + lead, landed=frozenset(), lead=lead
        )
    return r


class Coordinator:
    """The planner's side, in its peer service: the round, and replies that wait (up to
    ``wait_s``) until the round differs from what the asking node knows."""

    def __init__(self, wait_s: float = WAIT_S) -> None:
        self.wait_s = wait_s
        self._round: Round | None = None
        self._changed = threading.Condition()

    def reset(self, epoch: int, nodes: int) -> None:
        """A new cycle: its active nodes must each land a step before it is agreed."""
        with self._changed:
            self._round = Round(epoch, nodes)
            self._changed.notify_all()

    def report(
        self,
        epoch: int,
        node: int,
        newest: int | None,
        landed: int | None,
        missed: int | None,
        knows: tuple[int | None, int | None],
    ) -> tuple[int | None, int | None]:
        """(agreed, candidate): at once, or for a node that landed the candidate, once
        they differ from ``knows`` or the wait is over; (None, None) for another cycle's
        report (the node asks again)."""
        with self._changed:
            if self._round is None or self._round.epoch != epoch:
                return None, None
            before = self._round
            self._round = reported(before, node, newest, landed, missed)
            if self._round != before:
                self._changed.notify_all()
            if landed is not None:  # a node that landed the candidate waits for the others
                self._changed.wait_for(
                    lambda: self._round is None or self._round.epoch != epoch or self._round.word != knows,
                    timeout=self.wait_s,
                )
            if self._round is None or self._round.epoch != epoch:
                return None, None
            return self._round.word


# ------------------------------------------------------------------ a node's kept files


def own_keys(area: Path) -> list[str]:
    """The keys this node's trainer writes (shards: replicated state needs no replica, and
    a replica here is another node's)."""
    out = []
    for key in reader.keys(area):
        info = reader.newest(area, key)
        if info is not None and not info.replicated and info.header.origin is layout.Origin.WRITTEN:
            out.append(key)
    return out


class Caught(enum.Enum):
    """What catching a key's candidate found."""

    KEPT = "kept"
    NOT_YET = "not yet"
    MISSED = "missed"


def catch(area: Path, key: str, step: int) -> Caught:
    """Keep ``key``'s snapshot of ``step`` as its candidate link (``.3``): :data:`Caught.KEPT`
    when it is now, :data:`Caught.NOT_YET` when the trainer has not written it,
    :data:`Caught.MISSED` when it wrote later steps and this one is gone. Always from the
    trainer's own slots: a ``.3`` of the same step left by an earlier cycle may be of
    another timeline (a cycle that resumed from an older step and came back to it)."""
    candidate = layout.kept_paths(area, key)[1]
    slots = [i for i in reader.complete_slots(area, key) if i.path in layout.slot_paths(area, key)]
    for info in slots:
        if info.step == step and _link(info, candidate):
            return Caught.KEPT
    if any(i.step > step for i in slots) and not any(i.step == step for i in slots):
        return Caught.MISSED
    return Caught.NOT_YET


def _link(info: reader.SnapshotInfo, to: Path) -> bool:
    """Link the slot's file under ``to``, held still meanwhile (the writer fills no file a
    sender holds, and takes a new one in place of a linked one); False when the trainer
    is filling it or has put another file there."""
    try:
        fd = os.open(info.path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if layout.decode(os.pread(fd, layout.HEADER_SIZE, 0)) != layout.Sealed(info.header, info.generation):
            return False
        temporary = to.with_name(to.name + ".new")
        temporary.unlink(missing_ok=True)
        os.link(info.path, temporary)
        if os.stat(temporary).st_ino != os.fstat(fd).st_ino:  # the writer put a new file there meanwhile
            temporary.unlink()
            return False
        os.replace(temporary, to)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def agree(area: Path, keys: list[str], step: int) -> None:
    """``step`` landed on every node: each key's candidate link of it becomes its kept one
    (the previous kept step's file is freed with its last name)."""
    for key in keys:
        kept, candidate = layout.kept_paths(area, key)
        had = reader.read_header(candidate)
        if had is not None and had.header.step == step:
            try:
                os.replace(candidate, kept)
            except OSError:
                continue
