"""The no-progress policy as pure functions over ledger values and readings.

A cycle counts as progress when the source moved forward by at least
``min_progress_iterations`` between the cycle's start and its end (for a ``file:`` source:
when the file was replaced, one step). ``max_no_progress_cycles`` cycles in a row without
progress stop the job. A cycle ended by a signal counts by the same rule as any other; a
cycle the launcher never closed is closed at the next look as ``interrupted``.

Nothing configured means nothing judged: without a source, or while the configured
source has never existed, cycles are recorded but never counted against the job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from slurm_ft.config import ProgressSettings
from slurm_ft.progress.ledger import INTERRUPTED, CycleEntry, Ledger, ResetEntry, StopEntry
from slurm_ft.progress.reading import Reading
from slurm_ft.settingsyntax import FILE, ITERATION_FILE, SourceSpec, parse_progress_source

GUARD_OFF = "no progress source: the no-progress guard is off"


def configured_source(settings: ProgressSettings) -> SourceSpec | None:
    """``progress.source``, else ``progress.checkpoint_iteration_file`` (its older spelling)."""
    if settings.source:
        return parse_progress_source(settings.source, settings.pattern)
    if settings.checkpoint_iteration_file:
        return SourceSpec(ITERATION_FILE, settings.checkpoint_iteration_file)
    return None


def policy_enabled(settings: ProgressSettings) -> bool:
    return settings.max_no_progress_cycles > 0 and configured_source(settings) is not None


def judges(ledger: Ledger, settings: ProgressSettings) -> bool:
    """Whether cycles count: the guard is on and its source has existed at some look."""
    spec = configured_source(settings)
    return policy_enabled(settings) and spec is not None and ledger.seen_source == str(spec)


def guard_line(settings: ProgressSettings, ledger: Ledger, now_present: bool | None) -> str:
    """The launcher's one line at start: what the guard watches, or why it judges nothing."""
    spec = configured_source(settings)
    if spec is None:
        return GUARD_OFF
    if settings.max_no_progress_cycles <= 0:
        return f"progress source {spec}; the no-progress guard is off (max no-progress cycles <= 0)"
    if ledger.seen_source != str(spec) and not now_present:
        return (
            f"progress source {spec} does not exist yet: the no-progress guard judges nothing until it does"
        )
    return (
        f"progress source {spec}: stop after {settings.max_no_progress_cycles} cycles in a row "
        f"without progress (>= {settings.min_progress_iterations})"
    )


def last_iteration(ledger: Ledger) -> int | None:
    """The most recent iteration the ledger knows (a valid end, else a start)."""
    if not ledger.cycles:
        return None
    entry = ledger.cycles[-1]
    return entry.iteration_end if entry.iteration_end is not None else entry.iteration_start


def _last_mark(ledger: Ledger) -> str | None:
    if not ledger.cycles:
        return None
    entry = ledger.cycles[-1]
    return entry.mark_end if entry.mark_end is not None else entry.mark_start


def _is_file(settings: ProgressSettings) -> bool:
    spec = configured_source(settings)
    return spec is not None and spec.kind == FILE


def counted(reading: Reading, base: int, last_mark: str | None) -> Reading:
    """A ``file:`` reading as a step count: ``base``, plus one when the file was replaced."""
    if not reading.valid or not reading.present or reading.mark == last_mark:
        return dataclasses.replace(reading, iteration=base)
    return dataclasses.replace(reading, iteration=base + 1)


def end_reading(ledger: Ledger, settings: ProgressSettings, end: Reading) -> Reading:
    """``end`` relative to the open cycle (file sources count replacements since its start)."""
    entry = ledger.open_cycle
    if not _is_file(settings) or entry is None:
        return end
    return counted(end, entry.iteration_start, entry.mark_start)


def record_policy(ledger: Ledger, settings: ProgressSettings) -> Ledger:
    spec = configured_source(settings)
    return dataclasses.replace(
        ledger,
        source=str(spec) if spec is not None else None,
        pattern=spec.pattern if spec is not None else None,
        max_no_progress_cycles=settings.max_no_progress_cycles,
        min_progress_iterations=settings.min_progress_iterations,
    )


