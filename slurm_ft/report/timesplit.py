"""Where the time went: the cycles cut by the timed readings, and the wall clock split into
buckets.

The one rule that matters: the parts of the wall clock add up to the wall clock. Time is
walked once, from the first cycle's start to the last record of the last attempt, and
every stretch goes to exactly one bucket:

* **progress** / **no progress** / **progress unknown** — a cycle's workers running, from
  its start to its first failure (or its end); which bucket comes from the ledger's
  checkpoint readings (unknown without a progress source);
* with node 0's timed readings of the progress source (``progress/readings.jsonl``) and
  node rank 0's of its newest snapshot (``progress/snapshot-readings.jsonl``) a cycle that
  made progress is cut further: **start-up** (from its start until its first sign of
  progress, back-dated by the steps it holds at the job's measured step rate),
  **progress** (kept training: until the last checkpoint seen before the workers stopped,
  or the snapshot the next cycle resumed from when that is newer), **lost work** (after
  that until the first failure: recomputed in the next cycle) and **stopping** (the first
  failure until the cycle's end). A failed cycle in which nothing moved is cut all the
  same where the hang judge learned its start-up (:func:`_unread_split`). Without
  readings the whole run counts as progress and the goodput is an upper bound (a note
  says so);
* **restart overhead** — inside an attempt with no cycle training: from a failure until the
  next cycle started (stopping workers, health checks, rendezvous) and the wind-down after
  an attempt's last cycle;
* **between attempts** — from one attempt's last record to the next attempt's first cycle:
  the requeue, the queue wait and the launchers' start-up.
"""

from __future__ import annotations

import dataclasses
import itertools

from slurm_ft.records import SNAPSHOT_MARK, CycleOutcome, ProgressReading
from slurm_ft.report.views import AttemptView, CycleSplit, CycleView, Totals


def _progress_readings(readings: list[ProgressReading], after: float | None) -> list[ProgressReading]:
    """The readings that moved the source forward, in time order (a step never counts twice)."""
    out: list[ProgressReading] = []
    high = after
    for r in readings:
        if high is None or r.step > high:
            out.append(r)
            high = r.step
    return out


# A checkpoint a cycle made while its workers were being stopped is read up to a look later
# (node 0 looks every 0.5 s): readings this long after a cycle's end are still that cycle's,
# even where the next cycle has started (a warm restart starts it within milliseconds: the
# checkpoint a stopped rank saved on its way out, read in the next cycle, set that cycle's
# pace with its own start-up between two of its "steps").
READING_LAG_S = 1.0


@dataclasses.dataclass(frozen=True)
class _Span:
    """A cycle's reading window."""

    since: float
    until: float | None  # None: the cycle is open


def _window(c: CycleView, readings: list[ProgressReading], span: _Span) -> list[ProgressReading]:
    """The cycle's readings in its window, less the snapshot readings of the cycle before
    that node 0 read only after this one began."""
    end = span.until if span.until is not None else float("inf")
    floor = c.snapshot_floor
    return [
        r
        for r in readings
        if span.since <= r.time <= end and (floor is None or r.mark != SNAPSHOT_MARK or r.step > floor)
    ]


def _windows(cycles: list[CycleView]) -> dict[int, _Span]:
    """Each cycle's reading window: from its start, or the end of the window before it, to
    its end and :data:`READING_LAG_S` more."""
    out: dict[int, _Span] = {}
    before: float | None = None
    for c in sorted(cycles, key=lambda c: c.start):
        until = c.end + READING_LAG_S if c.end is not None else None
        out[c.cycle] = _Span(max(c.start, before) if before is not None else c.start, until)
        before = until
    return out


def _base_step(c: CycleView, readings: list[ProgressReading]) -> int | None:
    """Where the cycle started from: the snapshot every rank resumed from when it is newer
    than the ledger's start reading, else that reading, else the last timed reading before
    the cycle; None when nothing was read before it."""
    if c.resumed_step is not None and (c.iteration_start is None or c.resumed_step > c.iteration_start):
        return c.resumed_step
    if c.iteration_start is not None:
        return c.iteration_start
    before = [r.step for r in readings if r.time < c.start]
    return before[-1] if before else None


