"""The report for a person at a terminal (or in a batch script's output file), with rich.

rich is imported when a report is printed, not when the package is: ``--json`` and
``--svg`` never pay for it.
"""

from __future__ import annotations

import time
from typing import IO, TYPE_CHECKING

from slurm_ft.records import FailureKind
from slurm_ft.report.views import CycleView, Report, Totals

if TYPE_CHECKING:
    from rich.console import Console

# A terminal table of hundreds of cycles is neither readable nor quick (rich needs about
# 1.5 ms a row); the causes and the totals cover them all.
MAX_CYCLE_ROWS = 40
CYCLE_COLUMNS = (
    "cycle",
    "attempt",
    "start (UTC)",
    "duration",
    "outcome",
    "progress",
    "first failure",
    "nodes",
)
_OUTCOME_STYLE = {
    "succeeded": "green",
    "finished": "green",
    "failed": "red",
    "restarts-exhausted": "red",
    "lost": "red",
    "no-progress": "red",
    "unhealthy": "magenta",
    "signalled": "yellow",
}


def when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def seconds(s: float | None) -> str:
    """``12.3 s``, ``4 min 05 s``, ``2 h 03 min``: readable at every scale."""
    if s is None:
        return "-"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def percent(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole > 0 else "-"


def _style(outcome: str) -> str:
    if outcome.startswith("signal"):
        return "yellow"
    return _OUTCOME_STYLE.get(outcome, "")


def goodput_text(t: Totals) -> str:
    if t.goodput_ratio is not None:
        return f"{100 * t.goodput_ratio:.1f} %"
    if t.goodput_upper_bound is not None:
        return f"unknown (no progress data; at most {100 * t.goodput_upper_bound:.1f} %)"
    return "unknown"


def total_rows(t: Totals) -> list[tuple[str, str, str]]:
    """(name, duration, share of the wall clock) of every bucket that holds any time: the
    same lines in every renderer."""
    parts = [
        ("start-up (until the first progress)", t.startup_s),
        ("training, with progress", t.progress_s),
        ("training lost (after the last checkpoint)", t.lost_work_s),
        ("training, no progress", t.no_progress_s),
        ("training, progress unknown", t.unknown_progress_s),
        ("stopping (failure to cycle end)", t.stopping_s),
        ("restart overhead", t.restart_overhead_s),
        ("between attempts", t.between_attempts_s),
    ]
    return [(name, seconds(s), percent(s, t.wall_clock_s)) for name, s in parts if s > 0]


def fault_rows(report: Report) -> list[tuple[str, ...]]:
    """(time, fault, where, cycle, detection, stop, restart, start-up, lost work, cost) per
    injected fault: the same cells in every renderer."""
    rows: list[tuple[str, ...]] = []
    for f in report.faults:
        stamp = when(f.time)[11:]
        if not f.injected:
            rows.append((stamp, f.fault, f.where, "-", f"not injected: {f.problem}", "", "", "", "", ""))
            continue
        if f.absorbed or (f.cost_s is None and f.detection_s is None):
            why = "absorbed (the cycle had already failed)" if f.absorbed else "no failure followed"
            rows.append(
                (
                    stamp,
                    f.fault,
                    f.where,
                    str(f.cycle if f.cycle is not None else "-"),
                    why,
                    "",
                    "",
                    "",
                    "",
                    "",
                )
            )
            continue
        rows.append(
            (
                stamp,
                f.fault,
                f.where,
                f"{f.cycle}→{f.next_cycle if f.next_cycle is not None else '-'}",
                seconds(f.detection_s),
                seconds(f.stop_s),
                seconds(f.restart_s),
                seconds(f.startup_s),
                seconds(f.lost_work_s),
                seconds(f.cost_s),
            )
        )
    return rows


FAULT_COLUMNS = (
    "time (UTC)",
    "fault",
    "where",
    "cycle",
    "detection",
    "stop",
    "restart",
    "start-up",
    "lost work",
    "cost",
)


def fault_table(report: Report) -> object:
    from rich.table import Table

    table = Table(title="injected faults (slurm-ft-drill) and what each cost", title_justify="left")
    for name in FAULT_COLUMNS:
        table.add_column(name, overflow="fold", justify="left" if name in FAULT_COLUMNS[:4] else "right")
    for row in fault_rows(report):
        table.add_row(*row)
    return table


def render(report: Report, out: IO[str], *, width: int | None = None) -> None:
    from rich.console import Console
    from rich.text import Text

    console = Console(file=out, highlight=False, soft_wrap=False, width=width)
    console.print(Text(f"slurm-ft report: {report.state_dir}", style="bold"))
    console.print(attempts_table(report))
    for a in report.attempts:
        if a.lost_nodes:
            console.print(f"lost in attempt {a.attempt}: {', '.join(a.lost_nodes)}", markup=False)
    console.print(
        cycles_table(report) if report.cycles else "no cycle ran: no worker was started", markup=False
    )
    console.print(totals_table(report.totals))
    for line in summary_lines(report):
        console.print(line, markup=False)
    if report.faults:
        console.print(fault_table(report))
    _print_causes_and_nodes(console, report)
    for u in report.unhealthy:
        console.print(f"unhealthy: {u.node} at {when(u.time)}: {u.reason}", markup=False)
    for note in report.notes:
        console.print(f"note: {note}", markup=False)
    for bad in report.unreadable:
        console.print(Text(f"could not read {bad.path}: {bad.problem}", style="red"))


def attempts_table(report: Report) -> object:
    from rich.table import Table
    from rich.text import Text

    attempts = Table(title="attempts", title_justify="left")
    for name in ("attempt", "start (UTC)", "end", "duration", "cycles", "outcome", "reason"):
        attempts.add_column(name, overflow="fold")
    for a in report.attempts:
        outcome = a.outcome + (f" ({a.exit_code})" if a.exit_code is not None else " (inferred)")
        attempts.add_row(
            str(a.attempt),
            when(a.start),
            when(a.end)[11:],
            seconds(a.duration),
            ",".join(map(str, a.cycles)) or "-",
            Text(outcome, style=_style(a.outcome)),
            a.reason,
        )
    return attempts


def failure_cell(c: CycleView) -> str:
    """A cycle's first failure in a few words: a worker's rank and how it ended, with its
    exception's last line."""
    f = c.failure
    if f is None:
        return "-"
    failure = f.description
    if f.kind == FailureKind.WORKER.value:
        how = f"killed by {f.signal}" if f.signal else f"exit code {f.exit_code}"
        failure = f"rank {f.rank} on {f.node}: {how}"
    if f.exception:
        failure += f"\n{f.exception}"
    return failure


def progress_cell(c: CycleView) -> str:
    if c.progressed is None:
        return "?"
    return f"{c.iteration_start}→{c.iteration_end}" if c.iteration_end is not None else "no"


def cycles_table(report: Report) -> object:
    """The last :data:`MAX_CYCLE_ROWS` cycles (all of them in ``--json``)."""
    from rich.table import Table
    from rich.text import Text

    shown = report.cycles[-MAX_CYCLE_ROWS:]
    hidden = len(report.cycles) - len(shown)
    title = f"cycles (the last {len(shown)}; all {len(report.cycles)} in --json)" if hidden else "cycles"
    cycles = Table(title=title, title_justify="left")
    for name in CYCLE_COLUMNS:
        cycles.add_column(name, overflow="fold")
    for c in shown:
        cycles.add_row(
            str(c.cycle),
            str(c.attempt),
            when(c.start),
            seconds(c.duration),
            Text(c.outcome, style=_style(c.outcome)),
            progress_cell(c),
            failure_cell(c),
            ",".join(c.nodes) or "-",
        )
    return cycles


def totals_table(t: Totals) -> object:
    from rich.table import Table
    from rich.text import Text

    totals = Table(title="where the time went", title_justify="left")
    totals.add_column("")
    totals.add_column("time", justify="right")
    totals.add_column("share", justify="right")
    for row in total_rows(t):
        totals.add_row(*row)
    totals.add_row(Text("wall clock", style="bold"), seconds(t.wall_clock_s), "100 %")
    return totals


def summary_lines(report: Report) -> list[str]:
    """The goodput line, the lost work's split at the snapshots, and each snapshot restore."""
    t = report.totals
    lost = "unknown" if t.work_lost_iterations is None else f"{t.work_lost_iterations} iterations"
    out = [
        f"goodput: {goodput_text(t)}   work lost: {lost}   attempts: {t.attempts} "
        f"(requeues {t.requeues})   cycles: {t.cycles} (restarts {t.restarts})   failures: {t.failures}"
    ]
    if t.lost_since_snapshot_s is not None:
        held = t.lost_work_s - t.lost_since_snapshot_s
        out.append(
            f"work lost after the last step kept (checkpoint or snapshot resumed from): "
            f"{seconds(t.lost_work_s)}, of which {seconds(t.lost_since_snapshot_s)} since the newest "
            f"snapshot (the rest, {seconds(held)}, a snapshot held that the job did not resume from)"
        )
    out += [
        f"snapshot restore: cycle {r.cycle} at {when(r.time)} resumed at step {r.step} "
        f"({', '.join(r.sources)})"
        for r in report.snapshot_restores
    ]
    return out


def _print_causes_and_nodes(console: Console, report: Report) -> None:
    from rich.text import Text

    if report.top_causes:
        console.print(Text("top failure causes", style="bold"))
        for k in report.top_causes:
            console.print(
                f"  {k.count}x {k.cause}  (cycles {','.join(map(str, k.cycles))}; on {', '.join(k.nodes)})",
                markup=False,
            )
    if report.repeat_nodes:
        console.print(Text("nodes that failed more than once", style="bold"))
        for n in report.repeat_nodes:
            parts = []
            if n.cycles:
                parts.append(f"cycles {','.join(map(str, n.cycles))}")
            if n.unhealthy:
                parts.append(f"unhealthy in {n.unhealthy} attempt(s)")
            console.print(f"  {n.node}: {n.failures} failures ({'; '.join(parts)})", markup=False)
