"""The report's part of snapshots: the cycles whose ranks resumed from one (kept work,
:func:`timesplit.split_cycle` keeps it), the timeline's restores, and the lost work split
at the newest snapshot the nodes held."""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter, defaultdict

from slurm_ft.records import NodeSnapshots, RankResume, SnapshotSource
from slurm_ft.report.views import CycleView, Report, SnapshotRestore


def snapshot_restores(snaps: list[NodeSnapshots], cycles: list[CycleView]) -> list[SnapshotRestore]:
    """Every cycle in which some rank resumed from a snapshot, with its sources. A node
    writes where its ranks resumed from at the cycle's end: a node lost in the cycle
    writes nothing, and its ranks are counted as ``not recorded`` (of the cycle's world
    size), never left out as if there were none."""
    starts = {c.cycle: c.start for c in cycles}
    sizes = {c.cycle: c.world_size for c in cycles}
    by_cycle: dict[int, list[RankResume]] = defaultdict(list)
    for rec in snaps:
        by_cycle[rec.cycle].extend(RankResume.from_json(r) for r in rec.resumed)
    out = []
    for cycle, ranks in sorted(by_cycle.items()):
        steps = [r.step for r in ranks if r.source is not SnapshotSource.NONE and r.step is not None]
        if not steps or cycle not in starts:
            continue
        counts = Counter(r.source.value for r in ranks)
        sources = tuple(f"{source} x{n}" for source, n in sorted(counts.items()))
        missing = (sizes.get(cycle) or 0) - len(ranks)
        if missing > 0:
            sources = (*sources, f"not recorded x{missing}")
        out.append(SnapshotRestore(cycle, starts[cycle], sources, min(steps)))
    return out


def resumed_steps(snaps: list[NodeSnapshots]) -> dict[int, int]:
    """Each cycle in which every rank resumed from a snapshot, and the step: the work up to
    it was kept. A cycle with a rank that resumed from nothing (its trainer's checkpoint)
    is not in it, nor is a record that cannot be read."""
    ranks: dict[int, list[RankResume]] = defaultdict(list)
    for rec in snaps:
        try:
            ranks[rec.cycle].extend(RankResume.from_json(r) for r in rec.resumed)
        except (TypeError, ValueError, AttributeError):
            ranks[rec.cycle].append(RankResume(-1, SnapshotSource.NONE))
    out = {}
    for cycle, resumes in ranks.items():
        steps = [r.step for r in resumes if r.source is not SnapshotSource.NONE]
        if resumes and len(steps) == len(resumes) and all(step is not None for step in steps):
            out[cycle] = min(step for step in steps if step is not None)
    return out


def snapshot_floors(snaps: list[NodeSnapshots], cycles: list[CycleView]) -> dict[int, int]:
    """Each cycle's floor for node 0's snapshot readings: node 0's newest snapshot when the
    cycle before it ended (see :attr:`views.CycleView.snapshot_floor`)."""
    node0 = {
        rec.cycle: rec.newest_step for rec in snaps if rec.node_rank == 0 and isinstance(rec.newest_step, int)
    }
    ordered = sorted(cycles, key=lambda c: c.start)
    out = {}
    for before, c in itertools.pairwise(ordered):
        step = node0.get(before.cycle)
        if step is not None:
            out[c.cycle] = step
    return out


def held_steps(snaps: list[NodeSnapshots]) -> dict[int, int]:
    """The newest snapshot every node held at each cycle's end (the lowest of the nodes')."""
    held: dict[int, list[int | None]] = defaultdict(list)
    for rec in snaps:
        held[rec.cycle].append(rec.newest_step if isinstance(rec.newest_step, int) else None)
    return {
        cycle: min(s for s in steps if s is not None)
        for cycle, steps in held.items()
        if steps and all(s is not None for s in steps)
    }


def lost_since_snapshot(lost_s: float, kept_step: int | None, held: int | None, pace: float | None) -> float:
    """Of the work lost after the step the job kept, the part after the newest snapshot
    the nodes held (the part before it was held by a snapshot the job did not resume
    from: a lost node without a replica, a refused placement). Pure."""
    if held is None or kept_step is None or pace is None or held <= kept_step:
        return lost_s
    return max(0.0, lost_s - (held - kept_step) * pace)


def with_snapshot_split(report: Report, snaps: list[NodeSnapshots], pace: float | None) -> Report:
    """The lost work split at the snapshots, and the restores for the timeline (the kept
    work itself is in the cycles' splits: :func:`split_cycle`)."""
    if not snaps:
        return report
    restores = snapshot_restores(snaps, list(report.cycles))
    held = held_steps(snaps)
    total = 0.0
    for c in report.cycles:
        if c.split is not None and c.split.lost_s > 0:
            total += lost_since_snapshot(c.split.lost_s, c.split.kept_step, held.get(c.cycle), pace)
    faults = []
    cycles_by_number = {c.cycle: c for c in report.cycles}
    for f in report.faults:
        hit = cycles_by_number.get(f.cycle) if f.cycle is not None else None
        if f.lost_work_s is None or hit is None or hit.split is None:
            faults.append(f)
            continue
        since = lost_since_snapshot(f.lost_work_s, hit.split.kept_step, held.get(hit.cycle), pace)
        faults.append(dataclasses.replace(f, lost_since_snapshot_s=since))
    totals = dataclasses.replace(report.totals, lost_since_snapshot_s=total)
    return dataclasses.replace(report, totals=totals, faults=tuple(faults), snapshot_restores=tuple(restores))
