"""``--snapshot-replicas 1``: each node's shards kept in the next node's memory, without
costing the trainer its step rate (issue #44: at most 2 %).

What shapes it:

- **The grid's steps, and between them the newest.** A replica is useful only while its step
  is one every other rank still holds. With a planner (every launcher of a job: node 0's
  service, :mod:`grid`) the pusher keeps and sends the job's candidate step, which every
  node then keeps until a newer one has landed everywhere, so a replica that lags many
  steps is still of a step every rank holds. Until the trainer reaches the candidate, where
  a copy takes less than a step (:class:`Pace`), the newest snapshot goes as well, never
  queued. The slot being sent is held still (:func:`slurm_ft.snapshot.ship.send`): the
  trainer keeps snapshotting into a new file in its place, so a copy that takes many steps
  still lands.
- **The CPU the trainer leaves.** The thread runs at nice 19 (:func:`peer.lowest_priority`),
  as does the receiving end on the next node: where it shares a busy core with the trainer
  it gets at most about 1.4 % of it (the kernel's weights), below the 2 % bound, and on a
  node with idle cores it takes only those.
- **Nothing the trainer waits on.** The slot is read without its key's lock (the trainer's
  snapshot call takes that lock, and must never wait for a transfer); the hold on the slot's
  file, and the link that keeps a candidate, are ones the trainer's writer never waits for.

A node lost meanwhile resumes its ranks from the newest step every rank holds (the plan,
:mod:`sources`): the newest replica where copies keep up, else the candidate or the agreed
step of the grid.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurm_ft.launch.snapshots import grid, peer
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


@dataclass(frozen=True)
class GridAim:
    """Where this node reports its replicated steps (:mod:`grid`): the planner's service,
    the cycle, this node's rank."""

    planner: peer.Address
    epoch: int
    node: int


