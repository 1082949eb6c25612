"""Where the allocation went: pure functions from the state dir's records to a Report.

The one rule that matters: the parts of the wall clock add up to the wall clock. Time is
walked once, from the first cycle's start to the last record of the last attempt, and
every stretch goes to exactly one bucket:

* **progress** / **no progress** / **progress unknown** — a cycle's workers running, from
  its start to its first failure (or its end); which bucket comes from the ledger's
  checkpoint readings (unknown without a progress source);
* with node 0's timed readings of the progress source (``progress/readings.jsonl``) a cycle
  that made progress is cut further: **start-up** (from its start until its first sign of
  progress, back-dated by the steps the first checkpoint holds at the job's measured step
  rate), **progress** (kept training: until the last checkpoint seen before the workers
  stopped), **lost work** (after that checkpoint until the first failure: recomputed in the
  next cycle) and **stopping** (the first failure until the cycle's end). Without them the
  whole run counts as progress and the goodput is an upper bound (a note says so);
* **restart overhead** — inside an attempt with no cycle training: from a failure until the
  next cycle started (stopping workers, health checks, rendezvous) and the wind-down after
  an attempt's last cycle;
* **between attempts** — from one attempt's last record to the next attempt's first cycle:
  the requeue, the queue wait and the launchers' start-up.

An attempt is one launcher run (one ``run_uuid``); its number is Slurm's restart count.
Its start is its first cycle's start (the launcher's own start-up is not recorded) and its
end its last record: the outcome, or the last cycle's end when the outcome was not kept.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from slurm_ft import exitcodes
from slurm_ft.progress import CycleEntry, Ledger
from slurm_ft.records import (
    SNAPSHOT_MARK,
    CycleOutcome,
    CycleRecord,
    DrillRecord,
    Failure,
    FailureKind,
    NodeSnapshots,
    OutcomeRecord,
    ProgressReading,
    RankResume,
    SnapshotSource,
)
from slurm_ft.report.load import StateFiles, UnhealthyRecord, Unreadable

TOP_CAUSES = 5
_NO_RUN = "attempt:"  # key prefix of cycles known only from the ledger (no run_uuid)
# Failure kinds that say something about the node they happened on (a forwarded signal does not).
NODE_FAULT_KINDS = frozenset(
    {
        FailureKind.WORKER.value,
        FailureKind.LOST_NODE.value,
        FailureKind.LAUNCHER.value,
        FailureKind.NIC.value,
        FailureKind.UNHEALTHY.value,
    }
)
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)\b.*")


@dataclass(frozen=True)
class FailureView:
    kind: str
    node: str
    node_rank: int | None
    time: float
    rank: int | None
    exit_code: int | None
    signal: str | None
    exception: str | None  # the exception's last line, when the worker reported one
    description: str


@dataclass(frozen=True)
class CycleSplit:
    """A cycle's run, cut by the timed readings (see the module docstring); the four parts
    add up to the cycle's duration."""

    start: float
    startup_end: float  # the first sign of progress, back-dated by the steps it holds
    kept_end: float  # the last checkpoint seen before the workers stopped training
    run_end: float  # the first failure, else the cycle's end
    end: float
    kept_step: int | None = None  # the step of that last checkpoint

    @property
    def startup_s(self) -> float:
        return self.startup_end - self.start

    @property
    def kept_s(self) -> float:
        return self.kept_end - self.startup_end

    @property
    def lost_s(self) -> float:
        return self.run_end - self.kept_end

    @property
    def stopping_s(self) -> float:
        return self.end - self.run_end


@dataclass(frozen=True)
class CycleView:
    cycle: int
    attempt: int
    restart: int
    start: float
    end: float | None
    outcome: str
    nodes: tuple[str, ...]
    world_size: int | None
    failure: FailureView | None
    progressed: bool | None  # None: no progress data for this cycle
    iteration_start: int | None
    iteration_end: int | None
    source: str  # "record" or "ledger" (the cycle record was unreadable)
    split: CycleSplit | None = None  # None: no timed readings show progress in this cycle
    resumed_step: int | None = None  # every rank resumed from a snapshot of this step

    @property
    def duration(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - self.start)

    @property
    def run_end(self) -> float:
        """When the workers stopped training: the first failure, else the cycle's end."""
        end = self.end if self.end is not None else self.start
        if self.failure is not None and self.start <= self.failure.time <= end:
            return self.failure.time
        return end