def seconds_per_step(cycles: list[CycleView], readings: list[ProgressReading]) -> float | None:
    """The job's pace while it trains: time over steps between consecutive forward readings
    of the same cycle, read while its workers trained (never across a failure, nor past
    one: a checkpoint saved as the workers are stopped comes one step and seconds after the
    one before when they were stopped for a hang, and a drill's hung rank set the pace 3x
    too slow, which back-dated every cycle's start-up to nothing); None with fewer than two
    in any cycle."""
    dt = 0.0
    steps = 0
    spans = _windows(cycles)
    for c in cycles:
        span = spans[c.cycle]
        if c.end is not None:  # read while the workers trained
            span = _Span(span.since, max(span.since, c.run_end))
        moved = _progress_readings(_window(c, readings, span), _base_step(c, readings))
        for a, b in itertools.pairwise(moved):
            dt += b.time - a.time
            steps += b.step - a.step
    return dt / steps if steps > 0 and dt > 0 else None


def split_cycle(
    c: CycleView,
    readings: list[ProgressReading],
    pace: float | None,
    span: _Span,
    resumed_after: int | None = None,
) -> CycleSplit | None:
    """The cycle cut at its first sign of progress and at the last step the job kept;
    None for an open cycle, and for a cycle in which no reading moved that
    :func:`_unread_split` cannot cut either (its bucket stays the ledger's).

    Start-up ends when the first checkpoint or snapshot of the cycle was seen, less the
    time its steps took at ``pace`` (unknown pace: not back-dated, so the start-up is an
    upper bound). The kept step is the newer of the last checkpoint and the snapshot the
    job resumed from after the cycle (``resumed_after``: every rank of the next cycle
    resumed from a snapshot at that step); the kept training ends when that step was
    reached: the last reading at or below it, plus the steps between at ``pace`` (a
    checkpoint minutes apart, or readings of a node that no longer runs node rank 0, say
    little about when the snapshot step was made). A reading seen after the first failure
    (the other ranks went on until they were stopped) keeps the work up to the failure,
    never beyond."""
    if c.end is None:
        return None
    base = _base_step(c, readings)
    window = _window(c, readings, span)
    moved = _progress_readings(window, base)
    if not moved:
        return _unread_split(c, base, pace, resumed_after)
    first = moved[0]
    run_end, end = c.run_end, c.end
    back = (first.step - base) * pace if pace is not None and base is not None else 0.0
    startup_end = min(max(c.start, first.time - back), run_end)
    checkpoints = [r.step for r in window if r.mark != SNAPSHOT_MARK and (base is None or r.step > base)]
    kept_step = max([*checkpoints, *([resumed_after] if resumed_after is not None else [])], default=None)
    upto = [r for r in moved if kept_step is not None and r.step <= kept_step]
    if c.outcome == CycleOutcome.SUCCEEDED:
        kept_end, kept_step = run_end, moved[-1].step
    elif upto:
        ahead = (kept_step - upto[-1].step) * pace if kept_step is not None and pace is not None else 0.0
        kept_end = min(upto[-1].time + ahead, run_end)
    else:
        kept_end = startup_end
    kept_end = max(kept_end, startup_end)
    return CycleSplit(c.start, startup_end, kept_end, run_end, end, kept_step=kept_step)


def _unread_split(
    c: CycleView, base: int | None, pace: float | None, resumed_after: int | None
) -> CycleSplit | None:
    """A failed cycle in which no reading moved (no checkpoint made, no snapshot read): its
    start-up ends where the hang judge saw the workers' signs of life settle (the ledger's
    ``learned_startup``), and of its training the steps up to the snapshot the next cycle
    resumed from are kept, at ``pace``; the rest is lost. Without a learned start-up, a
    cycle that kept steps is cut as late as those steps allow (its start-up an upper
    bound: the steps end at its first failure); one that kept none stays uncut (None: the
    ledger's bucket, and the fault before it is charged the cycle up to the next fault as
    start-up, an upper bound). A cycle that succeeded, or that the ledger saw progress in,
    is never cut here: its readings were lost, not its work."""
    if c.end is None or not c.ended_badly or c.progressed is True:
        return None
    run_end = c.run_end
    kept = resumed_after - base if resumed_after is not None and base is not None else 0
    if kept > 0 and pace is None:
        return None  # steps kept, of unknown length
    kept_s = kept * pace if kept > 0 and pace is not None else 0.0
    if c.learned_startup is not None:
        startup_end = min(c.start + c.learned_startup, run_end)
    elif kept_s > 0:
        startup_end = max(c.start, run_end - kept_s)
    else:
        return None
    kept_end = min(startup_end + kept_s, run_end)
    kept_step = resumed_after if kept_s else None
    return CycleSplit(c.start, startup_end, kept_end, run_end, c.end, kept_step=kept_step)


