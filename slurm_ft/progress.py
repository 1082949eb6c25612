"""The no-progress guard: the checkpoint-iteration file, the ledger, and the policy.

A job that crashes at the same spot every time would otherwise burn its whole allocation,
restart after restart and requeue after requeue. The only trustworthy sign of progress is
the trainer's own checkpoint counter (Megatron's ``latest_checkpointed_iteration.txt`` or
any file holding one integer), so a cycle counts as progress only when that counter moved
forward by at least ``min_progress_iterations`` between the cycle's start and its end.

The module has three layers, kept apart so the policy can be tested as data:

* the edges: :func:`read_iteration` (the trainer's file, read defensively because the
  trainer may be rewriting it non-atomically right now), :func:`load_ledger` and
  :func:`save_ledger` (our own JSON file in the state dir, replaced atomically);
* pure functions over :class:`Ledger` values: :func:`open_cycle`, :func:`close_cycle`,
  :func:`stop_reason`, :func:`reset_streak`, :func:`effective_policy`;
* :class:`ProgressTracker`, the thin object node 0 of the launcher drives once per cycle.

A cycle ended by a signal (preemption, ``scancel``, the time limit) counts by the same rule
as any other: if the trainer checkpointed during the cycle it made progress, otherwise it
did not. A job preempted again and again before its first checkpoint is wasting its
allocation just like one that crashes, and the operator can ``reset`` when that is expected.
A cycle the launcher never closed (the launcher on node 0 was killed or its node was lost)
is closed at the next look, with the iteration read then, and outcome ``interrupted``.

Without a checkpoint-iteration file there is nothing to measure progress with, so the
tracker still records cycles but never stops a job. Nothing here ever writes the trainer's
file. No torch and no rich at import time: ``slurm-ft-progress check`` must start quickly.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import stat
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_ft.config import ProgressSettings

if TYPE_CHECKING:
    from slurm_ft.statedir import StateDir

LEDGER_VERSION = 1
RELEASE = "release"
INTERRUPTED = "interrupted"
MAX_ITERATION_FILE_BYTES = 4096
_QUOTE_LIMIT = 60
_INTEGER = re.compile(r"[0-9]+")


class LedgerError(Exception):
    """The ledger exists but cannot be used; the message says what is wrong and how to reset."""


# --------------------------------------------------------------------------- iteration file


@dataclass(frozen=True)
class IterationReading:
    """One look at the checkpoint-iteration file.

    ``warning`` is set when the content never parsed (or could not be read); then
    ``iteration`` is 0 and meaningless, and the reading counts as no progress.
    """

    iteration: int
    warning: str | None = None

    @property
    def valid(self) -> bool:
        return self.warning is None


@dataclass(frozen=True)
class _Snapshot:
    ident: tuple[int, int, int, int]  # device, inode, size, mtime_ns
    data: bytes


_MISSING = _Snapshot((-2, -2, -2, -2), b"")


def parse_iteration(text: str) -> int | None:
    """An integer with optional surrounding whitespace, or ``release`` (iteration 0)."""
    stripped = text.strip()
    if stripped == RELEASE:
        return 0
    if _INTEGER.fullmatch(stripped):
        return int(stripped)
    return None


def _snapshot(path: str) -> _Snapshot | None:
    """Stat, read, stat; None when the file does not exist.

    Opened non-blocking and refused unless it is a regular file, so that a FIFO or a
    device named by mistake gives a warning instead of a launcher that hangs.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        data = os.read(fd, MAX_ITERATION_FILE_BYTES + 1)
    finally:
        os.close(fd)
    try:
        after = os.stat(path)
    except FileNotFoundError:
        return None
    ident = (after.st_dev, after.st_ino, after.st_size, after.st_mtime_ns)
    if (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns) != ident:
        # Changed while we read: make the comparison below fail.
        ident = (-1, -1, -1, -1)
    return _Snapshot(ident, data)


def _quote(data: bytes) -> str:
    text = data.decode("utf-8", errors="replace")
    if len(text) > _QUOTE_LIMIT:
        return repr(text[:_QUOTE_LIMIT]) + "..."
    return repr(text)


