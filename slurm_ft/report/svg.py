"""The report as a picture: attempts and cycles on a time axis, written as plain SVG.

No plotting library: a few dozen elements are easier to write than to configure, the file
opens in any browser, and it stays small enough to commit (the README shows one). Every
cycle is one ``<rect class="cycle" data-cycle=N data-outcome=...>`` and every attempt one
``<rect class="attempt">``, so tools and tests can read the picture back; each carries a
``<title>`` that a browser shows on hover.

A queue wait of hours next to cycles of seconds would squeeze the cycles to nothing, so a
gap between attempts longer than a quarter of the wall clock is drawn at a fixed width
with a break mark and its true length written on it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from html import escape

from slurm_ft.report.text import goodput_text, seconds, total_rows, when
from slurm_ft.report.views import AttemptView, CycleView, Report

WIDTH = 960
LEFT = 80
RIGHT = 24
PLOT = WIDTH - LEFT - RIGHT
ATTEMPT_Y, ATTEMPT_H = 44, 22
CYCLE_Y, CYCLE_H = 80, 30
AXIS_Y = 128
COMPRESS_ABOVE = 0.25  # share of the wall clock above which a gap is drawn broken
COMPRESSED_W = 0.07 * PLOT
MIN_BAR = 2.0

COLOURS = {
    "succeeded": "#2e7d32",
    "finished": "#2e7d32",
    "failed": "#c62828",
    "restarts-exhausted": "#c62828",
    "no-progress": "#8e0000",
    "lost": "#6a1b9a",
    "unhealthy": "#ad1457",
    "signalled": "#ef8f00",
    "running": "#757575",
}
OTHER = "#757575"
# Inside a cycle cut by timed readings (views.CycleSplit); the outcome stays as a band on top.
PARTS = {
    "startup": ("#90a4ae", "start-up"),
    "kept": ("#43a047", "kept training"),
    "lost": ("#ef9a9a", "lost work"),
    "stopping": ("#5d4037", "stopping"),
}
OUTCOME_BAND = 6
FONT = 'font-family="DejaVu Sans, Liberation Sans, Arial, sans-serif"'


def colour(outcome: str) -> str:
    if outcome.startswith("signal"):
        return COLOURS["signalled"]
    return COLOURS.get(outcome, OTHER)


@dataclass(frozen=True)
class _Piece:
    t0: float
    t1: float
    x0: float
    x1: float


class Scale:
    """Time -> x, linear except for long gaps between attempts, which get a fixed width."""

    def __init__(self, start: float, end: float, gaps: list[tuple[float, float]]) -> None:
        span = max(end - start, 1e-9)
        broken = [(a, b) for a, b in gaps if b - a > COMPRESS_ABOVE * span]
        linear = span - sum(b - a for a, b in broken)
        per_s = (PLOT - COMPRESSED_W * len(broken)) / max(linear, 1e-9)
        self.broken = broken
        self.pieces: list[_Piece] = []
        t, x = start, float(LEFT)
        for a, b in [*broken, (end, end)]:
            if a > t:
                self.pieces.append(_Piece(t, a, x, x + (a - t) * per_s))
                x += (a - t) * per_s
            if b > a:
                self.pieces.append(_Piece(a, b, x, x + COMPRESSED_W))
                x += COMPRESSED_W
            t = b
        if not self.pieces:
            self.pieces.append(_Piece(start, start + span, LEFT, LEFT + PLOT))
        self.per_s = per_s

    def x(self, t: float) -> float:
        for p in self.pieces:
            if t <= p.t1:
                if t <= p.t0 or p.t1 == p.t0:
                    return p.x0
                return p.x0 + (t - p.t0) / (p.t1 - p.t0) * (p.x1 - p.x0)
        return self.pieces[-1].x1

    def is_broken(self, t: float) -> bool:
        return any(a < t < b for a, b in self.broken)


def _tick_step(visible_s: float) -> float:
    """A round step that gives about eight ticks."""
    raw = max(visible_s / 8, 1e-3)
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 43200, 86400):
        if step >= raw:
            return float(step)
    return 86400.0 * math.ceil(raw / 86400)


def _label(offset: float) -> str:
    if offset < 60:
        return f"{offset:g} s"
    if offset < 3600:
        return f"{offset / 60:g} min"
    return f"{offset / 3600:g} h"


def _rect(x0: float, x1: float, y: float, h: float, fill: str, attrs: str, title: str) -> str:
    w = max(MIN_BAR, x1 - x0)
    return (
        f'<rect {attrs} x="{x0:.1f}" y="{y}" width="{w:.1f}" height="{h}" fill="{fill}">'
        f"<title>{escape(title)}</title></rect>"
    )


def _attempt_title(a: AttemptView) -> str:
    code = f", exit {a.exit_code}" if a.exit_code is not None else ", inferred"
    return (
        f"attempt {a.attempt}: {a.outcome}{code}; {when(a.start)} to {when(a.end)} UTC "
        f"({seconds(a.duration)}); {a.reason}"
    )


def _cycle_title(c: CycleView) -> str:
    text = f"cycle {c.cycle} (attempt {c.attempt}): {c.outcome}, {seconds(c.duration)}"
    if c.progressed is not None:
        text += f", iteration {c.iteration_start} -> {c.iteration_end}"
    if c.failure is not None:
        text += f"; first failure: {c.failure.description}"
        if c.failure.exception:
            text += f" ({c.failure.exception})"
    return text


def render(report: Report) -> str:
    t = report.totals
    attempts = list(report.attempts)
    start = attempts[0].start if attempts else 0.0
    end = start + t.wall_clock_s
    gaps = [(a.end, b.start) for a, b in itertools.pairwise(attempts) if b.start > a.end]
    scale = Scale(start, end, gaps)
    legend_y = AXIS_Y + 40
    height = legend_y + 64
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" {FONT} font-size="12">',
        '<defs><pattern id="gap" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f2f2f2"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#bdbdbd" stroke-width="2"/></pattern></defs>',
        f'<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>',
        f'<text x="{LEFT}" y="22" font-size="14" font-weight="bold">'
        f"{escape(f'wall clock {seconds(t.wall_clock_s)}, goodput {goodput_text(t)}')}</text>",
        f'<text x="{LEFT - 8}" y="{ATTEMPT_Y + 15}" text-anchor="end">attempts</text>',
        f'<text x="{LEFT - 8}" y="{CYCLE_Y + 19}" text-anchor="end">cycles</text>',
    ]
    for gap_start, gap_end in gaps:
        x0, x1 = scale.x(gap_start), scale.x(gap_end)
        out.append(
            f'<rect class="gap" x="{x0:.1f}" y="{ATTEMPT_Y}" width="{max(x1 - x0, 1):.1f}" '
            f'height="{CYCLE_Y + CYCLE_H - ATTEMPT_Y}" fill="url(#gap)">'
            f"<title>{escape(f'between attempts: {seconds(gap_end - gap_start)}')}</title></rect>"
        )
        if x1 - x0 > 40:
            out.append(
                f'<text x="{(x0 + x1) / 2:.1f}" y="{CYCLE_Y + 19}" text-anchor="middle" '
                f'font-size="10" fill="#424242">{escape(seconds(gap_end - gap_start))}</text>'
            )
    for a in attempts:
        x0, x1 = scale.x(a.start), scale.x(a.end)
        out.append(
            _rect(
                x0,
                x1,
                ATTEMPT_Y,
                ATTEMPT_H,
                colour(a.outcome),
                f'class="attempt" data-attempt="{a.attempt}" data-outcome="{escape(a.outcome)}" '
                'fill-opacity="0.35" stroke="#424242" stroke-width="0.5"',
                _attempt_title(a),
            )
        )
        if x1 - x0 > 70:
            out.append(
                f'<text x="{x0 + 4:.1f}" y="{ATTEMPT_Y + 15}" font-size="11">'
                f"{escape(f'attempt {a.attempt}: {a.outcome}')}</text>"
            )
    for c in report.cycles:
        x0 = scale.x(c.start)
        x1 = scale.x(c.end if c.end is not None else c.run_end)
        out.append(
            _rect(
                x0,
                x1,
                CYCLE_Y,
                CYCLE_H,
                colour(c.outcome),
                f'class="cycle" data-cycle="{c.cycle}" data-outcome="{escape(c.outcome)}"',
                _cycle_title(c),
            )
        )
        if c.split is not None:
            out += _split_parts(scale, c)
        if x1 - x0 > 24:
            out.append(
                f'<text x="{x0 + 3:.1f}" y="{CYCLE_Y + 19}" font-size="11" fill="#ffffff">{c.cycle}</text>'
            )
        if c.failure is not None:
            fx = scale.x(c.run_end)
            if x1 - fx >= 1 and c.split is None:  # after the failure the workers were being stopped
                out.append(
                    f'<rect class="stopping" data-cycle="{c.cycle}" x="{fx:.1f}" y="{CYCLE_Y}" '
                    f'width="{x1 - fx:.1f}" height="{CYCLE_H}" fill="#ffffff" fill-opacity="0.6"/>'
                )
            out.append(
                f'<g class="failure" data-cycle="{c.cycle}"><title>{escape(c.failure.description)}</title>'
                f'<line x1="{fx:.1f}" y1="{CYCLE_Y - 6}" x2="{fx:.1f}" y2="{CYCLE_Y + CYCLE_H + 2}" '
                f'stroke="#000000" stroke-width="1.5"/>'
                f'<path d="M{fx - 5:.1f},{CYCLE_Y - 12} L{fx + 5:.1f},{CYCLE_Y - 12} '
                f'L{fx:.1f},{CYCLE_Y - 4} Z" fill="#000000"/></g>'
            )
    out += _fault_marks(scale, report)
    out += _restore_marks(scale, report)
    out += _axis(scale, start, end)
    out += _legend(report, legend_y)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _split_parts(scale: Scale, c: CycleView) -> list[str]:
    """The cycle's start-up, kept training, lost work and stopping, each a
    ``<rect class="part" data-part=...>``, under a band of the outcome's colour."""
    assert c.split is not None
    s = c.split
    out = []
    for part, t0, t1 in (
        ("startup", s.start, s.startup_end),
        ("kept", s.startup_end, s.kept_end),
        ("lost", s.kept_end, s.run_end),
        ("stopping", s.run_end, s.end),
    ):
        if t1 <= t0:
            continue
        x0, x1 = scale.x(t0), scale.x(t1)
        fill, name = PARTS[part]
        out.append(
            f'<rect class="part" data-cycle="{c.cycle}" data-part="{part}" x="{x0:.1f}" '
            f'y="{CYCLE_Y + OUTCOME_BAND}" width="{max(x1 - x0, 0.5):.1f}" height="{CYCLE_H - OUTCOME_BAND}" '
            f'fill="{fill}"><title>{escape(f"cycle {c.cycle}: {name} {seconds(t1 - t0)}")}</title></rect>'
        )
    return out


