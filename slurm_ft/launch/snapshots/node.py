"""The node's snapshot area through a launcher's life: swept and made at start, named in
every worker's environment, kept across cycles (the next cycle's workers restore from
it), read after each cycle for the records, persisted on the way out, removed at the end.

Shared memory outlives every process: an area left by a SIGKILLed launcher would hold its
bytes until the node reboots, so every launcher's start sweeps the user's areas whose
launcher is gone (:func:`slurm_ft.snapshot.area.sweep`), and nothing else.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from slurm_ft import privatefiles, procident, records
from slurm_ft.exitcodes import signal_name
from slurm_ft.launch.snapshots.budget import NodeMemory, plan
from slurm_ft.launch.workers.env import SnapshotEnv
from slurm_ft.records import RankResume, SnapshotSource
from slurm_ft.settingsyntax import parse_snapshot_memory
from slurm_ft.snapshot import area

if TYPE_CHECKING:
    from slurm_ft.launch.context import AgentConfig
    from slurm_ft.launch.policy import Ending
    from slurm_ft.launch.snapshots.persist import Held

SHM = Path("/dev/shm")
MEMINFO = Path("/proc/meminfo")


def node_memory(shm: Path = SHM, meminfo: Path = MEMINFO) -> NodeMemory:
    """The node's memory (``MemTotal``) and the size of its shared memory; None where unknown."""
    total = None
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        total = None
    try:
        shm_total: int | None = area.space(shm).total
    except OSError:
        shm_total = None
    return NodeMemory(total=total, shm_total=shm_total)


class Newest(NamedTuple):
    """The newest complete snapshot the node holds."""

    step: int


