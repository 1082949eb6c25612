"""``--snapshot-replicas 1``: each node's newest shards kept in the next node's memory,
without costing the trainer its step rate (issue #44: at most 2 %).

What shapes it:

- **Only the newest, and it lands.** A replica is useful only while its step is one every
  other rank still holds, so the pusher sends each key's newest snapshot and never queues:
  after each transfer it takes whatever is newest then. The slot being sent is held still
  (:func:`slurm_ft.snapshot.ship.send`): the trainer keeps snapshotting into a new file in
  its place, so a copy that takes many steps still lands (before, each such copy was superseded mid-way
  and, from 16 MiB per step on the benchmark's machine, no replica ever landed).
- **The CPU the trainer leaves.** The thread runs at nice 19 (:func:`peer.lowest_priority`),
  as does the receiving end on the next node: where it shares a busy core with the trainer
  it gets at most about 1.4 % of it (the kernel's weights), below the 2 % bound, and on a
  node with idle cores it takes only those.
- **Nothing the trainer waits on.** The slot is read without its key's lock (the trainer's
  snapshot call takes that lock, and must never wait for a transfer); the hold on the slot's
  file is one the trainer's writer never waits for either.

So a replica lags its snapshot by the time one transfer takes (plus the poll): one snapshot
behind while a transfer takes less than the interval between snapshots; when it takes
longer, a replica lands every transfer, of the step that was newest when it left. A node
lost meanwhile resumes its ranks from the newest step every rank holds (the plan,
:mod:`sources`), or from the checkpoint when the replica's step is gone everywhere else.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurm_ft.launch.snapshots import peer
from slurm_ft.snapshot import layout, reader

POLL_S = 0.05  # a new snapshot's replica leaves within this once the previous one is done
TIMEOUT_S = 30.0
LAPPED = 3  # copies of a key superseded in a row: the trainer rewrites faster than a copy travels


def behind(done: peer.Pushed, previous: int | None, generation: int, lapped: int) -> bool:
    """Whether this push shows replicas falling behind the trainer: a replica kept two
    snapshots or more after the key's previous one (``previous``, ``generation``: the
    slots' generations, one per snapshot), or the :data:`LAPPED`-th copy in a row
    superseded in flight. Either way a node lost meanwhile would have left a replica of a
    step no other rank holds any more."""
    if done is peer.Pushed.KEPT:
        return previous is not None and generation - previous > 2
    return lapped == LAPPED


@dataclass
class Counts:
    """What the pusher did, for the benchmark and the log."""

    kept: int = 0
    superseded: int = 0  # rewritten at the source while sent: dropped, the newer one went next
    failed: int = 0  # the target unreachable, refused or cut
    behind: int = 0  # replicas kept more than one snapshot after the previous one


class ReplicaPusher:
    """One launcher's pusher: a thread that sends each new snapshot of this node's shards
    to the ring's next node (its address set each cycle by :meth:`aim`)."""

    def __init__(
        self,
        area: Path,
        secret: bytes,
        *,
        poll_s: float = POLL_S,
        timeout: float = TIMEOUT_S,
        event: Callable[[str], None] = print,
    ) -> None:
        self.area = area
        self.secret = secret
        self.poll_s = poll_s
        self.timeout = timeout
        self.event = event
        self.counts = Counts()
        self._target: peer.Address | None = None
        self._failing: peer.Address | None = None  # the target whose failure was said last
        self._said_behind = False
        self._lapped: dict[str, int] = {}  # key -> copies superseded in a row since its last replica
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="snapshot-replicas", daemon=True)
        self._thread.start()

    @property
    def native_id(self) -> int | None:
        """The thread's id (its priority is the tests' to check)."""
        return self._thread.native_id

    def aim(self, target: peer.Address | None) -> None:
        """Where replicas go from now on (None: nowhere, e.g. no other active node)."""
        with self._lock:
            self._target = target

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.timeout)

    def _loop(self) -> None:
        peer.lowest_priority()
        sent: dict[str, int] = {}  # key -> generation of its newest snapshot already replicated
        while not self._stop.wait(self.poll_s):
            with self._lock:
                target = self._target
            if target is not None:
                self._push_newest(target, sent)

    def _push_newest(self, target: peer.Address, sent: dict[str, int]) -> None:
        for key in reader.keys(self.area):
            info = reader.newest(self.area, key)  # read again per key: the newest at this moment
            if info is None or info.replicated or info.header.origin is not layout.Origin.WRITTEN:
                continue  # replicated state needs no replica; a replica here is another node's
            if sent.get(info.key) == info.generation:
                continue
            if self._stop.is_set():
                return
            try:
                done = peer.push(target, self.secret, info, timeout=self.timeout)
            except (peer.PeerError, OSError) as exc:
                self.counts.failed += 1  # the target gone or its memory full: the next one goes
                if self._failing != target:  # said once per target, not once per snapshot
                    self._failing = target
                    self.event(f"snapshots: replicas for {target} are not kept: {exc}")
                continue
            if self._failing == target:
                self._failing = None
                self.event(f"snapshots: replicas for {target} are kept again")
            previous = sent.get(info.key)
            if done is peer.Pushed.KEPT:
                self.counts.kept += 1
                self._lapped.pop(info.key, None)
                sent[info.key] = info.generation
            else:
                self.counts.superseded += 1
                self._lapped[info.key] = self._lapped.get(info.key, 0) + 1
            if behind(done, previous, info.generation, self._lapped.get(info.key, 0)):
                self._fell_behind(info)

    def _fell_behind(self, info: reader.SnapshotInfo) -> None:
        """Said once: a replica must travel within the interval between two snapshots
        (snapshot less often, or give the node's launcher CPU or link)."""
        self.counts.behind += 1
        if not self._said_behind:
            self._said_behind = True
            self.event(
                f"snapshots: replicas fall behind the trainer ({info.key} at step {info.step}: a copy "
                "takes longer than the interval between two snapshots); a node lost while they are "
                "behind resumes its ranks from the newest step all hold, or from the checkpoint"
            )