def _fault_marks(scale: Scale, report: Report) -> list[str]:
    """A diamond above the cycles at each injected fault, with what it cost on hover."""
    out = []
    for f in report.faults:
        x = scale.x(f.time)
        y = CYCLE_Y - 20
        if not f.injected:
            title = f"{f.fault} ({f.where}): not injected: {f.problem}"
        elif f.cost_s is not None:
            title = f"{f.fault} ({f.where}) at {when(f.time)[11:]} UTC: cost {seconds(f.cost_s)}"
        else:
            title = f"{f.fault} ({f.where}) at {when(f.time)[11:]} UTC"
        fill = "#6a1b9a" if f.injected else "#bdbdbd"
        out.append(
            f'<g class="fault" data-fault="{escape(f.fault)}"><title>{escape(title)}</title>'
            f'<path d="M{x:.1f},{y - 5} L{x + 5:.1f},{y} L{x:.1f},{y + 5} L{x - 5:.1f},{y} Z" fill="{fill}"/>'
            f'<line x1="{x:.1f}" y1="{y + 5}" x2="{x:.1f}" y2="{CYCLE_Y}" stroke="{fill}" '
            'stroke-dasharray="2,2"/></g>'
        )
    return out


def _restore_marks(scale: Scale, report: Report) -> list[str]:
    """A green triangle under the cycles where a cycle's ranks resumed from snapshots."""
    out = []
    y = CYCLE_Y + CYCLE_H + 4
    for r in report.snapshot_restores:
        x = scale.x(r.time)
        title = f"cycle {r.cycle} resumed from snapshots at step {r.step} ({', '.join(r.sources)})"
        out.append(
            f'<g class="snapshot-restore" data-cycle="{r.cycle}"><title>{escape(title)}</title>'
            f'<path d="M{x:.1f},{y} L{x + 5:.1f},{y + 8} L{x - 5:.1f},{y + 8} Z" fill="#2e7d32"/></g>'
        )
    return out