@dataclass(frozen=True)
class AttemptView:
    attempt: int
    run_uuid: str | None
    start: float
    end: float
    outcome: str
    exit_code: int | None
    reason: str
    outcome_source: str  # "record" or "inferred"
    cycles: tuple[int, ...]
    nodes: tuple[str, ...]
    unhealthy_nodes: tuple[str, ...]
    lost_nodes: tuple[str, ...] = ()  # launchers that went silent (a frozen node 0 included)

    @property
    def duration(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True)
class Totals:
    wall_clock_s: float
    progress_s: float
    no_progress_s: float
    unknown_progress_s: float
    restart_overhead_s: float
    between_attempts_s: float
    goodput_ratio: float | None  # None while some cycle's progress is unknown
    goodput_upper_bound: float | None  # counting unknown cycles as progress
    work_lost_iterations: int | None  # None: unknown (no progress data for a failed cycle)
    attempts: int
    cycles: int
    restarts: int  # in-job restarts (cycles after the first of each attempt)
    requeues: int  # attempts after the first
    failures: int
    startup_s: float = 0.0  # the split cycles' start-up (see the module docstring)
    lost_work_s: float = 0.0  # the split cycles' training after their last checkpoint
    stopping_s: float = 0.0  # the split cycles' stops
    split_cycles: int = 0  # cycles cut by timed readings
    seconds_per_step: float | None = None  # the job's undisturbed pace, from the readings
    # Of ``lost_work_s``, what was done since the last snapshot the next cycle resumed from
    # (really lost); the rest was kept by the snapshots. None: the job took no snapshots.
    lost_since_snapshot_s: float | None = None

    @property
    def parts_s(self) -> float:
        return (
            self.startup_s
            + self.lost_work_s
            + self.stopping_s
            + self.progress_s
            + self.no_progress_s
            + self.unknown_progress_s
            + self.restart_overhead_s
            + self.between_attempts_s
        )


@dataclass(frozen=True)
class Cause:
    cause: str
    count: int
    cycles: tuple[int, ...]
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class NodeFailures:
    node: str
    failures: int
    cycles: tuple[int, ...]
    unhealthy: int


@dataclass(frozen=True)
class FaultView:
    """A fault ``slurm-ft-drill`` injected, and what it cost the job: from the signal until
    the first failure was seen (detection), the workers stopped (stop), the next cycle
    started (restart: health, rendezvous, or a requeue), it showed progress again (start-up),
    plus the training since the last checkpoint before the fault (lost work). ``cost_s`` is
    their sum: the training time the fault took away. Parts that cannot be known are None;
    a fault that hit a cycle an earlier fault had already ended is ``absorbed``."""

    fault: str
    time: float
    node: str | None
    rank: int | None
    signal: str | None
    injected: bool
    problem: str | None
    cycle: int | None  # the cycle it hit
    detection_s: float | None = None
    stop_s: float | None = None
    restart_s: float | None = None
    startup_s: float | None = None
    lost_work_s: float | None = None
    cost_s: float | None = None
    next_cycle: int | None = None
    absorbed: bool = False
    lost_since_snapshot_s: float | None = None  # of lost_work_s: since the snapshot resumed from

    @property
    def where(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank} on {self.node}"
        return self.node or "batch script"


@dataclass(frozen=True)
class SnapshotRestore:
    """A cycle whose ranks resumed from snapshots (``--snapshot-memory``): when it started,
    where its ranks' state came from (``memory x4``), and the lowest step resumed from a
    snapshot (None: no rank did)."""

    cycle: int
    time: float
    sources: tuple[str, ...]
    step: int | None


@dataclass(frozen=True)
class Report:
    state_dir: str
    attempts: tuple[AttemptView, ...]
    cycles: tuple[CycleView, ...]
    totals: Totals
    top_causes: tuple[Cause, ...]
    repeat_nodes: tuple[NodeFailures, ...]
    unhealthy: tuple[UnhealthyRecord, ...]
    unreadable: tuple[Unreadable, ...]
    progress_source: str | None  # the progress source the ledger read (KIND:PATH)
    notes: tuple[str, ...]
    faults: tuple[FaultView, ...] = ()
    snapshot_restores: tuple[SnapshotRestore, ...] = ()