def read_iteration(
    path: str | None,
    *,
    attempts: int = 5,
    retry_delay: float = 0.2,
    settle: float = 0.05,
    floor: int | None = None,
) -> IterationReading:
    """Read the trainer's iteration file without trusting a half-written value.

    Trainers rewrite this file in place (open with truncation, then write), so a reader can
    see an empty file or a prefix of the new number, and a prefix such as ``12`` of
    ``12345`` parses fine. A value is accepted only when two looks ``settle`` seconds apart
    agree on content, size, inode and mtime. Up to ``attempts`` such looks are made,
    ``retry_delay`` apart (about a second in all by default).

    A torn value is always smaller than the value being written, so the short check is
    enough for readings that can only help the job; ``floor`` names the value below which a
    reading would count against it (the cycle's start plus the minimum progress, or the last
    known iteration). Such a reading must hold still through every look, the whole second,
    before it is believed: a torn prefix survives that only if the writer stalls for a
    second between two writes of a few bytes. Otherwise the reading is flagged.

    ``path`` None (no file configured) and a missing file both read as iteration 0.
    """
    if path is None:
        return IterationReading(0)
    tries = max(1, attempts)
    last: _Snapshot | None = None
    problem = "it is empty"
    candidate: _Snapshot | None = None
    held = 0
    for attempt in range(tries):
        if attempt:
            time.sleep(retry_delay)
        try:
            first = _snapshot(path)
            time.sleep(settle)
            second = _snapshot(path)
        except OSError as exc:
            problem = f"it cannot be read ({exc.strerror or exc})"
            last, candidate, held = None, None, 0
            continue
        if first is None and second is None:
            second = _MISSING
            value: int | None = 0
        elif first is None or second is None or first != second:
            problem = "it kept changing while being read"
            last, candidate, held = second, None, 0
            continue
        elif len(second.data) > MAX_ITERATION_FILE_BYTES:
            problem = f"it is larger than {MAX_ITERATION_FILE_BYTES} bytes"
            last = second
            continue
        else:
            last = second
            value = parse_iteration(second.data.decode("utf-8", errors="replace"))
            if value is None:
                problem = "it is empty" if not second.data.strip() else "it is not an integer or 'release'"
                continue
        if floor is None or value >= floor:
            return IterationReading(value)
        held = held + 1 if second == candidate else 1
        candidate = second
        if held >= tries:
            return IterationReading(value)
        problem = f"it read {value}, below {floor}, but did not hold still through every read"
    content = f": content {_quote(last.data)}" if last is not None and last is not _MISSING else ""
    verb = "did not hold still" if candidate is not None else "did not parse"
    return IterationReading(
        0,
        f"checkpoint iteration file {path} {verb} after {tries} reads ({problem}){content}; "
        "counting as no progress",
    )


# --------------------------------------------------------------------------- ledger data


@dataclass
class CycleEntry:
    """One cycle as node 0 saw it. Open (still running, or never closed) while outcome is None.

    ``iteration_end`` is None for an open cycle and for a cycle whose end reading did not
    parse; ``progressed`` is None while open.
    """

    cycle: int
    attempt: int
    iteration_start: int
    iteration_end: int | None = None
    outcome: str | None = None
    progressed: bool | None = None
    started_at: float | None = None
    ended_at: float | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def is_open(self) -> bool:
        return self.outcome is None

    @property
    def progress(self) -> int | None:
        if self.iteration_end is None:
            return None
        return self.iteration_end - self.iteration_start


@dataclass
class ResetEntry:
    """An operator cleared the streak (after fixing the cause) or replaced a corrupt ledger."""

    time: float
    streak_before: int
    after_cycle: int | None
    note: str = ""


@dataclass
class StopEntry:
    """Node 0 refused to start a cycle; kept so `status` can say why the job ended."""

    attempt: int
    cycle: int
    reason: str
    time: float | None = None


