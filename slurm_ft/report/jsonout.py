"""The report as JSON: ``slurm-ft-report --json``.

The shape is a contract for dashboards and scripts, described by ``report.schema.json``
(JSON Schema 2020-12, shipped in this package; ``schema_path()`` finds it). Changes that
could break a reader raise ``REPORT_VERSION``; new optional keys do not. Times are Unix
seconds, durations seconds; a value that cannot be known is null, never guessed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slurm_ft.report.views import AttemptView, CycleSplit, CycleView, FailureView, FaultView, Report

REPORT_VERSION = 1
SCHEMA_FILE = "report.schema.json"


def schema_path() -> Path:
    return Path(__file__).with_name(SCHEMA_FILE)


def _failure(f: FailureView | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {
        "kind": f.kind,
        "node": f.node,
        "node_rank": f.node_rank,
        "rank": f.rank,
        "time": f.time,
        "exit_code": f.exit_code,
        "signal": f.signal,
        "exception": f.exception,
        "description": f.description,
    }


def _cycle(c: CycleView) -> dict[str, Any]:
    return {
        "cycle": c.cycle,
        "attempt": c.attempt,
        "restart": c.restart if c.restart >= 0 else None,
        "start": c.start,
        "end": c.end,
        "duration_s": c.duration,
        "outcome": c.outcome,
        "nodes": list(c.nodes),
        "world_size": c.world_size,
        "first_failure": _failure(c.failure),
        "progressed": c.progressed,
        "iteration_start": c.iteration_start,
        "iteration_end": c.iteration_end,
        "source": c.source,
        "split": _split(c.split),
    }


def _split(s: CycleSplit | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "startup_end": s.startup_end,
        "kept_end": s.kept_end,
        "run_end": s.run_end,
        "startup_s": s.startup_s,
        "kept_s": s.kept_s,
        "lost_work_s": s.lost_s,
        "stopping_s": s.stopping_s,
    }


def _fault(f: FaultView) -> dict[str, Any]:
    return {
        "fault": f.fault,
        "time": f.time,
        "node": f.node,
        "rank": f.rank,
        "signal": f.signal,
        "injected": f.injected,
        "problem": f.problem,
        "cycle": f.cycle,
        "next_cycle": f.next_cycle,
        "absorbed": f.absorbed,
        "detection_s": f.detection_s,
        "stop_s": f.stop_s,
        "restart_s": f.restart_s,
        "startup_s": f.startup_s,
        "lost_work_s": f.lost_work_s,
        "cost_s": f.cost_s,
        "lost_since_snapshot_s": f.lost_since_snapshot_s,
    }


def _attempt(a: AttemptView) -> dict[str, Any]:
    return {
        "attempt": a.attempt,
        "run_uuid": a.run_uuid,
        "start": a.start,
        "end": a.end,
        "duration_s": a.duration,
        "outcome": a.outcome,
        "exit_code": a.exit_code,
        "reason": a.reason,
        "outcome_source": a.outcome_source,
        "cycles": list(a.cycles),
        "nodes": list(a.nodes),
        "unhealthy_nodes": list(a.unhealthy_nodes),
        "lost_nodes": list(a.lost_nodes),
    }


def to_json(report: Report) -> dict[str, Any]:
    t = report.totals
    return {
        "report_version": REPORT_VERSION,
        "state_dir": report.state_dir,
        "progress_source": report.progress_source,
        "totals": {
            "wall_clock_s": t.wall_clock_s,
            "progress_s": t.progress_s,
            "no_progress_s": t.no_progress_s,
            "unknown_progress_s": t.unknown_progress_s,
            "restart_overhead_s": t.restart_overhead_s,
            "between_attempts_s": t.between_attempts_s,
            "startup_s": t.startup_s,
            "lost_work_s": t.lost_work_s,
            "stopping_s": t.stopping_s,
            "split_cycles": t.split_cycles,
            "seconds_per_step": t.seconds_per_step,
            "lost_since_snapshot_s": t.lost_since_snapshot_s,
            "goodput_ratio": t.goodput_ratio,
            "goodput_upper_bound": t.goodput_upper_bound,
            "work_lost_iterations": t.work_lost_iterations,
            "attempts": t.attempts,
            "cycles": t.cycles,
            "restarts": t.restarts,
            "requeues": t.requeues,
            "failures": t.failures,
        },
        "attempts": [_attempt(a) for a in report.attempts],
        "cycles": [_cycle(c) for c in report.cycles],
        "top_causes": [
            {"cause": k.cause, "count": k.count, "cycles": list(k.cycles), "nodes": list(k.nodes)}
            for k in report.top_causes
        ],
        "repeat_nodes": [
            {"node": n.node, "failures": n.failures, "cycles": list(n.cycles), "unhealthy": n.unhealthy}
            for n in report.repeat_nodes
        ],
        "unhealthy": [{"node": u.node, "reason": u.reason, "time": u.time} for u in report.unhealthy],
        "unreadable": [{"path": u.path, "problem": u.problem} for u in report.unreadable],
        "notes": list(report.notes),
        "faults": [_fault(f) for f in report.faults],
        "snapshot_restores": [
            {"cycle": r.cycle, "time": r.time, "step": r.step, "sources": list(r.sources)}
            for r in report.snapshot_restores
        ],
    }


DURATION_DIGITS = 3  # milliseconds: the records' clocks say no more than that


def round_durations(doc: Any) -> Any:
    """Every duration (a key ending in ``_s``) rounded to the millisecond: float arithmetic
    on Unix times leaves 12.300000000000182, which says nothing and reads badly. Times
    themselves are left as recorded."""
    if isinstance(doc, dict):
        return {
            k: round(v, DURATION_DIGITS) if k.endswith("_s") and isinstance(v, float) else round_durations(v)
            for k, v in doc.items()
        }
    if isinstance(doc, list):
        return [round_durations(v) for v in doc]
    return doc


def published(report: Report) -> dict[str, Any]:
    """The document ``--json`` prints: durations rounded (:func:`round_durations`) and the
    goodput ratios taken from the rounded durations, so that ``goodput_ratio`` is exactly
    the document's own ``progress_s / wall_clock_s``. The ratios of the unrounded figures
    disagreed with the printed ones by up to 0.5 ms over the wall clock (0.0023 on a
    0.4 s run, issue 47): a reader checking one field against the others found a
    contradiction that meant nothing."""
    doc: dict[str, Any] = round_durations(to_json(report))
    t = doc["totals"]
    wall = t["wall_clock_s"]
    for key, part in (
        ("goodput_ratio", t["progress_s"]),
        ("goodput_upper_bound", t["progress_s"] + t["unknown_progress_s"]),
    ):
        if t[key] is not None:
            t[key] = part / wall if wall > 0 else None
    return doc