# --------------------------------------------------------------------------- failures


def exception_line(failure: Failure) -> str | None:
    """The exception's last line: ``@record``'s message (``Type: text``), else the last line
    of the traceback when it is an exception line."""
    for text in (failure.message, failure.traceback):
        if not text:
            continue
        lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
        if not lines:
            continue
        if text is failure.message or _EXCEPTION_LINE.match(lines[-1]):
            return lines[-1]
    return None


def failure_view(doc: dict[str, object] | None) -> FailureView | None:
    """The record's first failure; a kind this version does not know (a newer launcher's)
    is kept as written, described from its detail."""
    if not doc:
        return None
    try:
        f = Failure.from_json(dict(doc))
    except (TypeError, ValueError):
        return _unknown_kind(doc)
    return FailureView(
        kind=f.kind.value,
        node=f.node,
        node_rank=f.node_rank,
        time=float(f.time),
        rank=f.rank,
        exit_code=f.exit_code,
        signal=f.signal,
        exception=exception_line(f),
        description=f.describe(),
    )


def _unknown_kind(doc: dict[str, object]) -> FailureView:
    def get(key: str, types: type | tuple[type, ...]) -> Any:
        value = doc.get(key)
        return value if isinstance(value, types) and not isinstance(value, bool) else None

    kind, node, node_rank = str(doc.get("kind")), str(doc.get("node")), get("node_rank", int)
    return FailureView(
        kind=kind,
        node=node,
        node_rank=node_rank,
        time=float(get("time", (int, float)) or 0.0),
        rank=get("rank", int),
        exit_code=get("exit_code", int),
        signal=get("signal", str),
        exception=None,
        description=f"{node} (node {node_rank}): {get('detail', str) or kind}",
    )


def cause_of(f: FailureView) -> str:
    """What went wrong, without where: failures with the same cause group together."""
    if f.kind == FailureKind.WORKER.value:
        how = f"killed by {f.signal}" if f.signal else f"exit code {f.exit_code}"
        return f"worker {how}" + (f": {f.exception}" if f.exception else "")
    if f.kind == FailureKind.LOST_NODE.value:
        return "lost launcher (heartbeat)"
    if f.kind == FailureKind.SIGNAL.value:
        return _signal_cause(f.description)
    return f.kind + (f": {f.exception}" if f.exception else "")


# --------------------------------------------------------------------------- cycles


def _progress_known(ledger: Ledger | None) -> bool:
    """Without a progress source the ledger records 0 -> 0 for every cycle: that is no data."""
    return ledger is not None and ledger.source is not None


def _cycle_view(rec: CycleRecord, entry: CycleEntry | None, known: bool) -> CycleView:
    progressed = None
    if known and entry is not None and entry.iteration_end is not None and entry.progressed is not None:
        progressed = entry.progressed
    end = rec.end_time
    if end is None and entry is not None and entry.ended_at is not None:
        end = entry.ended_at
    return CycleView(
        cycle=rec.cycle,
        attempt=rec.attempt,
        restart=rec.restart,
        start=float(rec.start_time),
        end=float(end) if end is not None else None,
        outcome=CycleOutcome(rec.outcome).value,
        nodes=tuple(rec.nodes),
        world_size=rec.world_size,
        failure=failure_view(rec.first_failure),
        progressed=progressed,
        iteration_start=entry.iteration_start if known and entry else None,
        iteration_end=entry.iteration_end if known and entry else None,
        source="record",
    )


def _cycle_from_ledger(entry: CycleEntry, known: bool) -> CycleView | None:
    """A cycle whose record is unreadable, as far as the ledger saw it."""
    if entry.started_at is None:
        return None
    return CycleView(
        cycle=entry.cycle,
        attempt=entry.attempt,
        restart=-1,
        start=float(entry.started_at),
        end=float(entry.ended_at) if entry.ended_at is not None else None,
        outcome=entry.outcome or CycleOutcome.RUNNING.value,
        nodes=(),
        world_size=None,
        failure=None,
        progressed=entry.progressed if known and entry.iteration_end is not None else None,
        iteration_start=entry.iteration_start if known else None,
        iteration_end=entry.iteration_end if known else None,
        source="ledger",
    )


