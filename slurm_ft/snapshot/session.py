"""The trainer side of snapshots: what ``worker.snapshot`` and ``worker.restore_snapshot``
do once :mod:`slurm_ft.worker` has read the environment.

Refusals never stop training: a snapshot that is not kept returns False and says why in
one line on stderr, once per reason. Replicated state (every rank holds the same, as in
DDP) is written once per node, by local rank 0, and every local rank restores from that
copy; sharded state is written once per rank. A restore takes the newest complete
snapshot of the rank (or of the node's replicated copy) unless the launcher named the
step to resume from, and refuses one taken with another world size or rank.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from slurm_ft import procident
from slurm_ft.snapshot import area, claim, layout, reader, writer

RESTORE_WAIT_S = 30.0  # a leftover worker still writing the slot: wait this long for it
PREFIX = "slurm-ft snapshot: "


@dataclass(frozen=True)
class Placement:
    """Where this worker sits (the torchrun variables) and its cycle."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    cycle: int


@dataclass(frozen=True)
class Settings:
    area: Path
    limit: int | None  # bytes the node's snapshots may hold; None: no cap but the file system's
    placement: Placement
    resume_step: int | None  # the step the launcher chose for every rank; None: the newest
    persisted: Path | None = None  # where the launchers persisted the last attempt's snapshots


@dataclass(frozen=True)
class Loaded:
    step: int
    state: dict[str, object]
    source: str


def _stderr(line: str) -> None:
    print(PREFIX + line, file=sys.stderr, flush=True)