def _axis(scale: Scale, start: float, end: float) -> list[str]:
    visible = sum(p.t1 - p.t0 for p in scale.pieces if not scale.is_broken((p.t0 + p.t1) / 2))
    step = _tick_step(visible)
    out = [f'<line x1="{LEFT}" y1="{AXIS_Y}" x2="{LEFT + PLOT}" y2="{AXIS_Y}" stroke="#424242"/>']
    k = 0
    last_x = -1e9
    while start + k * step <= end + 1e-9:
        t = start + k * step
        k += 1
        if scale.is_broken(t):
            continue
        x = scale.x(t)
        if x - last_x < 40:
            continue
        last_x = x
        out.append(f'<line x1="{x:.1f}" y1="{AXIS_Y}" x2="{x:.1f}" y2="{AXIS_Y + 5}" stroke="#424242"/>')
        out.append(f'<text x="{x:.1f}" y="{AXIS_Y + 18}" text-anchor="middle">{_label(t - start)}</text>')
    for a, b in scale.broken:
        xm = (scale.x(a) + scale.x(b)) / 2
        out.append(
            f'<text x="{xm:.1f}" y="{AXIS_Y + 4}" text-anchor="middle" font-size="16" fill="#424242">≈</text>'
        )
    out.append(
        f'<text x="{LEFT}" y="{AXIS_Y + 32}" font-size="10" fill="#616161">'
        f"{escape(f'time since the first cycle started ({when(start)} UTC)')}</text>"
    )
    return out


