"""Node 0's guard, driven by the launcher around every cycle, and the reading rule it shares
with ``slurm-ft-progress check``.

The restart path does not wait for the guard unless the guard's decision depends on it:

* a reading can be started while the workers are being stopped (:meth:`begin_reading`)
  and is collected by :meth:`ProgressTracker.after_cycle`; without that call,
  ``after_cycle`` takes one look itself (one short child process);
* that one look is believed unless it is what would make the guard stop the job; only
  then are the looks repeated for about a second (:func:`reading.settled`), after the
  workers are gone;
* the end reading of a cycle is the start reading of the next one: ``before_cycle`` reads
  nothing more in the same launcher (but the job's newest snapshot step again, one small
  file read, when the cycle before counted as no progress); a new attempt's launcher reads
  once.

A look taken while the workers are still being stopped may miss a checkpoint they finish
while stopping. It is never lost and never makes the guard stop a job: a look that would
stop the job is repeated after the workers are gone; otherwise, in the same launcher, the
next cycle starts from that same early look and so counts the save, and in a new attempt
(after a requeue) the first look revises the last cycle to progress
(:func:`policy.revise_last`). It can at most delay a stop by one cycle.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from slurm_ft.config import ProgressSettings
from slurm_ft.progress import policy
from slurm_ft.progress.ledger import INTERRUPTED, Ledger, LedgerFiles, load_ledger, save_ledger
from slurm_ft.progress.reading import CONFIRM_LOOKS, PendingReading, Reading, first, settled
from slurm_ft.settingsyntax import SourceSpec

if TYPE_CHECKING:
    from slurm_ft.statedir import StateDir

ABSENT = Reading(0, present=False)


def confirmed(ledger: Ledger, settings: ProgressSettings, spec: SourceSpec, quick: Reading) -> Reading:
    """``quick`` when it cannot stop the job; else the reading of several looks, taken now."""
    if not policy.would_stop(ledger, settings, quick):
        return quick
    pending = PendingReading(spec, settings.read_timeout, looks=CONFIRM_LOOKS)
    return settled(pending, lambda r: policy.counts_as_progress(ledger, settings, r))


def read_for_verdict(ledger: Ledger, settings: ProgressSettings) -> Reading | None:
    """How ``slurm-ft-progress`` closes a cycle left open; None when there is nothing to read."""
    spec = policy.configured_source(settings)
    if spec is None or ledger.open_cycle is None or not policy.policy_enabled(settings):
        return None
    return confirmed(ledger, settings, spec, first(PendingReading(spec, settings.read_timeout)))


class ProgressTracker:
    """The guard of one launcher (node 0).

    The ledger is re-read from disk at every call so that ``slurm-ft-progress reset`` run
    while the job is alive takes effect at the next cycle boundary instead of being
    overwritten by this process's stale copy. The source is first read as soon as the
    tracker exists, so that :meth:`start_line` and the first ``before_cycle`` find it done.
    """

    def __init__(
        self,
        state: StateDir,
        settings: ProgressSettings,
        attempt: int,
        *,
        clock: Callable[[], float] = time.time,
        on_warning: Callable[[str], None] | None = None,
        files: LedgerFiles | None = None,
        snapshot_step: Callable[[], int | None] | None = None,
    ) -> None:
        self._path = state.ledger
        self._snapshot_step = snapshot_step  # the job's newest snapshot (launch.snapshots.readings)
        self._settings = settings
        self._spec = policy.configured_source(settings)
        self._attempt = attempt
        self._clock = clock
        self._on_warning = on_warning
        self._files = files  # the launcher's bounded state-dir access
        self.ledger = load_ledger(self._path, files) or Ledger()
        self._pending: PendingReading | None = None
        self._fresh: Reading | None = None  # taken with no workers running: the next start
        self.begin_reading()

    def begin_reading(self) -> PendingReading | None:
        """Start a look at the source now and return at once (None: no source); the next call
        that needs a reading collects it. Meant for the moment a cycle's end is known, before
        its workers are stopped, so that the look overlaps the stop."""
        if self._spec is None:
            return None
        if self._pending is not None:
            self._pending.abandon()
        self._pending = PendingReading(self._spec, self._settings.read_timeout)
        return self._pending

    def start_line(self) -> str:
        """One line for the launcher's log at start: what the guard watches, or that it is off."""
        if self._spec is not None and self._fresh is None:
            self._fresh = self._take()
        present = self._fresh.present if self._fresh is not None else None
        return policy.guard_line(self._settings, self.ledger, present)

    def _take(self) -> Reading:
        """One look: the one begun earlier, else a new one (waits at most the read timeout)."""
        if self._spec is None:
            return ABSENT
        pending = self._pending or PendingReading(self._spec, self._settings.read_timeout)
        self._pending = None
        return self._with_snapshot(first(pending))

    def _with_snapshot(self, reading: Reading) -> Reading:
        """The reading with the job's newest snapshot step (the last line of node rank 0's
        readings: one bounded read, no child needed)."""
        if self._snapshot_step is None:
            return reading
        return dataclasses.replace(reading, snapshot=self._snapshot_step())

    def _end(self, ledger: Ledger, quick: Reading) -> Reading:
        if self._spec is None:
            return quick
        reading = confirmed(ledger, self._settings, self._spec, quick)
        reading = dataclasses.replace(reading, snapshot=quick.snapshot)
        if reading.warning and self._on_warning is not None:
            self._on_warning(reading.warning)
        return reading

    def _reload(self) -> Ledger:
        return policy.record_policy(load_ledger(self._path, self._files) or Ledger(), self._settings)

    def _save(self, ledger: Ledger) -> None:
        save_ledger(self._path, ledger, self._files)
        self.ledger = ledger

    def before_cycle(self, cycle: int) -> str | None:
        """The stop reason (every launcher then exits 93), or None after recording the start."""
        ledger = self._reload()
        now = self._clock()
        start = self._fresh
        self._fresh = None
        if ledger.open_cycle is not None:
            start = self._end(ledger, start or self._take())
            ledger = policy.close_cycle(ledger, start, INTERRUPTED, self._settings, now)
        else:
            if start is None:
                start = self._take()
                if start.warning and self._on_warning is not None:
                    self._on_warning(start.warning)
            elif ledger.cycles and ledger.cycles[-1].progressed is False:
                # That end reading may predate the last snapshot readings: node rank 0's
                # launcher, on another host, writes them until its workers are stopped,
                # which is before it joined this cycle.
                start = self._with_snapshot(start)
            # A no-op when ``start`` is this launcher's own end reading of that cycle and no
            # snapshot reading came after it.
            ledger = policy.revise_last(ledger, self._settings, start)
        reason = policy.stop_reason(ledger, self._settings)
        if reason is not None:
            self._save(policy.mark_stopped(ledger, self._attempt, cycle, reason, now))
            if self._pending is not None:  # no look is needed any more: leave no child behind
                self._pending.abandon()
                self._pending = None
            return reason
        self._save(policy.open_cycle(ledger, cycle, self._attempt, start, now, self._settings))
        return None

    def after_cycle(
        self,
        cycle: int,
        outcome: str,
        gaps: tuple[float | None, float | None] = (None, None),
        startup: float | None = None,
    ) -> None:
        """Take the end reading (the one begun at the cycle's end, if any), update the
        streak, save atomically. Waits only when the reading could stop the job. ``gaps``:
        the cycle's longest silence and iteration gaps, ``startup`` its start-up (the
        learned hang timeouts)."""
        ledger = self._reload()
        reading = self._end(ledger, self._take())
        ledger = policy.close_cycle(
            ledger, reading, outcome, self._settings, self._clock(), cycle=cycle, attempt=self._attempt
        )
        for entry in reversed(ledger.cycles):
            if entry.cycle == cycle:
                entry.silence_gap, entry.iteration_gap = gaps
                entry.startup = startup
                break
        self._save(ledger)
        self._fresh = reading

    def learned_gaps(self) -> tuple[float, float]:
        """The job's longest silence and iteration gaps over every recorded cycle (0: none)."""
        cycles = self.ledger.cycles
        return (
            max((c.silence_gap for c in cycles if c.silence_gap), default=0.0),
            max((c.iteration_gap for c in cycles if c.iteration_gap), default=0.0),
        )

    def known_startup(self) -> float:
        """The job's start-up: the longest any recorded cycle showed (0: none known)."""
        return max((c.startup for c in self.ledger.cycles if c.startup), default=0.0)

    def stop_reason(self) -> str | None:
        return policy.stop_reason(self.ledger, self._settings)