@dataclass
class Ledger:
    """The job's progress history; survives Slurm requeues in the state dir.

    ``iteration_file``, ``max_no_progress_cycles`` and ``min_progress_iterations`` are the
    policy the launcher last applied, so that ``slurm-ft-progress check`` in the batch script
    judges by the same rule without repeating the launcher's options.
    """

    cycles: list[CycleEntry] = field(default_factory=list)
    streak: int = 0
    version: int = LEDGER_VERSION
    iteration_file: str | None = None
    max_no_progress_cycles: int | None = None
    min_progress_iterations: int | None = None
    resets: list[ResetEntry] = field(default_factory=list)
    stopped: StopEntry | None = None

    @property
    def open_cycle(self) -> CycleEntry | None:
        if self.cycles and self.cycles[-1].is_open:
            return self.cycles[-1]
        return None


def ledger_to_json(ledger: Ledger) -> dict[str, Any]:
    return dataclasses.asdict(ledger)


def _expect(doc: Mapping[str, Any], key: str, types: type | tuple[type, ...], where: str) -> Any:
    if key not in doc:
        raise LedgerError(f"{where}: missing {key!r}")
    value = doc[key]
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise LedgerError(f"{where}: {key!r} has the wrong type ({value!r})")
    if not isinstance(value, types):
        raise LedgerError(f"{where}: {key!r} has the wrong type ({value!r})")
    return value


def _optional(doc: Mapping[str, Any], key: str, types: type | tuple[type, ...], where: str) -> Any:
    if doc.get(key) is None:
        return None
    return _expect(doc, key, types, where)


def _cycle_from_json(doc: Any, index: int) -> CycleEntry:
    where = f"cycles[{index}]"
    if not isinstance(doc, dict):
        raise LedgerError(f"{where}: expected an object")
    warnings = doc.get("warnings") or []
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise LedgerError(f"{where}: 'warnings' must be a list of strings")
    return CycleEntry(
        cycle=_expect(doc, "cycle", int, where),
        attempt=_expect(doc, "attempt", int, where),
        iteration_start=_expect(doc, "iteration_start", int, where),
        iteration_end=_optional(doc, "iteration_end", int, where),
        outcome=_optional(doc, "outcome", str, where),
        progressed=_optional(doc, "progressed", bool, where),
        started_at=_optional(doc, "started_at", (int, float), where),
        ended_at=_optional(doc, "ended_at", (int, float), where),
        warnings=list(warnings),
    )


def ledger_from_json(doc: Any) -> Ledger:
    """Validate a parsed ledger; LedgerError names the first thing that is wrong."""
    if not isinstance(doc, dict):
        raise LedgerError("expected a JSON object")
    version = _expect(doc, "version", int, "ledger")
    if version != LEDGER_VERSION:
        raise LedgerError(f"unsupported ledger version {version} (this slurm-ft reads {LEDGER_VERSION})")
    cycles_doc = _expect(doc, "cycles", list, "ledger")
    cycles = [_cycle_from_json(c, i) for i, c in enumerate(cycles_doc)]
    streak = _expect(doc, "streak", int, "ledger")
    if streak < 0:
        raise LedgerError(f"ledger: 'streak' is negative ({streak})")
    resets = []
    for i, r in enumerate(_optional(doc, "resets", list, "ledger") or []):
        where = f"resets[{i}]"
        if not isinstance(r, dict):
            raise LedgerError(f"{where}: expected an object")
        resets.append(
            ResetEntry(
                time=_expect(r, "time", (int, float), where),
                streak_before=_expect(r, "streak_before", int, where),
                after_cycle=_optional(r, "after_cycle", int, where),
                note=_optional(r, "note", str, where) or "",
            )
        )
    stopped = None
    stopped_doc = _optional(doc, "stopped", dict, "ledger")
    if stopped_doc is not None:
        stopped = StopEntry(
            attempt=_expect(stopped_doc, "attempt", int, "stopped"),
            cycle=_expect(stopped_doc, "cycle", int, "stopped"),
            reason=_expect(stopped_doc, "reason", str, "stopped"),
            time=_optional(stopped_doc, "time", (int, float), "stopped"),
        )
    return Ledger(
        cycles=cycles,
        streak=streak,
        version=version,
        iteration_file=_optional(doc, "iteration_file", str, "ledger"),
        max_no_progress_cycles=_optional(doc, "max_no_progress_cycles", int, "ledger"),
        min_progress_iterations=_optional(doc, "min_progress_iterations", int, "ledger"),
        resets=resets,
        stopped=stopped,
    )