def _legend(report: Report, y: float) -> list[str]:
    seen: list[str] = []
    for c in report.cycles:
        if c.outcome not in seen:
            seen.append(c.outcome)
    out = []
    x = float(LEFT)
    for outcome in seen:
        out.append(f'<rect x="{x:.1f}" y="{y}" width="12" height="12" fill="{colour(outcome)}"/>')
        out.append(f'<text x="{x + 16:.1f}" y="{y + 10}">{escape(outcome)}</text>')
        x += 28 + 7 * len(outcome)
    if any(c.failure for c in report.cycles):
        out.append(f'<path d="M{x:.1f},{y} L{x + 10:.1f},{y} L{x + 5:.1f},{y + 8} Z" fill="#000000"/>')
        out.append(f'<text x="{x + 16:.1f}" y="{y + 10}">first failure (paler after it: stopping)</text>')
        x += 250
    if report.totals.requeues:
        out.append(f'<rect x="{x:.1f}" y="{y}" width="12" height="12" fill="url(#gap)" stroke="#bdbdbd"/>')
        out.append(f'<text x="{x + 16:.1f}" y="{y + 10}">between attempts</text>')
    x, y2 = float(LEFT), y + 18  # the second row: inside the cycles, and the faults
    if any(c.split for c in report.cycles):
        for fill, name in PARTS.values():
            out.append(f'<rect x="{x:.1f}" y="{y2}" width="12" height="12" fill="{fill}"/>')
            out.append(f'<text x="{x + 16:.1f}" y="{y2 + 10}">{escape(name)}</text>')
            x += 28 + 7 * len(name)
    if report.snapshot_restores:
        out.append(
            f'<path d="M{x + 6:.1f},{y2} L{x + 12:.1f},{y2 + 10} L{x:.1f},{y2 + 10} Z" fill="#2e7d32"/>'
        )
        out.append(f'<text x="{x + 16:.1f}" y="{y2 + 10}">resumed from snapshots</text>')
        x += 190
    if report.faults:
        diamond = f"M{x + 6:.1f},{y2} L{x + 12:.1f},{y2 + 6} L{x + 6:.1f},{y2 + 12} L{x:.1f},{y2 + 6} Z"
        out.append(f'<path d="{diamond}" fill="#6a1b9a"/>')
        out.append(f'<text x="{x + 16:.1f}" y="{y2 + 10}">injected fault (slurm-ft-drill)</text>')
    shares = "; ".join(f"{name} {share}" for name, _, share in total_rows(report.totals))
    out.append(f'<text x="{LEFT}" y="{y + 50}" fill="#424242">{escape(shares)}</text>')
    return out


def html_page(report: Report, svg: str) -> str:
    """A page for a browser: the picture, then the totals as a table."""
    rows = "\n".join(
        f"<tr><td>{escape(name)}</td><td>{escape(value)}</td><td>{escape(share)}</td></tr>"
        for name, value, share in total_rows(report.totals)
    )
    t = report.totals
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>slurm-ft report: {escape(report.state_dir)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}td{padding:2px 12px 2px 0}</style></head><body>\n"
        f"<h1>slurm-ft report</h1><p>{escape(report.state_dir)}</p>\n{svg}"
        f"<table>\n{rows}\n<tr><th>wall clock</th><th>{escape(seconds(t.wall_clock_s))}</th>"
        f"<th>100 %</th></tr></table>\n<p>goodput: {escape(goodput_text(t))}</p>\n</body></html>\n"
    )