def _cycles(files: StateFiles) -> tuple[list[CycleView], dict[int, str]]:
    """The cycle views and, for each, the attempt key (its run's uuid when known)."""
    ledger = files.ledger
    known = _progress_known(ledger)
    entries = {e.cycle: e for e in (ledger.cycles if ledger else [])}
    views: list[CycleView] = []
    keys: dict[int, str] = {}
    for rec in files.cycles:
        views.append(_cycle_view(rec, entries.get(rec.cycle), known))
        keys[rec.cycle] = rec.run_uuid
    for number, entry in entries.items():
        if number in keys:
            continue
        view = _cycle_from_ledger(entry, known)
        if view is not None:
            views.append(view)
            keys[number] = _key_for_attempt(entry.attempt, number, files.cycles)
    views.sort(key=lambda c: (c.start, c.cycle))
    return views, keys


def _key_for_attempt(attempt: int, cycle: int, recs: Iterable[CycleRecord]) -> str:
    """The run of ``attempt`` whose recorded cycle is nearest to ``cycle`` (earlier ones
    first): a run's cycle numbers are consecutive."""
    same = [r for r in recs if r.attempt == attempt]
    if not same:
        return f"{_NO_RUN}{attempt}"
    return min(same, key=lambda r: (abs(r.cycle - cycle), r.cycle > cycle)).run_uuid


# --------------------------------------------------------------------------- attempts


def _inferred_outcome(last: CycleView, ledger: Ledger | None) -> tuple[str, str]:
    """(outcome word, reason) for an attempt whose outcome record was not kept, from its
    last cycle, or from the ledger when the no-progress guard refused the next one."""
    stopped = ledger.stopped if ledger else None
    if stopped is not None and stopped.attempt == last.attempt and stopped.cycle > last.cycle:
        return exitcodes.describe(exitcodes.ExitCode.NO_PROGRESS), stopped.reason
    # Keyed by the record's text: a value this version does not know is shown as it is.
    words: dict[str, str] = {
        CycleOutcome.SUCCEEDED: "finished",
        CycleOutcome.SIGNALLED: "signalled",
        CycleOutcome.FAILED: "failed",
        CycleOutcome.LOST: "lost",
        CycleOutcome.RUNNING: "interrupted",
    }
    word = words.get(last.outcome, last.outcome)
    why = last.failure.description if last.failure else f"last cycle {last.cycle}: {last.outcome}"
    return word, f"{why} (outcome record not kept)"


def _names(value: object) -> tuple[str, ...]:
    """A record's list of node names (a hand-edited or damaged file may hold anything)."""
    return tuple(n for n in value if isinstance(n, str)) if isinstance(value, list) else ()


def _attempts(files: StateFiles, cycles: list[CycleView], keys: dict[int, str]) -> list[AttemptView]:
    by_key: dict[str, list[CycleView]] = defaultdict(list)
    for c in cycles:
        by_key[keys[c.cycle]].append(c)
    outcomes: dict[str, OutcomeRecord] = {o.run_uuid: o for o in files.outcomes}
    # A ledger-only cycle belongs to its attempt's outcome when there is one.
    for o in files.outcomes:
        orphan = by_key.pop(f"{_NO_RUN}{o.attempt}", None)
        if orphan:
            by_key[o.run_uuid].extend(orphan)
    out: list[AttemptView] = []
    for key in set(by_key) | set(outcomes):
        cs = sorted(by_key.get(key, []), key=lambda c: c.cycle)
        rec = outcomes.get(key)
        times = [c.start for c in cs] + [c.end for c in cs if c.end is not None]
        if rec is not None:
            times.append(float(rec.time))
        if rec is not None:
            number, word, reason, code, source = rec.attempt, rec.outcome, rec.reason, rec.exit_code, "record"
        else:  # known from its cycles alone, so it has some
            number, code, source = cs[0].attempt, None, "inferred"
            word, reason = _inferred_outcome(cs[-1], files.ledger)
        nodes: list[str] = list(rec.nodes) if rec is not None and rec.nodes else []
        for c in cs:
            nodes += [n for n in c.nodes if n not in nodes]
        out.append(
            AttemptView(
                attempt=number,
                run_uuid=None if key.startswith(_NO_RUN) else key,
                start=min(times),
                end=max(times),
                outcome=word,
                exit_code=code,
                reason=reason,
                outcome_source=source,
                cycles=tuple(c.cycle for c in cs),
                nodes=tuple(nodes),
                unhealthy_nodes=tuple(rec.unhealthy_nodes) if rec is not None else (),
                lost_nodes=_names(rec.lost_nodes) if rec is not None else (),
            )
        )
    out.sort(key=lambda a: (a.start, a.attempt))
    return out