class NodeSnapshots:
    """One launcher's snapshot area (``path`` None: snapshots are off on this node)."""

    def __init__(
        self,
        path: Path | None,
        limit: int,
        persist_dir: str | None = None,
        *,
        event: Callable[[str], None] = print,
        persist_hook: str | None = None,
    ) -> None:
        self.path = path
        self.limit = limit
        self.persist_dir = persist_dir
        self.persist_hook = persist_hook
        self.event = event

    @classmethod
    def for_launcher(cls, cfg: AgentConfig, event: Callable[[str], None]) -> NodeSnapshots:
        launch = cfg.settings.launch
        made = cls.start(
            launch.snapshot_memory, launch.snapshot_persist_dir, cfg.job.job_key, cfg.job.node_rank, event
        )
        made.persist_hook = launch.snapshot_persist_hook
        return made

    @property
    def on(self) -> bool:
        return self.path is not None

    @property
    def persists(self) -> bool:
        """Whether the way out persists this node's snapshots (an area and a place to put them)."""
        return self.path is not None and bool(self.persist_dir or self.persist_hook)

    def configure(self, cfg: AgentConfig) -> AgentConfig:
        """``cfg`` with this node's area in every worker's environment (the spawn, the
        standbys and the dry run all build it from ``cfg``)."""
        import dataclasses

        if self.path is None:
            return cfg
        return dataclasses.replace(cfg, snapshots=SnapshotEnv(str(self.path), self.limit, self.persist_dir))

    @classmethod
    def start(
        cls,
        memory_setting: str,
        persist_dir: str | None,
        job_key: str,
        node_rank: int,
        event: Callable[[str], None],
        *,
        root: Path = SHM,
        mem: NodeMemory | None = None,
    ) -> NodeSnapshots:
        """Sweep what ended launchers left, then make this launcher's area; one line says
        the cap, or why the shared memory cannot hold it, or why snapshots are off."""
        uid = os.getuid()
        removed = area.sweep(root, uid)
        if removed:
            event(
                f"snapshots: removed {len(removed)} area(s) left by ended launchers: "
                f"{', '.join(map(str, removed))}"
            )
        budget = plan(parse_snapshot_memory(memory_setting), mem or node_memory(root), str(root))
        if budget.limit <= 0:
            event(budget.line)
            return cls(None, 0, persist_dir, event=event)
        pid = os.getpid()
        try:
            path = area.create(root, uid, f"{job_key}.n{node_rank}", pid, procident.start_ticks(pid))
        except area.AreaError as exc:
            event(f"snapshots: off: {exc}")
            return cls(None, 0, persist_dir, event=event)
        event(area.space_problem(root, budget.limit, area.held(path)) or budget.line)
        return cls(path, budget.limit, persist_dir, event=event)

    def close(self) -> None:
        """At the launcher's end: nothing of the job stays in shared memory."""
        if self.path is not None:
            privatefiles.remove_tree(self.path)

    # ------------------------------------------------------------------ after a cycle

    def used(self) -> bool:
        """Whether any worker touched the area (a slot, a claim, a lock, a restore note):
        a job that never calls ``worker.snapshot`` or ``restore_snapshot`` gets no line,
        no record and no look at the area per cycle (a record per node and cycle is a
        directory all nodes write into: issue #45)."""
        if self.path is None:
            return False
        try:
            with os.scandir(self.path) as found:
                return any(entry.name != area.OWNER_FILE for entry in found)
        except OSError:
            return True  # whatever it is, the books say it

    def resumed(self, ranks: range, cycle: int) -> tuple[list[RankResume], bool]:
        """Where each of ``ranks`` resumed from in ``cycle``, as its restore call said
        (``restored-rank-RRRRR.json`` in the area, written by
        ``worker.restore_snapshot``; a rank that never asked resumed from nothing), and
        whether any rank asked (its workers use snapshots)."""
        out, asked = [], False
        for rank in ranks:
            found = self._restore_note(rank, cycle)
            asked = asked or found is not None
            out.append(found or RankResume(rank, SnapshotSource.NONE))
        return out, asked

    def _restore_note(self, rank: int, cycle: int) -> RankResume | None:
        if self.path is None:
            return None
        try:
            doc = json.loads((self.path / restore_note_name(rank)).read_text(encoding="utf-8"))
            if not isinstance(doc, dict) or doc.get("cycle") != cycle:
                return None
            return RankResume.from_json({**doc, "rank": rank})
        except (OSError, ValueError):
            return None

    def newest(self) -> Newest | None:
        """The newest complete snapshot of any rank on this node (headers only)."""
        if self.path is None or not self.used():
            return None
        from slurm_ft.snapshot import reader

        infos = reader.describe(self.path)
        if not infos:
            return None
        best = max(infos, key=lambda i: i.step)
        return Newest(best.step)

    def forget(self) -> list[str]:
        """After a cycle on the bench: every snapshot here is older than the active nodes'
        (a spare trains nothing), so none may be restored or offered as a common step when
        this node takes a node rank again (a reprieved suspect restored its ring replica of
        rank 1 from 3,400 steps before while rank 0 resumed at the job's step). The active
        nodes fetched what they needed of it at the bench cycle's start. The slots removed."""
        if self.path is None or not self.used():
            return []
        from slurm_ft.launch.snapshots.lostnode import trim
        from slurm_ft.snapshot import reader

        return trim(self.path, list(reader.held_steps(self.path)), None)

    def newest_step(self) -> int | None:
        """The step of the node's newest complete snapshot (read by node rank 0's launcher)."""
        newest = self.newest()
        return newest.step if newest is not None else None

    def cycle_record(
        self, cycle: int, node: str, node_rank: int, run_uuid: str, resumed: list[RankResume]
    ) -> records.NodeSnapshots:
        newest = self.newest()
        return records.NodeSnapshots(
            cycle=cycle,
            node=node,
            node_rank=node_rank,
            run_uuid=run_uuid,
            time=time.time(),
            resumed=[r.to_json() for r in resumed],
            newest_step=newest.step if newest else None,
        )

    @staticmethod
    def resumed_line(rec: records.NodeSnapshots) -> str:
        """The launcher's one line per cycle: where its ranks resumed from, grouped."""
        groups: dict[tuple[str, int | None], list[int]] = {}
        for doc in rec.resumed:
            r = RankResume.from_json(doc)
            groups.setdefault((r.source.value, r.step), []).append(r.rank)
        parts = []
        for (source, step), ranks in sorted(groups.items(), key=lambda kv: min(kv[1])):
            which = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {','.join(map(str, ranks))}"
            parts.append(f"{which} from nothing" if step is None else f"{which} from {source} at step {step}")
        newest = "none" if rec.newest_step is None else f"step {rec.newest_step}"
        resumed = "; ".join(parts) or "no ranks"
        return f"cycle {rec.cycle}: resumed {resumed}; newest snapshot here at its end: {newest}"

    @staticmethod
    def stalled_line(rec: records.NodeSnapshots, asked: bool) -> str | None:
        """When the node's workers use snapshots (``asked``: they called restore) but kept
        none newer than what they resumed from in the cycle: the cap reached, ``/dev/shm``
        full, a refused placement, or a cycle that failed before its first snapshot. The
        workers' own line (``slurm-ft snapshot: ... not kept``) says which."""
        if not asked:
            return None
        steps = [RankResume.from_json(doc).step for doc in rec.resumed]
        base = max((step for step in steps if step is not None), default=None)
        if rec.newest_step is not None and (base is None or rec.newest_step > base):
            return None
        have = "none" if rec.newest_step is None else f"step {rec.newest_step}"
        return (
            f"cycle {rec.cycle}: no new snapshot kept on this node (newest: {have}); "
            "a refusal, if any, is in the workers' stderr (slurm-ft snapshot: ...)"
        )

    # ------------------------------------------------------------------ the way out

    def held(self) -> list[Held]:
        """This node's newest complete snapshots (headers only)."""
        if self.path is None:
            return []
        from slurm_ft.launch.snapshots.persist import Held
        from slurm_ft.snapshot import reader

        return [Held(i.rank, i.step, i.replicated) for i in reader.describe(self.path)]

    def persist(
        self, ending: Ending, timeout: float, cfg: AgentConfig, run_uuid: str
    ) -> records.SnapshotsPersisted | None:
        """Persist what the node holds, said in one line; None when it holds nothing."""
        assert self.path is not None
        held = self.held()
        if not held:
            return None
        from slurm_ft.launch.snapshots import persist as persisting

        why = breakpoint_of(ending)
        done = persisting.persist(
            held, self.path, self.persist_dir, self.persist_hook, timeout, python=cfg.python, cwd=cfg.cwd
        )
        where = self.persist_hook or self.persist_dir
        if done.not_persisted:
            self.event(
                f"snapshots ({why}): {len(done.persisted)} of {len(held)} persisted to {where} in "
                f"{done.took:.1f} s; not persisted: {'; '.join(done.not_persisted)}"
            )
        else:
            self.event(f"snapshots ({why}): {len(held)} persisted to {where} in {done.took:.1f} s")
        return records.SnapshotsPersisted(
            attempt=cfg.job.attempt,
            node=cfg.job.node_name,
            node_rank=cfg.job.node_rank,
            run_uuid=run_uuid,
            time=time.time(),
            why=why,
            persisted=list(done.persisted),
            not_persisted=list(done.not_persisted),
            took=round(done.took, 3),
        )


def restore_note_name(rank: int) -> str:
    return f"restored-rank-{rank:05d}.json"


def breakpoint_of(ending: Ending) -> str:
    """Why the launchers persist: a signal, the job's end, or the attempt's end."""
    if ending.exit_code > 128:
        return f"signal {signal_name(ending.exit_code - 128)}"
    if ending.exit_code == 0:
        return "training finished"
    return f"the attempt ends: {ending.outcome}"
