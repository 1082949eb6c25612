"""How ``--failure`` and ``--list`` look on a terminal (rich tables) and as JSON.

Tables where people expect them (a job's cycles; the facts of a failure), plain text for
log lines, which must stay greppable and copyable.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from rich.console import Console

from slurm_ft.logs.failure import MAX_STACK_GROUPS, FailureView
from slurm_ft.logs.ranks import format_set
from slurm_ft.logs.source import Job
from slurm_ft.records import CycleRecord, Failure


def _console(out: TextIO) -> Console:
    """rich is imported only when a table is drawn (selecting lines never needs it)."""
    from rich.console import Console

    width = None if out.isatty() else 120
    return Console(file=out, width=width, highlight=False, soft_wrap=False)


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def _human(size: int | None) -> str:
    if size is None:
        return "missing"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"


def _failure_short(rec: CycleRecord) -> str:
    if rec.first_failure is None:
        return ""
    try:
        return Failure.from_json(rec.first_failure).describe()
    except (TypeError, ValueError, KeyError):
        return "(unreadable)"


def cycles_json(job: Job, cycles: list[CycleRecord]) -> dict[str, object]:
    return {
        "state_dir": str(job.state.path),
        "cycles": [
            {
                "cycle": c.cycle,
                "attempt": c.attempt,
                "restart": c.restart,
                "outcome": c.outcome.value,
                "start_time": c.start_time,
                "end_time": c.end_time,
                "world_size": c.world_size,
                "nodes": c.nodes,
                "first_failure": c.first_failure,
                "log_files": [{**f, "size": _size(str(f.get("path", "")))} for f in c.log_files],
            }
            for c in cycles
        ],
    }


def cycles_table(job: Job, cycles: list[CycleRecord], out: TextIO) -> None:
    from rich.table import Table

    table = Table(title=f"cycles in {job.state.path}", title_justify="left")
    for name in ("cycle", "attempt", "outcome", "started", "ranks", "log files", "first failure"):
        table.add_column(name, overflow="fold")
    for c in cycles:
        sizes = [_size(str(f.get("path", ""))) for f in c.log_files]
        files = (
            f"{len(sizes)} file{'s' if len(sizes) != 1 else ''}, "
            + _human(sum(s for s in sizes if s is not None))
            + (f" ({sizes.count(None)} missing)" if None in sizes else "")
            if sizes
            else "none"
        )
        table.add_row(
            str(c.cycle),
            str(c.attempt),
            c.outcome.value,
            _when(c.start_time),
            str(c.world_size),
            files,
            _failure_short(c),
        )
    _console(out).print(table)


def failure_text(view: FailureView, out: TextIO, *, job_hint: str) -> None:
    from rich.table import Table

    console = _console(out)
    f = view.failure
    if f is None:
        if view.outcome == "running":
            print(f"cycle {view.cycle} (attempt {view.attempt}) is still running: no failure yet", file=out)
        else:
            print(
                f"cycle {view.cycle} (attempt {view.attempt}): {view.outcome}, no failure recorded", file=out
            )
        if view.failed_cycles:
            print(f"cycles with a failure: {format_set(view.failed_cycles)} (use --cycle N)", file=out)
        return
    table = Table(title=f"cycle {view.cycle} (attempt {view.attempt}): {view.outcome}", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    rows = [
        ("kind", f.kind.value + (f" ({f.detector})" if f.detector else "")),
        (
            "rank",
            ""
            if f.rank is None
            else f"{f.rank}" + ("" if f.local_rank is None else f" (local {f.local_rank})"),
        ),
        ("node", f"{f.node} (node rank {f.node_rank})"),
        (
            "exit",
            f"signal {f.signal}" if f.signal else ("" if f.exit_code is None else f"exit code {f.exit_code}"),
        ),
        (
            "hung ranks",
            format_set(f.hung_ranks) if f.hung_ranks else ("every rank" if f.kind.value == "hang" else ""),
        ),
        ("when", _when(f.time)),
        ("detail", f.detail),
        ("message", f.message or ""),
    ]
    for name, value in rows:
        if value:
            table.add_row(name, value)
    console.print(table)
    out.flush()
    if view.last_lines:
        whose = f"rank {f.rank}" if f.rank is not None else f"the ranks on {f.node}"
        print(f"\n--- last {len(view.last_lines)} lines of {whose}:", file=out)
        for line in view.last_lines:
            print(line, file=out)
    if view.traceback:
        print(f"\n--- traceback of rank {f.rank} (from the {view.traceback_source}):", file=out)
        print(view.traceback.rstrip("\n"), file=out)
    if view.stacks:
        print(f"\n--- stacks at the hang ({len(view.stacks)} distinct):", file=out)
        for group in view.stacks[:MAX_STACK_GROUPS]:
            print(f"ranks {format_set(group.ranks)} ({len(group.ranks)}):", file=out)
            print(group.text.rstrip("\n"), file=out)
        if len(view.stacks) > MAX_STACK_GROUPS:
            print(
                f"... {len(view.stacks) - MAX_STACK_GROUPS} more distinct stacks (--json has them all)",
                file=out,
            )
    if view.stacks_missing and f.kind.value == "hang":
        print(f"no stack kept for ranks {format_set(view.stacks_missing)}", file=out)
    print("\n--- full files:", file=out)
    for path, size in view.files:
        print(f"{path} ({_human(size)})", file=out)
    if f.rank is not None:
        print(f"all of rank {f.rank}: {job_hint} --cycle {view.cycle} --rank {f.rank}", file=out)
    if view.failed_cycles:
        print(f"other cycles with a failure: {format_set(view.failed_cycles)}", file=out)