@dataclass
class Pace:
    """How often the trainer snapshots, as the pusher sees it (a moving average)."""

    step: int | None = None
    at: float = 0.0
    step_s: float | None = None

    def saw(self, step: int | None, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        if step is None or step == self.step:
            return
        if self.step is not None and step > self.step:
            interval = (now - self.at) / (step - self.step)
            self.step_s = interval if self.step_s is None else 0.8 * self.step_s + 0.2 * interval
        self.step, self.at = step, now

    def fits(self, copy_s: float) -> bool:
        """Whether a copy of this long travels within one step (unknown: yes, once, to learn)."""
        return self.step_s is None or copy_s < self.step_s


@dataclass
class Counts:
    """What the pusher did, for the benchmark and the log."""

    kept: int = 0
    superseded: int = 0  # rewritten at the source while sent: dropped, the newer one went next
    failed: int = 0  # the target unreachable, refused or cut
    behind: int = 0  # replicas kept more than one snapshot after the previous one
    copy_s: float = 0.0  # time the kept copies took, end to end (their bytes over it: the copy bandwidth)
    copied_bytes: int = 0


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
        self._grid: GridAim | None = None
        self._epoch: int | None = None  # the cycle whose grid the fields below are of
        self.agreed: int | None = None  # the newest step every node's replicas landed at
        self.candidate: int | None = None  # the step being replicated now
        self._landed: int | None = None  # the candidate this node's replicas landed at
        self._pace = Pace()
        self._caught: tuple[tuple[int, int] | None, set[str]] = (None, set())  # (epoch, candidate), keys kept
        self._copy_s = 0.0  # how long the last copy took
        self._failing: peer.Address | None = None  # the target whose failure was said last
        self._said_behind = False
        self._waiting: socket.socket | None = None  # a report's connection while the planner holds it
        self._lapped: dict[str, int] = {}  # key -> copies superseded in a row since its last replica
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="snapshot-replicas", daemon=True)
        self._thread.start()

    @property
    def native_id(self) -> int | None:
        """The thread's id (its priority is the tests' to check)."""
        return self._thread.native_id

    def aim(self, target: peer.Address | None, grid: GridAim | None = None) -> None:
        """Where replicas go from now on (None: nowhere, e.g. no other active node), and
        where the job's grid of replicated steps is agreed (None: no planner; each key's
        newest is sent)."""
        with self._lock:
            self._target = target
            self._grid = grid

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            waiting = self._waiting
        if waiting is not None:  # a report the planner holds back: no reason to wait for it
            with contextlib.suppress(OSError):
                waiting.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=self.timeout)

    def _opened(self, conn: socket.socket | None) -> None:
        with self._lock:
            self._waiting = conn
        if conn is not None and self._stop.is_set():
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _loop(self) -> None:
        peer.lowest_priority()
        sent: dict[str, int] = {}  # key -> generation of its newest snapshot already replicated
        while not self._stop.wait(self.poll_s):
            with self._lock:
                target, aim = self._target, self._grid
            if target is not None and aim is not None:
                self._push_grid(target, aim, sent)
            elif target is not None:
                self._push_newest(target, sent)

    def _push_grid(self, target: peer.Address, aim: GridAim, sent: dict[str, int]) -> None:
        """One look on the grid: ask the planner for the candidate, keep this node's
        snapshots of it when the trainer writes them, send them, say they landed. Until the
        trainer reaches the candidate, where copies take less than a step, the newest
        snapshots go as before (a lost node then resumes from one step behind, as the
        survivors' two newest still hold it); where they take longer, only candidates go,
        so that none is missed while a copy travels."""
        if aim.epoch != self._epoch:
            self._epoch, self.candidate, self._landed = aim.epoch, None, None
        keys = grid.own_keys(self.area)
        self._pace.saw(max((i.step for key in keys if (i := reader.newest(self.area, key))), default=None))
        c = self.candidate
        if c is None or self._landed == c:
            self._ask(aim, keys)
            return
        if self._caught[0] != (aim.epoch, c):
            self._caught = ((aim.epoch, c), set())
        caught = set()
        for key in keys:
            if key not in self._caught[1]:
                found = grid.catch(self.area, key, c)
                caught.add(found)
                if found is grid.Caught.KEPT:
                    self._caught[1].add(key)
        if grid.Caught.MISSED in caught:
            self._ask(aim, keys, missed=c)
            return
        if not keys or grid.Caught.NOT_YET in caught:
            if keys and self._pace.fits(self._copy_s * len(keys)):
                self._push_newest(target, sent, keep=self.agreed)
            return
        for key in keys:
            info = _candidate(self.area, key, c)
            if info is None:  # removed meanwhile (a plan's trim): caught again at the next look
                self._caught[1].discard(key)
                return
            t0 = time.monotonic()
            try:
                done = peer.push(target, self.secret, info, timeout=self.timeout, keep=self.agreed)
            except (peer.PeerError, OSError) as exc:
                self._failed(target, exc)
                return
            if done is not peer.Pushed.KEPT:
                return
            self._copied(info, time.monotonic() - t0)
        self._kept_again(target)
        self._landed = c
        self._ask(aim, keys, landed=c)

    def _ask(
        self, aim: GridAim, keys: list[str], *, landed: int | None = None, missed: int | None = None
    ) -> None:
        newest = max((i.step for key in keys if (i := reader.newest(self.area, key))), default=None)
        request: dict[str, object] = {
            "epoch": aim.epoch,
            "node": aim.node,
            "newest": newest,
            "landed": landed,
            "missed": missed,
            "knows": [self.agreed, self.candidate],
        }
        try:
            agreed, candidate = peer.report(
                aim.planner, self.secret, request, timeout=self.timeout, opened=self._opened
            )
        except (peer.PeerError, OSError) as exc:
            if not self._stop.is_set():
                self._failed(aim.planner, exc)
            return
        if candidate is None:  # the planner is not on this cycle yet, or no node snapshots yet
            self._stop.wait(grid.WAIT_S / 10)
            return
        if agreed is not None and agreed != self.agreed:
            grid.agree(self.area, keys, agreed)
            self.agreed = agreed
        self.candidate = candidate

    def _copied(self, info: reader.SnapshotInfo, took: float) -> None:
        self._copy_s = took
        self.counts.kept += 1
        self.counts.copy_s += took
        self.counts.copied_bytes += info.size

    def _failed(self, target: peer.Address, exc: Exception) -> None:
        self.counts.failed += 1  # the target gone or its memory full: the next one goes
        if self._failing != target:  # said once per target, not once per snapshot
            self._failing = target
            self.event(f"snapshots: replicas for {target} are not kept: {exc}")

    def _kept_again(self, target: peer.Address) -> None:
        if self._failing == target:
            self._failing = None
            self.event(f"snapshots: replicas for {target} are kept again")

    def _push_newest(self, target: peer.Address, sent: dict[str, int], keep: int | None = None) -> None:
        for key in reader.keys(self.area):
            info = reader.newest(self.area, key)  # read again per key: the newest at this moment
            if info is None or info.replicated or info.header.origin is not layout.Origin.WRITTEN:
                continue  # replicated state needs no replica; a replica here is another node's
            if sent.get(info.key) == info.generation:
                continue
            if self._stop.is_set():
                return
            t0 = time.monotonic()
            try:
                done = peer.push(target, self.secret, info, timeout=self.timeout, keep=keep)
            except (peer.PeerError, OSError) as exc:
                self._failed(target, exc)
                continue
            self._kept_again(target)
            previous = sent.get(info.key)
            if done is peer.Pushed.KEPT:
                self._copied(info, time.monotonic() - t0)
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
                "behind resumes its ranks from the last step whose replicas landed on every node"
            )


def _candidate(area: Path, key: str, step: int) -> reader.SnapshotInfo | None:
    path = layout.kept_paths(area, key)[1]
    sealed = reader.read_header(path)
    if sealed is None or sealed.header.step != step:
        return None
    return reader.SnapshotInfo(key, path, sealed.generation, sealed.header)
