"""The report's shapes: what the analysis makes and the renderers (text, JSON, SVG, the
story) read. Plain frozen data, no logic beyond the few derived figures each carries."""

from __future__ import annotations

from dataclasses import dataclass

from slurm_ft.records import CycleOutcome
from slurm_ft.report.load import UnhealthyRecord, Unreadable


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
    # Node 0's newest snapshot when the cycle before ended: a snapshot reading at or below it
    # in this cycle is the cycle before's, read late (node 0 looks every 0.5 s).
    snapshot_floor: int | None = None
    # The hang judge's start-up of the cycle (the ledger's ``startup``): s from its start
    # until the workers' signs of life settled into their rhythm; None: not learned.
    learned_startup: float | None = None

    @property
    def duration(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - self.start)

    @property
    def ended_badly(self) -> bool:
        """A failure, or an ending other than success (a cycle still running has none yet)."""
        return self.failure is not None or self.outcome not in (CycleOutcome.SUCCEEDED, CycleOutcome.RUNNING)

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
    lost_work_s: float = 0.0  # the split cycles' training after the step they kept
    stopping_s: float = 0.0  # the split cycles' stops
    split_cycles: int = 0  # cycles cut by timed readings
    seconds_per_step: float | None = None  # the job's undisturbed pace, from the readings
    # Of ``lost_work_s``, what was done since the newest snapshot every node held; the rest
    # was held by a snapshot the job did not resume from. None: the job took no snapshots.
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
    lost_since_snapshot_s: float | None = None  # of lost_work_s: since the newest snapshot held

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
