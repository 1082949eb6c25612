"""Where the allocation went: pure functions from the state dir's records to a Report.

The one rule that matters: the parts of the wall clock add up to the wall clock
(:mod:`timesplit`). The rooms, by what they compute: :mod:`cycles` (attempts and cycles),
:mod:`timesplit` (the cycles cut by the timed readings, the buckets and the totals),
:mod:`faults` (what each injected fault cost), :mod:`causes` (failure causes and the
nodes that failed more than once), :mod:`snapshots` (work resumed from snapshots); the
shapes they make are :mod:`views`.
"""

from __future__ import annotations

import dataclasses

from slurm_ft.report.causes import repeat_nodes, top_causes
from slurm_ft.report.cycles import attempt_views, cycle_views, progress_known
from slurm_ft.report.faults import fault_views
from slurm_ft.report.load import StateFiles
from slurm_ft.report.snapshots import resumed_steps, resumes_by_cycle, snapshot_floors, with_snapshot_split
from slurm_ft.report.timesplit import totals_of, with_splits
from slurm_ft.report.views import Report


def analyse(files: StateFiles) -> Report:
    cycles, keys = cycle_views(files)
    resumes = resumes_by_cycle(files.snapshots)
    resumed = resumed_steps(resumes)
    floors = snapshot_floors(files.snapshots, cycles)
    cycles = [
        dataclasses.replace(c, resumed_step=resumed.get(c.cycle), snapshot_floor=floors.get(c.cycle))
        for c in cycles
    ]
    readings = sorted([*files.readings, *files.snapshot_readings], key=lambda r: r.time)
    cycles, pace = with_splits(cycles, readings)
    attempts = attempt_views(files, cycles, keys)
    notes = []
    if (files.ledger is None or files.ledger.source is None) and not files.snapshot_readings:
        notes.append(
            "no progress source (--progress-source): progress of each cycle and work lost are unknown"
        )
    elif files.ledger is None or files.ledger.source is None:
        notes.append(
            "no progress source (--progress-source): the cycles are timed by node 0's snapshot "
            "readings alone; a cycle without a new snapshot is of unknown progress"
        )
    for c in cycles:
        if c.end is None:
            notes.append(
                f"cycle {c.cycle} has no end (still running, or its launcher was killed): "
                "it is counted up to its start"
            )
    if progress_known(files.ledger) and not readings and cycles:
        notes.append(
            "no timed progress readings (a launcher older than this report): start-up and the "
            "work lost after each last checkpoint count as progress, so goodput is an upper bound"
        )
    if any(a.outcome_source == "inferred" for a in attempts):
        notes.append("some attempts' outcome records were not kept: their outcome is inferred from cycles")
    report = Report(
        state_dir=str(files.path),
        attempts=tuple(attempts),
        cycles=tuple(sorted(cycles, key=lambda c: c.cycle)),
        totals=totals_of(attempts, cycles, pace),
        top_causes=tuple(top_causes(cycles, attempts)),
        repeat_nodes=tuple(repeat_nodes(cycles, attempts)),
        unhealthy=tuple(sorted(files.unhealthy, key=lambda u: (u.time or 0.0, u.node))),
        unreadable=tuple(files.unreadable),
        progress_source=files.ledger.source if files.ledger else None,
        notes=tuple(notes),
        faults=tuple(fault_views(files.drills, cycles)),
    )
    return with_snapshot_split(report, files.snapshots, resumes, pace)