def reset_hint(state_dir: Path) -> str:
    return f"run `slurm-ft-progress reset --yes --state-dir {state_dir}` to start over"


def load_ledger(path: Path) -> Ledger | None:
    """The ledger at ``path``; None when absent. Never repairs or replaces a bad one."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LedgerError(f"cannot read ledger {path}: {exc.strerror or exc}") from None
    backup = path.with_name(path.name + ".bak")
    keep = f" (the previous version is kept in {backup})" if backup.exists() else ""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        what = f"not valid JSON ({exc.msg} at line {exc.lineno})" if hasattr(exc, "lineno") else str(exc)
        raise LedgerError(f"ledger {path} is corrupt: {what}{keep}; {reset_hint(path.parent)}") from None
    try:
        return ledger_from_json(doc)
    except LedgerError as exc:
        raise LedgerError(f"ledger {path} is corrupt: {exc}{keep}; {reset_hint(path.parent)}") from None


def save_ledger(path: Path, ledger: Ledger) -> None:
    """Replace the ledger atomically, keeping the previous version as ``.bak``."""
    from slurm_ft import atomicfile  # tempfile is not needed by the read-only commands

    atomicfile.write_json(path, ledger_to_json(ledger), keep_backup=True)


# --------------------------------------------------------------------------- pure policy


def policy_enabled(settings: ProgressSettings) -> bool:
    return settings.max_no_progress_cycles > 0 and settings.checkpoint_iteration_file is not None


def last_iteration(ledger: Ledger) -> int | None:
    """The most recent iteration the ledger knows (a valid end, else a start)."""
    if not ledger.cycles:
        return None
    entry = ledger.cycles[-1]
    return entry.iteration_end if entry.iteration_end is not None else entry.iteration_start


def record_policy(ledger: Ledger, settings: ProgressSettings) -> Ledger:
    return dataclasses.replace(
        ledger,
        iteration_file=settings.checkpoint_iteration_file,
        max_no_progress_cycles=settings.max_no_progress_cycles,
        min_progress_iterations=settings.min_progress_iterations,
    )


def effective_policy(
    settings: ProgressSettings, ledger: Ledger | None, explicit: Collection[str]
) -> ProgressSettings:
    """The launcher's policy from the ledger, except for keys the caller set explicitly.

    ``explicit`` holds dotted keys (``progress.max_no_progress_cycles``) that a command
    line, an environment variable or a config file actually set.
    """
    if ledger is None:
        return settings
    recorded = {
        "checkpoint_iteration_file": ledger.iteration_file,
        "max_no_progress_cycles": ledger.max_no_progress_cycles,
        "min_progress_iterations": ledger.min_progress_iterations,
    }
    changes = {
        name: value
        for name, value in recorded.items()
        if value is not None and f"progress.{name}" not in explicit
    }
    return dataclasses.replace(settings, **changes)


def open_cycle(
    ledger: Ledger, cycle: int, attempt: int, start: IterationReading, now: float | None
) -> Ledger:
    """Record that ``cycle`` starts; an unparsable start falls back to the last known iteration."""
    warnings = []
    iteration = start.iteration
    if not start.valid:
        known = last_iteration(ledger)
        iteration = known if known is not None else 0
        warnings.append(f"start: {start.warning}")
    cycles = [c for c in ledger.cycles if not (c.is_open and c.cycle == cycle)]
    entry = CycleEntry(
        cycle=cycle, attempt=attempt, iteration_start=iteration, started_at=now, warnings=warnings
    )
    return dataclasses.replace(ledger, cycles=[*cycles, entry], stopped=None)


def cycle_progressed(start: int, end: IterationReading, min_progress_iterations: int) -> bool:
    return end.valid and end.iteration - start >= min_progress_iterations


def close_cycle(
    ledger: Ledger,
    end: IterationReading,
    outcome: str,
    settings: ProgressSettings,
    now: float | None,
    *,
    cycle: int | None = None,
    attempt: int | None = None,
) -> Ledger:
    """Close the open cycle (or record ``cycle`` if nothing is open) and update the streak.

    Progress >= ``min_progress_iterations`` resets the streak to 0; anything else,
    including a decrease or an unparsable end reading, adds one.
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
        )
    else:
        cycles.pop()
    progressed = cycle_progressed(entry.iteration_start, end, settings.min_progress_iterations)
    warnings = list(entry.warnings)
    if not end.valid:
        warnings.append(f"end: {end.warning}")
    closed = dataclasses.replace(
        entry,
        iteration_end=end.iteration if end.valid else None,
        outcome=outcome,
        progressed=progressed,
        ended_at=now,
        warnings=warnings,
    )
    streak = 0 if progressed else ledger.streak + 1
    return dataclasses.replace(ledger, cycles=[*cycles, closed], streak=streak)


