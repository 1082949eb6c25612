"""The run in a few lines: ``slurm-ft-report --summary`` (pure: records in, lines out).

What a person wants first after a job: who ran, what failed in which cycle and with which
exception, whether training resumed, where the logs are, how it ended. The full report
(where the time went) stays the default; this is the short story the demo tells, from the
records alone (no log is read: a cycle log may be gigabytes).
"""

from __future__ import annotations

from pathlib import Path

from slurm_ft.records import CycleRecord, LogFile
from slurm_ft.report.load import StateFiles
from slurm_ft.report.views import CycleView, Report

INDENT = " " * 9


def lines(files: StateFiles, report: Report) -> list[str]:
    records = {c.cycle: c for c in files.cycles}
    out: list[str] = []
    first = files.cycles[0] if files.cycles else None
    key = Path(report.state_dir).name
    where = "standalone run" if key == "standalone" or not key[:1].isdigit() else f"job {key}"
    if first is not None:
        nodes = ",".join(first.nodes)
        out.append(
            f"== slurm-ft: {where}: {len(first.nodes)} node(s) ({nodes}) x {first.nproc_per_node} "
            f"workers, world size {first.world_size}"
        )
    else:
        out.append(f"== slurm-ft: {where}")
    for c in report.cycles:
        out.extend(_cycle(c, len(report.cycles)))
    logs = [path for c in report.cycles for path in _log_paths(records.get(c.cycle))]
    for i, path in enumerate(logs):
        out.append(f"{'logs:' if i == 0 else '':<8} {path}")
    for a in report.attempts:
        code = "?" if a.exit_code is None else a.exit_code
        label = "outcome:" if len(report.attempts) == 1 else f"attempt {a.attempt}:"
        out.append(f"{label} {a.outcome} (exit {code}): {a.reason}")
    for u in report.unreadable:
        out.append(f"unreadable: {u.path}: {u.problem}")
    return out


def _cycle(c: CycleView, cycles: int) -> list[str]:
    f = c.failure
    head = f"cycle {c.cycle}: {c.outcome}"
    if f is not None and f.kind == "worker":
        how = f"killed by {f.signal}" if f.signal else f"exit code {f.exit_code}"
        restarted = "; every worker on every node was stopped and restarted" if c.cycle < cycles - 1 else ""
        out = [f"{head}: rank {f.rank} on {f.node} failed ({how}){restarted}"]
        if f.exception:
            out.append(f"{INDENT}exception: {f.exception}")
    elif f is not None:
        out = [f"{head}: {f.description}"]
    elif c.outcome == "succeeded" and c.world_size is not None:
        out = [f"{head}: all {c.world_size} ranks exited 0"]
    else:
        out = [head]
    if c.restart > 0 and c.iteration_start:
        out.append(f"{INDENT}training resumed from its checkpoint at iteration {c.iteration_start}")
    return out


def _log_paths(record: CycleRecord | None) -> list[str]:
    if record is None:
        return []
    paths = []
    for doc in record.log_files:
        try:
            paths.append(LogFile.from_json(doc).path)
        except ValueError:
            continue
    return paths