def with_splits(
    cycles: list[CycleView], readings: list[ProgressReading]
) -> tuple[list[CycleView], float | None]:
    if not readings:
        return cycles, None
    pace = seconds_per_step(cycles, readings)
    spans = _windows(cycles)
    ordered = sorted(cycles, key=lambda c: c.start)
    out = []
    for c in cycles:
        nxt = next((n for n in ordered if c.end is not None and n.start >= c.end), None)
        resumed_after = nxt.resumed_step if nxt is not None else None
        split = split_cycle(c, readings, pace, spans[c.cycle], resumed_after)
        if split is not None:
            out.append(dataclasses.replace(c, split=split))
        elif c.end is not None and c.progressed is None:
            # The source was watched through this cycle and never moved: no checkpoint was
            # made in it, though the ledger could not tell (its end reading failed).
            out.append(dataclasses.replace(c, progressed=False))
        else:
            out.append(c)
    return out, pace


def _partition(attempts: list[AttemptView], cycles: dict[int, CycleView]) -> dict[str, float]:
    """Walk the time once; every stretch goes to one bucket (see the module docstring)."""
    names = ("progress", "no_progress", "unknown", "overhead", "between", "startup", "lost", "stopping")
    parts = dict.fromkeys(names, 0.0)
    if not attempts:
        return parts
    cursor = attempts[0].start

    def take(until: float, bucket: str) -> None:
        nonlocal cursor
        if until > cursor:
            parts[bucket] += until - cursor
            cursor = until

    for a in attempts:
        take(a.start, "between")
        for number in a.cycles:
            c = cycles[number]
            take(c.start, "overhead")
            if c.split is not None:
                take(c.split.startup_end, "startup")
                take(c.split.kept_end, "progress")
                take(c.split.run_end, "lost")
                take(c.split.end, "stopping")
                continue
            bucket = {True: "progress", False: "no_progress", None: "unknown"}[c.progressed]
            take(c.run_end, bucket)
        take(a.end, "overhead")
    return parts


def work_lost(cycles: list[CycleView]) -> int | None:
    """Iterations the checkpoint counter had reached before a failure that the next cycle
    did not resume from. A checkpoint counter cannot see work after the last checkpoint, so
    this is a lower bound; None when a failed cycle has no progress data."""
    ordered = sorted(cycles, key=lambda c: c.cycle)
    lost = 0
    for before, after in itertools.pairwise(ordered):
        if before.outcome == CycleOutcome.SUCCEEDED:
            continue
        if before.iteration_end is None or after.iteration_start is None:
            return None
        lost += max(0, before.iteration_end - max(after.iteration_start, after.resumed_step or 0))
    return lost


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def totals_of(attempts: list[AttemptView], cycles: list[CycleView], pace: float | None = None) -> Totals:
    by_number = {c.cycle: c for c in cycles}
    parts = _partition(attempts, by_number)
    wall = (max(a.end for a in attempts) - attempts[0].start) if attempts else 0.0
    unknown = parts["unknown"]
    return Totals(
        wall_clock_s=wall,
        progress_s=parts["progress"],
        no_progress_s=parts["no_progress"],
        unknown_progress_s=unknown,
        restart_overhead_s=parts["overhead"],
        between_attempts_s=parts["between"],
        goodput_ratio=_ratio(parts["progress"], wall) if unknown == 0 and cycles else None,
        goodput_upper_bound=_ratio(parts["progress"] + unknown, wall),
        work_lost_iterations=work_lost(cycles),
        attempts=len(attempts),
        cycles=len(cycles),
        restarts=sum(max(0, len(a.cycles) - 1) for a in attempts),
        requeues=max(0, len(attempts) - 1),
        failures=sum(1 for c in cycles if c.ended_badly),
        startup_s=parts["startup"],
        lost_work_s=parts["lost"],
        stopping_s=parts["stopping"],
        split_cycles=sum(1 for c in cycles if c.split is not None),
        seconds_per_step=pace,
    )