def stop_reason(ledger: Ledger, settings: ProgressSettings) -> str | None:
    """Why no further cycle may start, or None. Pure: the ledger and the settings decide."""
    if not policy_enabled(settings) or ledger.streak < settings.max_no_progress_cycles:
        return None
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


def provisional_view(
    ledger: Ledger, settings: ProgressSettings, read: Callable[..., IterationReading]
) -> Ledger:
    """The ledger as the next attempt would see it: a cycle left open is closed as interrupted.

    Used by the read-only commands; nothing is written.
    """
    entry = ledger.open_cycle
    if entry is None or not policy_enabled(settings):
        return ledger
    end = read(
        settings.checkpoint_iteration_file, floor=entry.iteration_start + settings.min_progress_iterations
    )
    return close_cycle(ledger, end, INTERRUPTED, settings, None)


# --------------------------------------------------------------------------- tracker


class ProgressTracker:
    """Node 0's guard, driven by the launcher around every cycle.

    The ledger is re-read from disk at every call so that ``slurm-ft-progress reset`` run
    while the job is alive takes effect at the next cycle boundary instead of being
    overwritten by this process's stale copy.
    """

    def __init__(
        self,
        state: StateDir,
        settings: ProgressSettings,
        attempt: int,
        *,
        read: Callable[..., IterationReading] = read_iteration,
        clock: Callable[[], float] = time.time,
        on_warning: Callable[[str], None] | None = None,
    ) -> None:
        self._path = state.ledger
        self._settings = settings
        self._attempt = attempt
        self._read = read
        self._clock = clock
        self._on_warning = on_warning
        self.ledger = load_ledger(self._path) or Ledger()

    def _reading(self, ledger: Ledger, cycle: int | None) -> IterationReading:
        """One look at the file; ``floor`` is where the reading would start to count against the job."""
        entry = ledger.open_cycle
        known = last_iteration(ledger)
        if entry is not None and (cycle is None or entry.cycle == cycle):
            floor: int | None = entry.iteration_start + self._settings.min_progress_iterations
        elif cycle is not None and known is not None:
            floor = known + self._settings.min_progress_iterations
        else:
            floor = known
        reading = self._read(self._settings.checkpoint_iteration_file, floor=floor)
        if reading.warning and self._on_warning is not None:
            self._on_warning(reading.warning)
        return reading

    def _reload(self) -> Ledger:
        return record_policy(load_ledger(self._path) or Ledger(), self._settings)

    def _save(self, ledger: Ledger) -> None:
        save_ledger(self._path, ledger)
        self.ledger = ledger

    def before_cycle(self, cycle: int) -> str | None:
        """The stop reason (every launcher then exits 93), or None after recording the start."""
        ledger = self._reload()
        reading = self._reading(ledger, None)
        now = self._clock()
        if ledger.open_cycle is not None:
            ledger = close_cycle(ledger, reading, INTERRUPTED, self._settings, now)
        reason = stop_reason(ledger, self._settings)
        if reason is not None:
            self._save(mark_stopped(ledger, self._attempt, cycle, reason, now))
            return reason
        self._save(open_cycle(ledger, cycle, self._attempt, reading, now))
        return None

    def after_cycle(self, cycle: int, outcome: str) -> None:
        """Read the end iteration, update the streak, save atomically."""
        ledger = self._reload()
        reading = self._reading(ledger, cycle)
        ledger = close_cycle(
            ledger, reading, outcome, self._settings, self._clock(), cycle=cycle, attempt=self._attempt
        )
        self._save(ledger)

    def stop_reason(self) -> str | None:
        return stop_reason(self.ledger, self._settings)