class Session:
    def __init__(self, settings: Settings, say: Callable[[str], None] = _stderr) -> None:
        self.settings = settings
        self._say = say
        self._said: set[str] = set()
        self._writers: dict[str, writer.SlotWriter] = {}
        self._disabled = False
        pid = os.getpid()
        p = settings.placement
        self._me = writer.Identity(
            world_size=p.world_size,
            rank=p.rank,
            node_rank=p.node_rank,
            local_rank=p.local_rank,
            local_world_size=p.local_world_size,
            cycle=p.cycle,
            pid=pid,
            start_ticks=procident.start_ticks(pid),
        )

    def say_once(self, reason: str, line: str) -> None:
        if reason not in self._said:
            self._said.add(reason)
            self._say(line)

    def _usable(self) -> bool:
        if self._disabled:
            return False
        problem = area.private_problem(self.settings.area, os.getuid())
        if problem is not None:
            self._disabled = True
            self.say_once("area", f"{problem}; snapshots are off")
            return False
        return True

    def snapshot(
        self,
        step: int,
        state: Mapping[str, object],
        *,
        replicated: bool,
        on_chunk: writer.ChunkHook | None = None,
    ) -> bool:
        if not self._usable():
            return False
        if replicated and self.settings.placement.local_rank != 0:
            return True  # local rank 0 keeps the node's one copy of the same state
        key = layout.REPLICATED if replicated else layout.rank_key(self.settings.placement.rank)
        slots = self._writers.get(key)
        if slots is None:
            slots = self._writers[key] = writer.SlotWriter(
                self.settings.area, key, self._me, self.settings.limit
            )
        result = slots.write(step, state, on_chunk=on_chunk)
        if result.outcome is writer.Outcome.KEPT:
            return True
        if result.outcome is writer.Outcome.NOT_OWNER:
            self._disabled = True  # a leftover of an older cycle: this process never writes again
            self.say_once(
                "owner", f"step {step} not kept: {result.message}; this worker takes no more snapshots"
            )
        elif result.outcome is not writer.Outcome.BUSY:
            self.say_once(
                result.outcome.name, f"step {step} not kept: {result.message}; training goes on without it"
            )
        return False

    def _writer(self, key: str) -> writer.SlotWriter:
        found = self._writers.get(key)
        if found is None:
            found = self._writers[key] = writer.SlotWriter(
                self.settings.area, key, self._me, self.settings.limit
            )
        return found

    def restore(self, *, copy: bool = True) -> Loaded | None:
        if not self._usable():
            return None
        p = self.settings.placement
        own = layout.rank_key(p.rank)
        me = claim.Claimant(p.cycle, self._me.pid, self._me.start_ticks)
        own_lock = claim.KeyLock.acquire(layout.owner_path(self.settings.area, own), wait_s=RESTORE_WAIT_S)
        if own_lock is None:
            self.say_once("restore-busy", f"not restored: {own} is held by another process")
            return None
        with own_lock:
            if own_lock.claim(me) is not claim.Verdict.MINE:
                self._disabled = True
                self.say_once("owner", f"not restored: {own} belongs to another worker; snapshots are off")
                return None
            shared = p.local_rank != 0  # local rank 0 writes the node's replicated copy
            node_lock = claim.KeyLock.acquire(
                layout.owner_path(self.settings.area, layout.REPLICATED), shared=shared, wait_s=RESTORE_WAIT_S
            )
            if node_lock is None:
                self.say_once(
                    "restore-busy", "not restored: the node's replicated snapshot is held by another process"
                )
                return None
            with node_lock:
                if not shared and node_lock.claim(me) is not claim.Verdict.MINE:
                    self._disabled = True
                    self.say_once(
                        "owner", "not restored: the node's copy belongs to another worker; snapshots are off"
                    )
                    return None
                return self._restore_locked(own, copy)

    def _restore_locked(self, own: str, copy: bool) -> Loaded | None:
        p = self.settings.placement
        area = self.settings.area
        if self.settings.resume_step is not None and self.settings.resume_step < 0:
            return None  # a step below 0: the launcher resumes this cycle from elsewhere
        if self.settings.resume_step is not None:
            # the launcher's choice, from either slot: every rank resumes from the same step
            candidates = [
                c
                for key in (own, layout.REPLICATED)
                for c in reader.complete_slots(area, key)
                if c.step == self.settings.resume_step
            ]
            if not candidates:
                self.say_once(
                    "no-step", f"not restored: no snapshot of step {self.settings.resume_step} here"
                )
                return None
        else:
            # each key's most recent write: its current timeline, even where an abandoned one
            # left a higher step in the other slot (a cycle that resumed from a checkpoint)
            candidates = [
                c for key in (own, layout.REPLICATED) if (c := reader.newest(area, key)) is not None
            ]
        if not candidates:
            return None
        # between the rank's own shard and the node's replicated copy: the newer step
        best = max(candidates, key=lambda c: (c.step, not c.replicated, c.generation))
        where = "the node's replicated copy" if best.replicated else own
        if best.world_size != p.world_size or (not best.replicated and best.rank != p.rank):
            self.say_once(
                "placement",
                f"not restored: {where} of step {best.step} was taken by rank {best.rank} of "
                f"{best.world_size}, this worker is rank {p.rank} of {p.world_size}",
            )
            return None
        # another local rank writes the node's replicated copy: its pages are never lent
        copy = copy or (best.replicated and p.local_rank != 0)
        if not copy:
            self._writer(best.key).lend(best.path)  # a harmless new file if the load fails
        try:
            state = reader.load(best, copy=copy)
        except reader.Torn as exc:
            self.say_once("torn", f"not restored: {where} of step {best.step}: {exc}")
            return None
        return Loaded(best.step, state, best.header.origin.word)


# ----------------------------------------------------------------- added by snaplaunch (#43 part 2)


def restore_persisted(self: Session) -> Loaded | None:
    """The last attempt's snapshot the launchers persisted (``--snapshot-persist-dir``), when
    the node's memory holds none for this rank: a requeued attempt starts with empty memory."""
    if self.settings.persisted is None:
        return None
    from slurm_ft.snapshot import persisted

    p = self.settings.placement
    try:
        found = persisted.load(self.settings.persisted, p.rank, p.world_size)
    except Exception as exc:  # a torn or foreign file: said once, training starts without it
        self.say_once(
            "persisted", f"not restored from {self.settings.persisted}: {type(exc).__name__}: {exc}"
        )
        return None
    return Loaded(found[0], found[1], "persisted") if found is not None else None


def note_restore(self: Session, loaded: Loaded | None) -> None:
    """Where this rank resumed from, for the launcher's records (``restored-rank-RRRRR.json``
    in the area, read after the cycle); a note that cannot be written is left out."""
    import json

    from slurm_ft import atomicfile

    p = self.settings.placement
    doc = {
        "step": loaded.step if loaded is not None else None,
        "source": loaded.source if loaded is not None else "none",
        "cycle": p.cycle,
    }
    try:
        atomicfile.write_bytes(
            self.settings.area / f"restored-rank-{p.rank:05d}.json", json.dumps(doc).encode()
        )
    except OSError:
        pass