# --------------------------------------------------------------------------- totals


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


def _totals(attempts: list[AttemptView], cycles: list[CycleView], pace: float | None = None) -> Totals:
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
        failures=sum(1 for c in cycles if _ended_badly(c)),
        startup_s=parts["startup"],
        lost_work_s=parts["lost"],
        stopping_s=parts["stopping"],
        split_cycles=sum(1 for c in cycles if c.split is not None),
        seconds_per_step=pace,
    )


# --------------------------------------------------------------------------- causes and nodes


def _ended_badly(c: CycleView) -> bool:
    return c.failure is not None or c.outcome not in (CycleOutcome.SUCCEEDED, CycleOutcome.RUNNING)


def _causes(cycles: list[CycleView], attempts: list[AttemptView]) -> list[Cause]:
    """Failures grouped by cause. A cycle ended by a signal the launcher itself received
    has no first failure in its record; its attempt's outcome names the signal."""
    reasons = {n: a.reason for a in attempts if a.outcome_source == "record" for n in a.cycles[-1:]}
    grouped: dict[str, list[CycleView]] = defaultdict(list)
    for c in cycles:
        if c.failure is not None:
            grouped[cause_of(c.failure)].append(c)
        elif _ended_badly(c):
            grouped[
                _signal_cause(reasons.get(c.cycle)) if c.outcome == CycleOutcome.SIGNALLED else c.outcome
            ].append(c)
    causes = [
        Cause(
            cause=name,
            count=len(cs),
            cycles=tuple(c.cycle for c in cs),
            nodes=tuple(
                sorted({c.failure.node for c in cs if c.failure} or {n for c in cs for n in c.nodes})
            ),
        )
        for name, cs in grouped.items()
    ]
    causes.sort(key=lambda k: (-k.count, k.cycles[0]))
    return causes[:TOP_CAUSES]


def _signal_cause(reason: str | None) -> str:
    """``node1 received SIGTERM`` -> ``received SIGTERM``: the cause without the node."""
    if reason and " received " in reason:
        return "received " + reason.split(" received ", 1)[1]
    return "signalled (preemption, time limit or scancel)"


def _repeat_nodes(cycles: list[CycleView], attempts: list[AttemptView]) -> list[NodeFailures]:
    failed: dict[str, list[int]] = defaultdict(list)
    for c in cycles:
        if c.failure is not None and c.failure.kind in NODE_FAULT_KINDS:
            failed[c.failure.node].append(c.cycle)
    unhealthy = Counter(node for a in attempts for node in a.unhealthy_nodes)
    out = [
        NodeFailures(node, len(failed[node]) + unhealthy[node], tuple(failed[node]), unhealthy[node])
        for node in set(failed) | set(unhealthy)
    ]
    return sorted((n for n in out if n.failures > 1), key=lambda n: (-n.failures, n.node))


# --------------------------------------------------------------------------- the split


def _progress_readings(readings: list[ProgressReading], after: float | None) -> list[ProgressReading]:
    """The readings that moved the source forward, in time order (a step never counts twice)."""
    out: list[ProgressReading] = []
    high = after
    for r in readings:
        if high is None or r.step > high:
            out.append(r)
            high = r.step
    return out


# A checkpoint a cycle made while its workers were being stopped is read up to a look
# later (node 0 looks every 0.5 s): readings this long after a cycle's end, and before the
# next cycle started, are still that cycle's.
READING_LAG_S = 1.0


