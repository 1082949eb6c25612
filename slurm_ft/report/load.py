"""Read a state dir for the report, whatever state it is in.

The report is most wanted after something went wrong, so no single bad file may stop it:
every record is read on its own, and a file that is missing a field, is not JSON or
cannot be opened becomes an :class:`Unreadable` entry that the report names, while the
rest is still used. Formats stay with their owners (``launch/records.py``,
``progress.py``); this module only checks that a record has what the analysis relies on.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_ft import progress
from slurm_ft.readinglines import reading_from_line
from slurm_ft.records import (
    SNAPSHOT_MARK,
    CycleRecord,
    DrillRecord,
    NodeSnapshots,
    OutcomeRecord,
    ProgressReading,
    RankResume,
)
from slurm_ft.statedir import StateDir

_CYCLE_NAME = re.compile(r"cycle(\d+)\.json")
_NUMBER = (int, float)


@dataclass(frozen=True)
class Unreadable:
    path: str
    problem: str


@dataclass(frozen=True)
class UnhealthyRecord:
    node: str
    reason: str
    time: float | None


@dataclass
class StateFiles:
    """Everything readable in one state dir; ``unreadable`` names the rest."""

    path: Path
    cycles: list[CycleRecord] = field(default_factory=list)
    outcomes: list[OutcomeRecord] = field(default_factory=list)
    unhealthy: list[UnhealthyRecord] = field(default_factory=list)
    ledger: progress.Ledger | None = None
    unreadable: list[Unreadable] = field(default_factory=list)
    drills: list[DrillRecord] = field(default_factory=list)  # faults slurm-ft-drill injected
    readings: list[ProgressReading] = field(default_factory=list)  # node 0's timed source readings
    snapshots: list[NodeSnapshots] = field(default_factory=list)  # each node's resumes, per cycle
    snapshot_readings: list[ProgressReading] = field(default_factory=list)  # node 0's newest snapshot, timed

    @property
    def empty(self) -> bool:
        return not (self.cycles or self.outcomes or self.unhealthy or self.ledger or self.unreadable)


class _Bad(Exception):
    """One record cannot be used; the message says why."""


def _read_doc(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise _Bad(f"cannot read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _Bad("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise _Bad(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict):
        raise _Bad("not a JSON object")
    return doc


def _need(doc: dict[str, Any], key: str, types: type | tuple[type, ...], optional: bool = False) -> None:
    value = doc.get(key)
    if value is None and optional:
        return
    if key not in doc:
        raise _Bad(f"missing {key!r}")
    if isinstance(value, bool) or not isinstance(value, types):
        raise _Bad(f"{key!r} has the wrong type ({value!r})")


def _failure_ok(doc: dict[str, Any]) -> None:
    failure = doc.get("first_failure")
    if failure is None:
        return
    if not isinstance(failure, dict):
        raise _Bad("'first_failure' is not an object")
    _need(failure, "kind", str)
    _need(failure, "node", str)
    _need(failure, "time", _NUMBER)


def cycle_from_json(doc: dict[str, Any]) -> CycleRecord:
    for key, types in (("cycle", int), ("attempt", int), ("restart", int), ("start_time", _NUMBER)):
        _need(doc, key, types)
    for key in ("run_uuid", "outcome"):
        _need(doc, key, str)
    _need(doc, "end_time", _NUMBER, optional=True)
    if not isinstance(doc.get("nodes", []), list):
        raise _Bad("'nodes' is not a list")
    _failure_ok(doc)
    try:
        return CycleRecord.from_json(doc)
    except (TypeError, ValueError) as exc:  # a missing field; an outcome this version does not know
        raise _Bad(str(exc)) from None


def outcome_from_json(doc: dict[str, Any]) -> OutcomeRecord:
    _need(doc, "exit_code", int)
    _need(doc, "attempt", int)
    _need(doc, "time", _NUMBER)
    for key in ("outcome", "reason", "run_uuid"):
        _need(doc, key, str)
    for key in ("first_cycle", "last_cycle"):
        _need(doc, key, int, optional=True)
    _failure_ok(doc)
    try:
        return OutcomeRecord.from_json(doc)
    except TypeError as exc:
        raise _Bad(str(exc)) from None


def drill_from_json(doc: dict[str, Any]) -> DrillRecord:
    _need(doc, "fault", str)
    _need(doc, "time", _NUMBER)
    for key in ("node", "signal", "problem", "schedule", "job_id"):
        _need(doc, key, str, optional=True)
    for key in ("node_rank", "rank", "cycle"):
        _need(doc, key, int, optional=True)
    if not isinstance(doc.get("injected", True), bool):
        raise _Bad(f"'injected' has the wrong type ({doc.get('injected')!r})")
    pids = doc.get("pids", [])
    if not isinstance(pids, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in pids):
        raise _Bad("'pids' is not a list of integers")
    try:
        return DrillRecord.from_json(doc)
    except TypeError as exc:
        raise _Bad(str(exc)) from None


def snapshots_from_json(doc: dict[str, Any]) -> NodeSnapshots:
    _need(doc, "cycle", int)
    _need(doc, "node", str)
    _need(doc, "newest_step", int, optional=True)
    resumed = doc.get("resumed", [])
    if not isinstance(resumed, list) or not all(isinstance(r, dict) for r in resumed):
        raise _Bad("'resumed' is not a list of objects")
    try:
        rec = NodeSnapshots.from_json(doc)
        for r in resumed:
            RankResume.from_json(r)
    except (TypeError, ValueError) as exc:
        raise _Bad(str(exc)) from None
    return rec


def readings_from_text(text: str) -> tuple[list[ProgressReading], int]:
    """The readings in a ``readings.jsonl`` and the number of lines that were not one (a
    torn last line after a crash is the usual one)."""
    out: list[ProgressReading] = []
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        reading = reading_from_line(line)
        if reading is None:
            bad += 1
        else:
            out.append(reading)
    out.sort(key=lambda r: r.time)
    return out, bad


def unhealthy_from_json(doc: dict[str, Any], fallback_node: str) -> UnhealthyRecord:
    when = doc.get("time")
    node = doc.get("node")
    return UnhealthyRecord(
        node=node if isinstance(node, str) else fallback_node,
        reason=str(doc.get("reason") or "unhealthy"),
        time=float(when) if isinstance(when, _NUMBER) and not isinstance(when, bool) else None,
    )


def _files(directory: Path, pattern: str, problems: list[Unreadable]) -> list[Path]:
    try:
        return sorted(directory.glob(pattern))
    except OSError as exc:
        problems.append(Unreadable(str(directory), f"cannot list: {exc.strerror or exc}"))
        return []


def load(state: StateDir, *, accounting: bool = True) -> StateFiles:
    """Every record of ``state``; never raises for the content of a file. ``accounting``
    False leaves out what only the report's accounting reads (drills, each node's snapshot
    records, the timed readings): ``slurm-ft-logs`` reads cycles, not thousands of nodes'
    snapshot records per cycle (#45)."""
    out = StateFiles(state.path)
    bad = out.unreadable
    for path in _files(state.cycles_dir, "cycle*.json", bad):
        if not _CYCLE_NAME.fullmatch(path.name):
            continue
        try:
            out.cycles.append(cycle_from_json(_read_doc(path)))
        except _Bad as exc:
            bad.append(Unreadable(str(path), str(exc)))
    out.cycles.sort(key=lambda c: c.cycle)

    seen: set[str] = set()
    outcome_paths = [*_files(state.outcomes_dir, "attempt*.json", bad)]
    if state.outcome.exists():
        outcome_paths.append(state.outcome)
    for path in outcome_paths:
        try:
            rec = outcome_from_json(_read_doc(path))
        except _Bad as exc:
            bad.append(Unreadable(str(path), str(exc)))
            continue
        if rec.run_uuid not in seen:  # outcome.json is also kept under outcomes/
            seen.add(rec.run_uuid)
            out.outcomes.append(rec)
    out.outcomes.sort(key=lambda o: o.time)

    for path in _files(state.unhealthy_dir, "*.json", bad):
        try:
            out.unhealthy.append(unhealthy_from_json(_read_doc(path), path.stem))
        except _Bad as exc:
            bad.append(Unreadable(str(path), str(exc)))

    if accounting:
        _load_accounting(state, out)

    try:
        out.ledger = progress.load_ledger(state.ledger)
    except progress.LedgerError as exc:
        bad.append(Unreadable(str(state.ledger), _short_ledger_problem(str(exc))))
    return out


def _load_accounting(state: StateDir, out: StateFiles) -> None:
    bad = out.unreadable
    for path in _files(state.drills_dir, "*.json", bad):
        try:
            out.drills.append(drill_from_json(_read_doc(path)))
        except _Bad as exc:
            bad.append(Unreadable(str(path), str(exc)))
    out.drills.sort(key=lambda d: d.time)

    for path in _files(state.snapshots_dir, "cycle*/*.json", bad):
        try:
            out.snapshots.append(snapshots_from_json(_read_doc(path)))
        except _Bad as exc:
            bad.append(Unreadable(str(path), str(exc)))
    out.snapshots.sort(key=lambda s: (s.cycle, s.node))

    out.readings = _readings(state.progress_readings, bad)
    out.snapshot_readings = [
        dataclasses.replace(r, mark=SNAPSHOT_MARK) for r in _readings(state.snapshot_readings, bad)
    ]


def _readings(path: Path, bad: list[Unreadable]) -> list[ProgressReading]:
    try:
        raw = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raw = ""
    except OSError as exc:
        bad.append(Unreadable(str(path), f"cannot read: {exc.strerror or exc}"))
        raw = ""
    out, torn = readings_from_text(raw)
    if torn:
        bad.append(Unreadable(str(path), f"{torn} line(s) are not readings: skipped"))
    return out


def _short_ledger_problem(message: str) -> str:
    """The ledger's own message without its path and its reset advice (not the report's job)."""
    text = message.split("; run `slurm-ft-progress reset", 1)[0]
    _, sep, rest = text.partition(" is corrupt: ")
    return rest if sep else text
