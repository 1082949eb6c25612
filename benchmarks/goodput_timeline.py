"""The goodput benchmark's arithmetic and picture, from the trainer's own step log.

Pure functions: the same for slurm-ft and torchrun, so both runs are measured and drawn
the same way. A step is *kept* when it is in the final checkpoint and was not done again
later; *lost* when it was done again after a restart (recomputed); anything between steps
longer than a few step times is *down* (detecting, stopping, restarting, starting up).
A restart is found by a pause, by a step that goes back, or by a new process writing the
log (rank 0's pid, where the trainer writes it): with snapshots a warm restart resumes at
the step reached, often within a pause of under three steps.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

DOWN_AFTER = 3.0  # a pause longer than this many step times is down time


@dataclass(frozen=True)
class Step:
    t: float
    step: int
    pid: int | None = None  # the process that logged it (rank 0): a new one is a restart


@dataclass(frozen=True)
class Segment:
    kind: str  # kept, lost, down
    t0: float
    t1: float


@dataclass(frozen=True)
class FaultCost:
    fault: str
    where: str
    time: float
    injected: bool
    down_s: float | None  # the fault until training went on again (detect, stop, restart, start up)
    lost_steps: int | None  # steps done again after the restart
    lost_s: float | None
    cost_s: float | None
    # An earlier fault this one came during, when training had not yet gone on again after
    # it (both end at the same restart: this one's down is the rest of that recovery).
    during: str | None = None


def step_time(steps: Sequence[Step]) -> float | None:
    """The undisturbed pace: the median time between consecutive steps of one run."""
    gaps = [b.t - a.t for a, b in itertools.pairwise(steps) if b.step == a.step + 1 and b.t > a.t]
    return statistics.median(gaps) if gaps else None


def segments(steps: Sequence[Step], kept: int, pace: float, start: float, end: float) -> list[Segment]:
    """The run from ``start`` to ``end`` as kept, lost and down stretches."""
    last_done: dict[int, float] = {}
    for s in steps:
        last_done[s.step] = s.t
    out: list[Segment] = []

    def add(kind: str, t0: float, t1: float) -> None:
        t0, t1 = max(t0, start), min(t1, end)
        if t1 <= t0:
            return
        if out and out[-1].kind == kind and t0 - out[-1].t1 < 1e-6:
            out[-1] = Segment(kind, out[-1].t0, t1)
        else:
            out.append(Segment(kind, t0, t1))

    cursor = start
    for s in steps:
        if s.t > end:
            break
        begin = cursor
        if s.t - cursor > DOWN_AFTER * pace:  # a pause, not the jitter of a step's length
            begin = s.t - pace
            add("down", cursor, begin)
        kind = "kept" if s.step <= kept and last_done[s.step] == s.t else "lost"
        add(kind, begin, s.t)
        cursor = max(cursor, s.t)
    add("down", cursor, end)
    return out


def _restarted(prev: Step, s: Step, pace: float) -> bool:
    """Training went on again after a pause, with a step that goes back (a restart quicker
    than a pause, from a checkpoint), or in a new process (a quick restart from a snapshot)."""
    new_process = s.pid is not None and prev.pid is not None and s.pid != prev.pid
    return s.t - prev.t > DOWN_AFTER * pace or s.step <= prev.step or new_process


def fault_costs(
    faults: Sequence[tuple[str, str, float, bool]], steps: Sequence[Step], pace: float
) -> list[FaultCost]:
    """Per fault (name, where, time, injected): how long training stopped after it and how
    many steps had to be done again."""
    out = []
    ends: list[tuple[float, str]] = []  # each measured fault's restart, and its fault
    for name, where, when, injected in faults:
        if not injected:
            out.append(FaultCost(name, where, when, False, None, None, None, None))
            continue
        before = [s for s in steps if s.t <= when]
        after = [s for s in steps if s.t > when]
        resume = None
        for prev, s in zip([*before[-1:], *after], after, strict=False):
            if _restarted(prev, s, pace):
                resume = s
                break
        if resume is None or not before:
            out.append(FaultCost(name, where, when, True, None, None, None, None))
            continue
        reached = max(s.step for s in steps if s.t < resume.t)
        lost = max(0, reached - (resume.step - 1))
        down = resume.t - pace - when
        during = next((what for t, what in ends if t == resume.t), None)
        ends.append((resume.t, name))
        out.append(FaultCost(name, where, when, True, down, lost, lost * pace, down + lost * pace, during))
    return out


COLOURS = {"kept": "#43a047", "lost": "#ef9a9a", "down": "#9e9e9e"}
WIDTH, LEFT, RIGHT, ROW_H, BAR_H = 960, 110, 20, 70, 26


def svg(runs: Sequence[tuple[str, list[Segment], list[FaultCost], float, float]]) -> str:
    """One timeline per run (label, segments, faults, start, end), one above the other, on
    the same time scale (seconds since each run's start)."""
    span = max((end - start for _, _, _, start, end in runs), default=1.0) or 1.0
    plot = WIDTH - LEFT - RIGHT
    height = 40 + ROW_H * len(runs) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        '<text x="10" y="20" font-size="14" font-weight="bold">goodput benchmark: the same faults, '
        "the same trainer</text>",
    ]
    for k, (label, segs, faults, start, _end) in enumerate(runs):
        y = 40 + k * ROW_H + 18

        def x(t: float, start: float = start) -> float:
            return LEFT + (t - start) / span * plot

        out.append(f'<text x="{LEFT - 8}" y="{y + 17}" text-anchor="end">{escape(label)}</text>')
        for seg in segs:
            out.append(
                f'<rect class="segment" data-run="{escape(label)}" data-kind="{seg.kind}" '
                f'x="{x(seg.t0):.1f}" '
                f'y="{y}" width="{max(x(seg.t1) - x(seg.t0), 0.5):.1f}" height="{BAR_H}" '
                f'fill="{COLOURS[seg.kind]}"><title>{seg.kind} {seg.t1 - seg.t0:.1f} s</title></rect>'
            )
        for f in faults:
            fx = x(f.time)
            cost = f"cost {f.cost_s:.1f} s" if f.cost_s is not None else "no cost measured"
            title = f"{f.fault} ({f.where}) at {f.time - start:.0f} s: {cost}"
            fill = "#6a1b9a" if f.injected else "#bdbdbd"
            out.append(
                f'<g class="fault"><title>{escape(title)}</title><path d="M{fx:.1f},{y - 12} '
                f'L{fx + 5:.1f},{y - 6} L{fx:.1f},{y} L{fx - 5:.1f},{y - 6} Z" fill="{fill}"/></g>'
            )
    axis_y = 40 + ROW_H * len(runs) + 4
    out.append(f'<line x1="{LEFT}" y1="{axis_y}" x2="{LEFT + plot}" y2="{axis_y}" stroke="#424242"/>')
    tick = next((t for t in (10, 30, 60, 120, 300, 600, 1200) if span / t <= 10), 1800)
    t = 0.0
    while t <= span + 1e-9:
        tx = LEFT + t / span * plot
        out.append(f'<text x="{tx:.1f}" y="{axis_y + 16}" text-anchor="middle">{t / 60:g} min</text>')
        t += tick
    lx = LEFT
    for kind, fill in COLOURS.items():
        out.append(f'<rect x="{lx}" y="{axis_y + 24}" width="12" height="12" fill="{fill}"/>')
        out.append(f'<text x="{lx + 16}" y="{axis_y + 34}">{kind}</text>')
        lx += 80
    out.append(f'<text x="{lx}" y="{axis_y + 34}">◆ injected fault</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