def _window(
    c: CycleView, readings: list[ProgressReading], until: float | None = None
) -> list[ProgressReading]:
    end = until if until is not None else (c.end if c.end is not None else float("inf"))
    return [r for r in readings if c.start <= r.time <= end]


def _windows(cycles: list[CycleView]) -> dict[int, float | None]:
    """Each cycle's reading window's end (see :data:`READING_LAG_S`)."""
    ordered = sorted(cycles, key=lambda c: c.start)
    out: dict[int, float | None] = {}
    for c, nxt in itertools.zip_longest(ordered, ordered[1:]):
        if c.end is None:
            out[c.cycle] = None
        else:
            out[c.cycle] = min(c.end + READING_LAG_S, nxt.start) if nxt is not None else c.end + READING_LAG_S
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
    of the same cycle (never across a failure); None with fewer than two in any cycle."""
    dt = 0.0
    steps = 0
    ends = _windows(cycles)
    for c in cycles:
        moved = _progress_readings(_window(c, readings, ends.get(c.cycle)), _base_step(c, readings))
        for a, b in itertools.pairwise(moved):
            dt += b.time - a.time
            steps += b.step - a.step
    return dt / steps if steps > 0 and dt > 0 else None


def split_cycle(
    c: CycleView,
    readings: list[ProgressReading],
    pace: float | None,
    until: float | None = None,
    resumed_after: int | None = None,
) -> CycleSplit | None:
    """The cycle cut at its first sign of progress and at the last step the job kept;
    None for an open cycle and a cycle in which no reading moved (its bucket stays the
    ledger's).

    Start-up ends when the first checkpoint or snapshot of the cycle was seen, less the
    time its steps took at ``pace`` (unknown pace: not back-dated, so the start-up is an
    upper bound). The kept step is the newer of the last checkpoint and the snapshot the
    job resumed from after the cycle (``resumed_after``: every rank of the next cycle
    resumed from a snapshot at that step); the kept training ends at the last reading at
    or below it. A reading seen after the first failure (the other ranks went on until
    they were stopped) keeps the work up to the failure, never beyond."""
    if c.end is None:
        return None
    base = _base_step(c, readings)
    window = _window(c, readings, until)
    moved = _progress_readings(window, base)
    if not moved:
        return None
    first = moved[0]
    run_end, end = c.run_end, c.end
    back = (first.step - base) * pace if pace is not None and base is not None else 0.0
    startup_end = min(max(c.start, first.time - back), run_end)
    checkpoints = [r.step for r in window if r.mark != SNAPSHOT_MARK and (base is None or r.step > base)]
    kept_step = max([*checkpoints, *([resumed_after] if resumed_after is not None else [])], default=None)
    upto = [r for r in moved if kept_step is not None and r.step <= kept_step]
    if c.outcome == CycleOutcome.SUCCEEDED:
        kept_end, kept_step = run_end, moved[-1].step
    else:
        kept_end = min(upto[-1].time, run_end) if upto else startup_end
    kept_end = max(kept_end, startup_end)
    return CycleSplit(c.start, startup_end, kept_end, run_end, end, kept_step=kept_step)


def _with_splits(
    cycles: list[CycleView], readings: list[ProgressReading]
) -> tuple[list[CycleView], float | None]:
    if not readings:
        return cycles, None
    pace = seconds_per_step(cycles, readings)
    ends = _windows(cycles)
    ordered = sorted(cycles, key=lambda c: c.start)
    out = []
    for c in cycles:
        nxt = next((n for n in ordered if c.end is not None and n.start >= c.end), None)
        resumed_after = nxt.resumed_step if nxt is not None else None
        split = split_cycle(c, readings, pace, ends.get(c.cycle), resumed_after)
        if split is not None:
            out.append(dataclasses.replace(c, split=split))
        elif c.end is not None and c.progressed is None:
            # The source was watched through this cycle and never moved: no checkpoint was
            # made in it, though the ledger could not tell (its end reading failed).
            out.append(dataclasses.replace(c, progressed=False))
        else:
            out.append(c)
    return out, pace


# --------------------------------------------------------------------------- injected faults


def _hit(d: DrillRecord, cycles: list[CycleView]) -> CycleView | None:
    """The cycle running when the fault was sent: the last to start before it that had not
    ended; else the one the drill aimed at."""
    running = [c for c in cycles if c.start <= d.time and (c.end is None or d.time <= c.end)]
    if running:
        return max(running, key=lambda c: c.start)
    return next((c for c in cycles if c.cycle == d.cycle), None)


def _startup_after(nxt: CycleView | None, drills: list[DrillRecord], d: DrillRecord) -> float | None:
    """The next cycle's start-up: to its first progress; for a cycle that never made any,
    until the next fault or its own end (the rest is the next fault's)."""
    if nxt is None:
        return None
    if nxt.split is not None:
        return nxt.split.startup_s
    if nxt.progressed is not False or nxt.end is None:
        return None
    later = [x.time for x in drills if x.injected and x.time > d.time and nxt.start <= x.time]
    return max(0.0, min([nxt.run_end, *later]) - nxt.start)


def fault_views(drills: list[DrillRecord], cycles: list[CycleView]) -> list[FaultView]:
    """Each injected fault with what it cost (see :class:`FaultView`)."""
    ordered = sorted(cycles, key=lambda c: c.start)
    charged: set[int] = set()
    out: list[FaultView] = []
    for d in sorted(drills, key=lambda d: d.time):
        view = FaultView(d.fault, d.time, d.node, d.rank, d.signal, d.injected, d.problem, None)
        c = _hit(d, ordered) if d.injected else None
        if c is None:
            out.append(view)
            continue
        view = dataclasses.replace(view, cycle=c.cycle)
        if c.cycle in charged or c.end is None or not _ended_badly(c):
            out.append(dataclasses.replace(view, absorbed=c.cycle in charged))
            continue
        charged.add(c.cycle)
        after = [n for n in ordered if n.start >= c.end]
        nxt = after[0] if after else None
        detection = max(0.0, c.run_end - d.time)
        stop = c.end - c.run_end
        restart = nxt.start - c.end if nxt is not None else None
        startup = _startup_after(nxt, drills, d)
        lost = max(0.0, min(d.time, c.split.run_end) - c.split.kept_end) if c.split is not None else None
        if c.split is None and c.progressed is False:
            lost = 0.0  # the cycle had made no checkpoint-worthy progress: nothing to lose
        known = [p for p in (detection, stop, restart, startup, lost) if p is not None]
        cost = sum(known) if len(known) == 5 else None
        out.append(
            dataclasses.replace(
                view,
                detection_s=detection,
                stop_s=stop,
                restart_s=restart,
                startup_s=startup,
                lost_work_s=lost,
                cost_s=cost,
                next_cycle=nxt.cycle if nxt is not None else None,
            )
        )
    return out


# --------------------------------------------------------------------------- snapshots


def snapshot_restores(snaps: list[NodeSnapshots], cycles: list[CycleView]) -> list[SnapshotRestore]:
    """Every cycle in which some rank resumed from a snapshot, with its sources."""
    starts = {c.cycle: c.start for c in cycles}
    by_cycle: dict[int, list[RankResume]] = defaultdict(list)
    for rec in snaps:
        by_cycle[rec.cycle].extend(RankResume.from_json(r) for r in rec.resumed)
    out = []
    for cycle, ranks in sorted(by_cycle.items()):
        steps = [r.step for r in ranks if r.source is not SnapshotSource.NONE and r.step is not None]
        if not steps or cycle not in starts:
            continue
        counts = Counter(r.source.value for r in ranks)
        sources = tuple(f"{source} x{n}" for source, n in sorted(counts.items()))
        out.append(SnapshotRestore(cycle, starts[cycle], sources, min(steps)))
    return out


def resumed_steps(snaps: list[NodeSnapshots]) -> dict[int, int]:
    """Each cycle in which every rank resumed from a snapshot, and the step: the work up to
    it was kept. A cycle with a rank that resumed from nothing (its trainer's checkpoint)
    is not in it, nor is a record that cannot be read."""
    ranks: dict[int, list[RankResume]] = defaultdict(list)
    for rec in snaps:
        try:
            ranks[rec.cycle].extend(RankResume.from_json(r) for r in rec.resumed)
        except (TypeError, ValueError, AttributeError):
            ranks[rec.cycle].append(RankResume(-1, SnapshotSource.NONE))
    out = {}
    for cycle, resumes in ranks.items():
        steps = [r.step for r in resumes if r.source is not SnapshotSource.NONE]
        if resumes and len(steps) == len(resumes) and all(step is not None for step in steps):
            out[cycle] = min(step for step in steps if step is not None)
    return out


def held_steps(snaps: list[NodeSnapshots]) -> dict[int, int]:
    """The newest snapshot every node held at each cycle's end (the lowest of the nodes')."""
    held: dict[int, list[int | None]] = defaultdict(list)
    for rec in snaps:
        held[rec.cycle].append(rec.newest_step if isinstance(rec.newest_step, int) else None)
    return {
        cycle: min(s for s in steps if s is not None)
        for cycle, steps in held.items()
        if steps and all(s is not None for s in steps)
    }


def lost_since_snapshot(lost_s: float, kept_step: int | None, held: int | None, pace: float | None) -> float:
    """Of the work lost after the step the job kept, the part after the newest snapshot
    the nodes held (the part before it was held by a snapshot the job did not resume
    from: a lost node without a replica, a refused placement). Pure."""
    if held is None or kept_step is None or pace is None or held <= kept_step:
        return lost_s
    return max(0.0, lost_s - (held - kept_step) * pace)


def _with_snapshot_split(report: Report, snaps: list[NodeSnapshots], pace: float | None) -> Report:
    """The lost work split at the snapshots, and the restores for the timeline (the kept
    work itself is in the cycles' splits: :func:`split_cycle`)."""
    if not snaps:
        return report
    restores = snapshot_restores(snaps, list(report.cycles))
    held = held_steps(snaps)
    total = 0.0
    for c in report.cycles:
        if c.split is not None and c.split.lost_s > 0:
            total += lost_since_snapshot(c.split.lost_s, c.split.kept_step, held.get(c.cycle), pace)
    faults = []
    cycles_by_number = {c.cycle: c for c in report.cycles}
    for f in report.faults:
        hit = cycles_by_number.get(f.cycle) if f.cycle is not None else None
        if f.lost_work_s is None or hit is None or hit.split is None:
            faults.append(f)
            continue
        since = lost_since_snapshot(f.lost_work_s, hit.split.kept_step, held.get(hit.cycle), pace)
        faults.append(dataclasses.replace(f, lost_since_snapshot_s=since))
    totals = dataclasses.replace(report.totals, lost_since_snapshot_s=total)
    return dataclasses.replace(report, totals=totals, faults=tuple(faults), snapshot_restores=tuple(restores))


# --------------------------------------------------------------------------- entry point


def analyse(files: StateFiles) -> Report:
    cycles, keys = _cycles(files)
    resumed = resumed_steps(files.snapshots)
    cycles = [dataclasses.replace(c, resumed_step=resumed.get(c.cycle)) for c in cycles]
    readings = sorted([*files.readings, *files.snapshot_readings], key=lambda r: r.time)
    cycles, pace = _with_splits(cycles, readings)
    attempts = _attempts(files, cycles, keys)
    notes = []
    if files.ledger is None or files.ledger.source is None:
        notes.append(
            "no progress source (--progress-source): progress of each cycle and work lost are unknown"
        )
    for c in cycles:
        if c.end is None:
            notes.append(
                f"cycle {c.cycle} has no end (still running, or its launcher was killed): "
                "it is counted up to its start"
            )
    if _progress_known(files.ledger) and not readings and cycles:
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
        totals=_totals(attempts, cycles, pace),
        top_causes=tuple(_causes(cycles, attempts)),
        repeat_nodes=tuple(_repeat_nodes(cycles, attempts)),
        unhealthy=tuple(sorted(files.unhealthy, key=lambda u: (u.time or 0.0, u.node))),
        unreadable=tuple(files.unreadable),
        progress_source=files.ledger.source if files.ledger else None,
        notes=tuple(notes),
        faults=tuple(fault_views(files.drills, cycles)),
    )
    return _with_snapshot_split(report, files.snapshots, pace)