def effective_policy(
    settings: ProgressSettings, ledger: Ledger | None, explicit: Collection[str]
) -> ProgressSettings:
    """The launcher's policy from the ledger, except for keys the caller set explicitly.

    ``explicit`` holds dotted keys (``progress.max_no_progress_cycles``) that a command
    line, an environment variable or a config file actually set. The source and its older
    spelling ``checkpoint_iteration_file`` are one setting here.
    """
    if ledger is None:
        return settings
    changes: dict[str, object] = {
        name: value
        for name, value in (
            ("max_no_progress_cycles", ledger.max_no_progress_cycles),
            ("min_progress_iterations", ledger.min_progress_iterations),
        )
        if value is not None and f"progress.{name}" not in explicit
    }
    source_keys = {"progress.source", "progress.checkpoint_iteration_file", "progress.pattern"}
    if ledger.source is not None and not source_keys & set(explicit):
        changes.update(source=ledger.source, pattern=ledger.pattern, checkpoint_iteration_file=None)
    return dataclasses.replace(settings, **changes)  # type: ignore[arg-type]


def _seen(ledger: Ledger, reading: Reading, settings: ProgressSettings) -> Ledger:
    spec = configured_source(settings)
    if spec is None or not reading.present:
        return ledger
    return dataclasses.replace(ledger, seen_source=str(spec))


def open_cycle(
    ledger: Ledger,
    cycle: int,
    attempt: int,
    start: Reading,
    now: float | None,
    settings: ProgressSettings,
) -> Ledger:
    """Record that ``cycle`` starts; an unparsable start falls back to the last known iteration."""
    warnings = []
    known = last_iteration(ledger)
    if _is_file(settings):
        # The first look of all is the origin: step 0, whatever the file holds.
        start = counted(start, known or 0, _last_mark(ledger) if ledger.cycles else start.mark)
    iteration = start.iteration
    if not start.valid:
        iteration = known if known is not None else 0
        warnings.append(f"start: {start.warning}")
    cycles = [c for c in ledger.cycles if not (c.is_open and c.cycle == cycle)]
    entry = CycleEntry(
        cycle=cycle,
        attempt=attempt,
        iteration_start=iteration,
        started_at=now,
        warnings=warnings,
        mark_start=(start.mark if start.valid else _last_mark(ledger)) if _is_file(settings) else None,
        snapshot_start=start.snapshot,
    )
    ledger = _seen(ledger, start, settings)
    return dataclasses.replace(ledger, cycles=[*cycles, entry], stopped=None)


def cycle_progressed(start: int, end: Reading, min_progress_iterations: int) -> bool:
    return end.valid and end.iteration - start >= min_progress_iterations


def last_snapshot(ledger: Ledger) -> int | None:
    """The newest snapshot step the ledger knows of (any cycle's start or end)."""
    steps = [s for c in ledger.cycles for s in (c.snapshot_start, c.snapshot_end) if s is not None]
    return max(steps) if steps else None


def snapshot_progressed(ledger: Ledger, end: Reading, min_progress_iterations: int) -> bool:
    """Whether the newest snapshot moved past every snapshot the job had before: a job
    that only ever resumes from the same snapshot (and fails before the next one) makes
    none, whatever attempt it is in (a requeued attempt starts with empty memory and
    resumes from the persisted copy of that same step)."""
    if end.snapshot is None:
        return False
    before = last_snapshot(ledger)
    return before is None or end.snapshot - before >= min_progress_iterations


def counts_as_progress(ledger: Ledger, settings: ProgressSettings, end: Reading) -> bool:
    """Whether ``end`` would close the open cycle (if any) as progress: its source moved,
    or its newest snapshot did."""
    entry = ledger.open_cycle
    start = entry.iteration_start if entry is not None else (last_iteration(ledger) or 0)
    return cycle_progressed(
        start, end_reading(ledger, settings, end), settings.min_progress_iterations
    ) or snapshot_progressed(ledger, end, settings.min_progress_iterations)


def would_stop(ledger: Ledger, settings: ProgressSettings, end: Reading) -> bool:
    """Whether closing the open cycle with ``end`` would make the guard stop the job."""
    if not end.answered or counts_as_progress(ledger, settings, end):
        return False
    seen = _seen(ledger, end, settings)
    return judges(seen, settings) and ledger.streak + 1 >= settings.max_no_progress_cycles


