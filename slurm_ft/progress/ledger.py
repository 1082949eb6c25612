"""The job's progress history (the ledger): data, JSON form, and the file in the state dir.

Written by node 0 of the launcher only, atomically (temp file, fsync, rename, previous
version kept as ``.bak``); read by ``slurm-ft-progress`` in the batch script between
requeues. Never repaired silently: a corrupt ledger is an error that names the way out.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

LEDGER_VERSION = 1
INTERRUPTED = "interrupted"


class LedgerError(Exception):
    """The ledger exists but cannot be used; the message says what is wrong and how to reset."""


@dataclass
class CycleEntry:
    """One cycle as node 0 saw it. Open (still running, or never closed) while outcome is None.

    ``iteration_end`` is None for an open cycle and for a cycle whose end reading did not
    parse; ``progressed`` is None while open, and for a closed cycle the guard did not
    judge (its source had never existed). ``mark_start``/``mark_end`` are the identities
    of a ``file:`` source, whose every replacement counts as one step.
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
    mark_start: str | None = None
    mark_end: str | None = None
    # The longest gaps between the job's signs of life seen in the cycle (silence) and
    # between moves of its progress source (iteration): the learned hang timeouts' memory.
    silence_gap: float | None = None
    iteration_gap: float | None = None
    # How long the cycle took to start (s from its start to the end of its start-up's last
    # long silence, ``hang.learn.startup_seen``): a later cycle's warm-up ends from it.
    startup: float | None = None
    # The job's newest snapshot step (``--snapshot-memory``; the last reading of node rank
    # 0's launcher) at the cycle's start and end: a snapshot that moved on is progress too,
    # one that stayed put is not.
    snapshot_start: int | None = None
    snapshot_end: int | None = None

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

    ``source`` (with ``pattern``), ``max_no_progress_cycles`` and
    ``min_progress_iterations`` are the policy the launcher last applied, so that
    ``slurm-ft-progress check`` in the batch script judges by the same rule without
    repeating the launcher's options. ``seen_source`` is the source once found present:
    until the configured source has existed, the guard judges nothing. Ledgers written
    before sources existed carry ``iteration_file`` instead; they read as that
    ``iteration-file:`` source, seen.
    """

    cycles: list[CycleEntry] = field(default_factory=list)
    streak: int = 0
    version: int = LEDGER_VERSION
    source: str | None = None
    pattern: str | None = None
    seen_source: str | None = None
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
        mark_start=_optional(doc, "mark_start", str, where),
        mark_end=_optional(doc, "mark_end", str, where),
        silence_gap=_optional(doc, "silence_gap", (int, float), where),
        iteration_gap=_optional(doc, "iteration_gap", (int, float), where),
        startup=_seconds(doc, "startup", where),
        snapshot_start=_optional(doc, "snapshot_start", int, where),
        snapshot_end=_optional(doc, "snapshot_end", int, where),
    )


def _seconds(doc: Mapping[str, Any], key: str, where: str) -> float | None:
    """An optional duration: a finite number of seconds, not negative."""
    value = _optional(doc, key, (int, float), where)
    if value is not None and not 0 <= value < math.inf:
        raise LedgerError(f"{where}: {key!r} is not a duration in seconds ({value!r})")
    return None if value is None else float(value)


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
    source = _optional(doc, "source", str, "ledger")
    seen = _optional(doc, "seen_source", str, "ledger")
    legacy = _optional(doc, "iteration_file", str, "ledger")
    if source is None and legacy is not None:
        source = seen = f"iteration-file:{legacy}"
    return Ledger(
        cycles=cycles,
        streak=streak,
        version=version,
        source=source,
        pattern=_optional(doc, "pattern", str, "ledger"),
        seen_source=seen,
        max_no_progress_cycles=_optional(doc, "max_no_progress_cycles", int, "ledger"),
        min_progress_iterations=_optional(doc, "min_progress_iterations", int, "ledger"),
        resets=resets,
        stopped=stopped,
    )


def reset_hint(state_dir: Path) -> str:
    return f"run `slurm-ft-progress reset --yes --state-dir {state_dir}` to start over"


class LedgerFiles(Protocol):
    """Where a launcher reads and writes its state dir (``launch.books.stateio.StateIO``: bounded
    in time off local disks); the commands read and write the files themselves."""

    def read_bytes(self, path: Path) -> bytes | None: ...

    def write_bytes(self, path: Path, data: bytes, *, keep_backup: bool = False) -> None: ...


def load_ledger(path: Path, files: LedgerFiles | None = None) -> Ledger | None:
    """The ledger at ``path``; None when absent (or, through ``files``, not readable in
    time). Never repairs or replaces a bad one."""
    try:
        raw = files.read_bytes(path) if files is not None else path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LedgerError(f"cannot read ledger {path}: {exc.strerror or exc}") from None
    if raw is None:
        return None
    backup = path.with_name(path.name + ".bak")
    if files is None:
        keep = f" (the previous version is kept in {backup})" if backup.exists() else ""
    else:
        keep = f" (the previous version may be kept in {backup})"
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        if isinstance(exc, json.JSONDecodeError):
            what = f"not valid JSON ({exc.msg} at line {exc.lineno})"
        else:
            what = str(exc)
        raise LedgerError(f"ledger {path} is corrupt: {what}{keep}; {reset_hint(path.parent)}") from None
    try:
        return ledger_from_json(doc)
    except LedgerError as exc:
        raise LedgerError(f"ledger {path} is corrupt: {exc}{keep}; {reset_hint(path.parent)}") from None


def save_ledger(path: Path, ledger: Ledger, files: LedgerFiles | None = None) -> None:
    """Replace the ledger atomically, keeping the previous version as ``.bak``."""
    if files is not None:
        data = (json.dumps(ledger_to_json(ledger), indent=2, sort_keys=True) + "\n").encode()
        files.write_bytes(path, data, keep_backup=True)
        return
    from slurm_ft import atomicfile  # tempfile is not needed by the read-only commands

    atomicfile.write_json(path, ledger_to_json(ledger), keep_backup=True)
