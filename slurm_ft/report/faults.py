"""What each injected fault cost: the cycle it hit, and its detection, stop, restart,
start-up and lost work (see :class:`views.FaultView`)."""

from __future__ import annotations

import dataclasses

from slurm_ft.records import DrillRecord
from slurm_ft.report.views import CycleView, FaultView


def _hit(d: DrillRecord, cycles: list[CycleView]) -> CycleView | None:
    """The cycle running when the fault was sent: the last to start before it that had not
    ended; else the one the drill aimed at."""
    running = [c for c in cycles if c.start <= d.time and (c.end is None or d.time <= c.end)]
    if running:
        return max(running, key=lambda c: c.start)
    return next((c for c in cycles if c.cycle == d.cycle), None)


def _startup_after(nxt: CycleView | None, drills: list[DrillRecord], d: DrillRecord) -> float | None:
    """The next cycle's start-up: to its first progress; for a cycle that never made any,
    until the next fault or its own end (the rest is the next fault's)."""
    if nxt is None:
        return None
    if nxt.split is not None:
        return nxt.split.startup_s
    if nxt.progressed is not False or nxt.end is None:
        return None
    later = [x.time for x in drills if x.injected and x.time > d.time and nxt.start <= x.time]
    return max(0.0, min([nxt.run_end, *later]) - nxt.start)


def fault_views(drills: list[DrillRecord], cycles: list[CycleView]) -> list[FaultView]:
    """Each injected fault with what it cost (see :class:`FaultView`)."""
    ordered = sorted(cycles, key=lambda c: c.start)
    charged: set[int] = set()
    out: list[FaultView] = []
    for d in sorted(drills, key=lambda d: d.time):
        view = FaultView(d.fault, d.time, d.node, d.rank, d.signal, d.injected, d.problem, None)
        c = _hit(d, ordered) if d.injected else None
        if c is None:
            out.append(view)
            continue
        view = dataclasses.replace(view, cycle=c.cycle)
        if c.cycle in charged or c.end is None or not c.ended_badly:
            out.append(dataclasses.replace(view, absorbed=c.cycle in charged))
            continue
        charged.add(c.cycle)
        after = [n for n in ordered if n.start >= c.end]
        nxt = after[0] if after else None
        detection = max(0.0, c.run_end - d.time)
        stop = c.end - c.run_end
        restart = nxt.start - c.end if nxt is not None else None
        startup = _startup_after(nxt, drills, d)
        lost = max(0.0, min(d.time, c.split.run_end) - c.split.kept_end) if c.split is not None else None
        if c.split is None and c.progressed is False:
            lost = 0.0  # the cycle had made no checkpoint-worthy progress: nothing to lose
        known = [p for p in (detection, stop, restart, startup, lost) if p is not None]
        cost = sum(known) if len(known) == 5 else None
        out.append(
            dataclasses.replace(
                view,
                detection_s=detection,
                stop_s=stop,
                restart_s=restart,
                startup_s=startup,
                lost_work_s=lost,
                cost_s=cost,
                next_cycle=nxt.cycle if nxt is not None else None,
            )
        )
    return out