def close_cycle(
    ledger: Ledger,
    end: Reading,
    outcome: str,
    settings: ProgressSettings,
    now: float | None,
    *,
    cycle: int | None = None,
    attempt: int | None = None,
) -> Ledger:
    """Close the open cycle (or record ``cycle`` if nothing is open) and update the streak.

    Progress >= ``min_progress_iterations`` resets the streak to 0; anything else,
    including a decrease or an unparsable end reading, adds one, once the source has
    existed. Before that, and when the end look did not answer in time, the cycle is
    recorded but not judged.
    """
    entry = ledger.open_cycle
    if entry is not None and cycle is not None and entry.cycle != cycle:
        # A different cycle was left open: it was never closed, so it was interrupted.
        ledger = close_cycle(ledger, end, INTERRUPTED, settings, now)
        entry = None
    cycles = list(ledger.cycles)
    if entry is None:
        if cycle is None:
            return ledger
        known = last_iteration(ledger)
        entry = CycleEntry(
            cycle=cycle,
            attempt=attempt if attempt is not None else (cycles[-1].attempt if cycles else 0),
            iteration_start=known if known is not None else 0,
            warnings=["start: not recorded; using the last known iteration"],
            mark_start=_last_mark(ledger),
        )
        ledger = dataclasses.replace(ledger, cycles=[*cycles, entry])
        cycles = list(ledger.cycles)
    end = end_reading(ledger, settings, end)
    cycles.pop()
    ledger = _seen(ledger, end, settings)
    judged = judges(ledger, settings) and end.answered
    progressed = cycle_progressed(
        entry.iteration_start, end, settings.min_progress_iterations
    ) or snapshot_progressed(ledger, end, settings.min_progress_iterations)
    warnings = list(entry.warnings)
    if not end.valid:
        warnings.append(f"end: {end.warning}")
    closed = dataclasses.replace(
        entry,
        iteration_end=end.iteration if end.valid else None,
        outcome=outcome,
        progressed=progressed if judged else None,
        ended_at=now,
        warnings=warnings,
        mark_end=end.mark if _is_file(settings) and end.valid else None,
        snapshot_end=end.snapshot,
    )
    if not judged:
        streak = ledger.streak
    else:
        streak = 0 if progressed else ledger.streak + 1
    return dataclasses.replace(ledger, cycles=[*cycles, closed], streak=streak)


def revise_last(ledger: Ledger, settings: ProgressSettings, now: Reading) -> Ledger:
    """Count the last closed cycle as progress after all when a later look shows it made some.

    Nothing runs between the end of one cycle and the start of the next, so a save that
    shows only at the next start was made by the last cycle: its workers finished it while
    being stopped, after the early look that closed the cycle. Only a cycle counted as no
    progress is revised; the streak it ended becomes 0.
    """
    if not ledger.cycles or ledger.open_cycle is not None or not now.valid:
        return ledger
    last = ledger.cycles[-1]
    if last.progressed is not False:
        return ledger
    reopened = dataclasses.replace(
        ledger, cycles=[*ledger.cycles[:-1], dataclasses.replace(last, outcome=None, progressed=None)]
    )
    if not counts_as_progress(reopened, settings, now):
        return ledger
    end = end_reading(reopened, settings, now)
    revised = dataclasses.replace(
        last,
        iteration_end=end.iteration,
        progressed=True,
        mark_end=end.mark if _is_file(settings) else None,
        snapshot_end=end.snapshot if end.snapshot is not None else last.snapshot_end,
        warnings=[
            *last.warnings,
            "end: revised at the next start, which found progress saved while stopping",
        ],
    )
    return dataclasses.replace(ledger, cycles=[*ledger.cycles[:-1], revised], streak=0)


def stop_reason(ledger: Ledger, settings: ProgressSettings) -> str | None:
    """Why no further cycle may start, or None. Pure: the ledger and the settings decide."""
    if not judges(ledger, settings) or ledger.streak < settings.max_no_progress_cycles:
        return None
    if _is_file(settings):
        where = f"{configured_source(settings)} not replaced"
    else:
        stuck = last_iteration(ledger)
        where = f"iteration stuck at {stuck}" if stuck is not None else "no iteration read"
    return f"no progress in the last {ledger.streak} cycles ({where})"


def mark_stopped(ledger: Ledger, attempt: int, cycle: int, reason: str, now: float | None) -> Ledger:
    return dataclasses.replace(
        ledger, stopped=StopEntry(attempt=attempt, cycle=cycle, reason=reason, time=now)
    )


def reset_streak(ledger: Ledger, now: float, note: str = "") -> Ledger:
    """An operator's fresh start: history is kept, the streak and the stop are cleared."""
    after = ledger.cycles[-1].cycle if ledger.cycles else None
    entry = ResetEntry(time=now, streak_before=ledger.streak, after_cycle=after, note=note)
    return dataclasses.replace(ledger, streak=0, stopped=None, resets=[*ledger.resets, entry])


def provisional_view(ledger: Ledger, settings: ProgressSettings, end: Reading | None) -> Ledger:
    """The ledger as the next attempt would see it: a cycle left open is closed as interrupted
    with ``end`` (None: not read, because nothing is open or the guard is off). Nothing is written."""
    if ledger.open_cycle is None or end is None or not policy_enabled(settings):
        return ledger
    return close_cycle(ledger, end, INTERRUPTED, settings, None)
