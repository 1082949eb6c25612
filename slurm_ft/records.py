"""The cycle record and the job outcome record: their formats, in one place.

The sbatch templates and people debugging a job read these files, and workers read the
current cycle's record through ``SLURM_FT_CYCLE_INFO``, so the field names are a contract.
Every record carries the ``run_uuid`` of the launcher attempt that wrote it: a peer whose
state dir turns out to be shared with node 0 sees node 0's record (same uuid) and leaves
it alone instead of overwriting it with its own partial view.

Also here: reading torch's ``TORCHELASTIC_ERROR_FILE`` (written by ``@record``), because
its message and traceback end up in the cycle record's ``first_failure``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from slurm_ft import atomicfile

RECORD_VERSION = 1
TRACEBACK_LIMIT = 16 * 1024

# A record or message as parsed JSON: the records are a file format, read by people,
# templates and other tools, so their values stay plain JSON.
JsonDict = dict[str, Any]


def node_name(names: Sequence[str], k: int) -> str:
    """The name of launcher ``k`` (hostlist index) as records and messages give it: the
    name it joined with, or ``node-rank-K`` while that is unknown (it never joined, or the
    names are known only once every launcher did)."""
    return names[k] if k < len(names) else f"node-rank-{k}"


class CycleOutcome(str, Enum):
    """How a cycle ended, as written in its record (the values are the file format)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SIGNALLED = "signalled"
    LOST = "lost"  # the store host (node 0) was lost while the cycle ran


class FailureKind(str, Enum):
    """What failed first. Launcher failures (lost, signalled, broken) cannot be retried: a
    fixed-size job cannot run without that launcher (with spare nodes, a lost launcher's
    node rank moves to a spare instead: ``policy.replaceable``)."""

    WORKER = "worker"  # a worker exited non-zero or by a signal
    LOST_NODE = "lost-node"  # a peer launcher stopped heart-beating
    SIGNAL = "signal"  # a launcher received a terminating signal
    LAUNCHER = "launcher"  # a launcher failed
    NIC = "nic"  # a monitored NIC of a node went down while workers ran (health.nic_monitor_fatal)
    HANG = "hang"  # a hang detector fired (see launch/hang/); the workers were alive but stuck
    # The node's health check failed while its workers trained (health.check_interval): the
    # node joins the next cycle unhealthy, as after a failed check before the join.
    UNHEALTHY = "unhealthy"

    @property
    def retryable(self) -> bool:
        """A NIC failure is retried like a worker's: the next cycle's health check, before
        the join, decides whether the node can take part (94 when the link stays down). An
        unhealthy node's failure too: it joins the next cycle unhealthy, so node 0 replaces
        it with a spare or stops with 94, as for any node unhealthy at a join."""
        return self in (FailureKind.WORKER, FailureKind.NIC, FailureKind.HANG, FailureKind.UNHEALTHY)


@dataclass(frozen=True)
class Failure:
    """The first failure of a cycle, anywhere in the job (first writer wins in the store)."""

    kind: FailureKind
    node: str
    node_rank: int
    time: float
    rank: int | None = None
    local_rank: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    detail: str = ""
    message: str | None = None
    traceback: str | None = None
    detector: str | None = None  # hang: which detector fired
    hung_ranks: list[int] | None = None  # hang: the ranks it names (none for job-wide silence)

    @property
    def retryable(self) -> bool:
        return self.kind.retryable

    def describe(self) -> str:
        where = f"{self.node} (node {self.node_rank})"
        if self.kind is FailureKind.WORKER:
            how = f"killed by {self.signal}" if self.signal else f"exit code {self.exit_code}"
            text = f"rank {self.rank} (local {self.local_rank}) on {where}: {how}"
            if self.message:
                text += f": {self.message}"
            return text
        if self.kind is FailureKind.HANG:
            return f"hang ({self.detector}) seen by {where}: {self.detail}"
        return f"{where}: {self.detail or self.kind.value}"

    def to_json(self) -> JsonDict:
        doc = dataclasses.asdict(self)
        doc["kind"] = self.kind.value
        return doc

    @classmethod
    def from_json(cls, doc: JsonDict) -> Failure:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in doc.items() if k in names}
        kw["kind"] = FailureKind(kw["kind"])
        return cls(**kw)


@dataclass(frozen=True)
class LogFile:
    """One file of a cycle's application log: the job's only one (``node`` None: every
    launcher appends to it) or one node's (``--applog-per-node``). ``node_rank`` is the
    launcher's index in the cycle's ``nodes``, the ``.node<K>`` of the file name."""

    path: str
    node: str | None = None
    node_rank: int | None = None

    def to_json(self) -> JsonDict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: JsonDict) -> LogFile:
        """ValueError when ``doc`` is not a log file entry (records are read defensively)."""
        path, node, rank = doc.get("path"), doc.get("node"), doc.get("node_rank")
        if not isinstance(path, str) or not path:
            raise ValueError(f"log file entry without a path: {doc!r}")
        if node is not None and not isinstance(node, str):
            raise ValueError(f"log file entry with a bad node: {doc!r}")
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)):
            raise ValueError(f"log file entry with a bad node_rank: {doc!r}")
        return cls(path, node, rank)


@dataclass
class CycleRecord:
    """``cycles/cycle<N>.json``: who ran cycle N and how it ended (``end_*`` filled at close)."""

    cycle: int
    attempt: int
    restart: int  # index of the cycle within this attempt == TORCHELASTIC_RESTART_COUNT
    run_id: str
    run_uuid: str
    start_time: float
    nodes: list[str]
    world_size: int
    nproc_per_node: int
    master_addr: str
    master_port: int
    outcome: CycleOutcome = CycleOutcome.RUNNING
    end_time: float | None = None
    first_failure: JsonDict | None = None
    # With spare nodes: who holds each node rank (index = node rank), who stands by, and
    # "node rank R: OLD -> NEW (why)" for each replacement made before this cycle.
    active_nodes: list[str] = field(default_factory=list)
    spare_nodes: list[str] = field(default_factory=list)
    replacements: list[str] = field(default_factory=list)
    # The cycle's application log files (``LogFile.to_json``), so readers never rebuild the
    # names from settings they do not have; empty when the cycle had no log file.
    log_files: list[JsonDict] = field(default_factory=list)
    version: int = RECORD_VERSION

    def to_json(self) -> JsonDict:
        doc = dataclasses.asdict(self)
        doc["outcome"] = self.outcome.value
        return doc

    @classmethod
    def from_json(cls, doc: JsonDict) -> CycleRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in doc.items() if k in names}
        if "outcome" in kw:
            kw["outcome"] = CycleOutcome(kw["outcome"])
        return cls(**kw)


@dataclass
class OutcomeRecord:
    """How the launcher attempt ended. ``outcome`` is ``exitcodes.describe(exit_code)``."""

    exit_code: int
    outcome: str
    reason: str
    first_failure: JsonDict | None
    cycles: int  # cycles run (workers started) in this attempt
    first_cycle: int | None
    last_cycle: int | None
    attempt: int
    job_id: str | None
    run_id: str
    run_uuid: str
    unhealthy_nodes: list[str] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    lost_nodes: list[str] = field(default_factory=list)  # silent or never joined: exclude them too
    suspect_nodes: list[str] = field(default_factory=list)  # hosted repeated first failures (spares)
    # Store keys whose values this launcher ignored: not sealed with the job's secret, or
    # not what the protocol allows (someone else wrote them); each is in the launcher log.
    store_values_ignored: list[str] = field(default_factory=list)
    # The launchers' store moved (node 0's host lost, a successor leads): one line each.
    store_successions: list[str] = field(default_factory=list)
    # Processes of a lost store host that its successor could not kill (its node did not
    # answer): they may still write; "node: pid N (what)".
    unfenced: list[str] = field(default_factory=list)
    # This launcher's persist of its node's newest snapshots on the way out
    # (``--snapshot-persist-dir``): one line per rank, and what could not be persisted.
    snapshots_persisted: list[str] = field(default_factory=list)
    snapshots_not_persisted: list[str] = field(default_factory=list)
    time: float = field(default_factory=time.time)
    version: int = RECORD_VERSION

    def to_json(self) -> JsonDict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: JsonDict) -> OutcomeRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})


@dataclass(frozen=True)
class SuccessionClaim:
    """``succession/<run id>.epoch<E>.json``: the one launcher that hosts the store in epoch
    E. Created with link semantics (a complete file or none; never replaced), so of two
    launchers that both believe they are the successor only one holds the claim, and
    only it opens a store (``launch.succession.rule``)."""

    epoch: int
    launcher: int  # hostlist index
    node: str
    run_uuid: str
    lost: str  # the store host it succeeds
    pid: int
    time: float
    version: int = RECORD_VERSION

    def to_json(self) -> JsonDict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: JsonDict) -> SuccessionClaim:
        """ValueError when it is not a claim (whoever wrote it)."""
        try:
            claim = cls(**{f.name: doc[f.name] for f in dataclasses.fields(cls) if f.name != "version"})
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a succession claim: {exc}") from None
        ints = (claim.epoch, claim.launcher, claim.pid)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
            raise ValueError("a succession claim's epoch, launcher and pid are integers")
        if not all(isinstance(v, str) for v in (claim.node, claim.run_uuid, claim.lost)):
            raise ValueError("a succession claim's node, run_uuid and lost are text")
        return claim


@dataclass(frozen=True)
class WorkerProcess:
    """One worker of one cycle on one node: its pid and the pid's start tick (``procident``)."""

    rank: int
    local_rank: int
    pid: int
    start_ticks: int | None = None


@dataclass
class NodeProcesses:
    """``processes/cycle<N>/<node>.json``, written by every launcher (spares too) when a
    cycle's workers start: which processes are this node's part of the job. ``slurm-ft-drill``
    finds its targets here, never by process name; the start ticks let it refuse a pid that
    was reused. Each node writes only its own file, so a shared state dir needs no rule."""

    cycle: int
    node: str
    node_rank: int
    job_id: str | None
    run_uuid: str
    launcher_pid: int
    launcher_start_ticks: int | None
    time: float
    workers: list[WorkerProcess] = field(default_factory=list)  # empty on a spare
    version: int = RECORD_VERSION

    def to_json(self) -> JsonDict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: JsonDict) -> NodeProcesses:
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in doc.items() if k in names}
        kw["workers"] = [WorkerProcess(**w) for w in kw.get("workers") or []]
        return cls(**kw)


class SnapshotSource(str, Enum):
    """Where a rank's state came from when its cycle started (the values are the file format)."""

    MEMORY = "memory"  # the node's in-memory snapshot, kept by its launcher
    PERSISTED = "persisted"  # the copy the launchers persisted at the last attempt's end
    PEER = "peer memory"  # another node's in-memory snapshot, fetched by the launcher (#44)
    REPLICA = "replica"  # a replica of the rank's shard another node kept (--snapshot-replicas)
    NONE = "none"  # nothing: the trainer started from its own checkpoint, or from scratch


@dataclass(frozen=True)
class RankResume:
    """One rank's resumption in one cycle: its source and the step it resumed at (None: no snapshot)."""

    rank: int
    source: SnapshotSource
    step: int | None = None

    def to_json(self) -> JsonDict:
        return {"rank": self.rank, "source": self.source.value, "step": self.step}

    @classmethod
    def from_json(cls, doc: JsonDict) -> RankResume:
        """ValueError when ``doc`` is not one (records are read defensively)."""
        rank, step = doc.get("rank"), doc.get("step")
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise ValueError(f"rank resume without a rank: {doc!r}")
        if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
            raise ValueError(f"rank resume with a bad step: {doc!r}")
        return cls(rank, SnapshotSource(doc.get("source")), step)


@dataclass
class NodeSnapshots:
    """``snapshots/cycle<N>/<node>.json``, written by every launcher that ran workers in cycle
    N: where each of its ranks resumed from (what the workers' restore said; a rank that
    never asked resumed from nothing) and the newest snapshot the node held when the cycle
    ended. Each node writes only its own file: a node's memory is its own."""

    cycle: int
    node: str
    node_rank: int
    run_uuid: str
    time: float
    resumed: list[JsonDict] = field(default_factory=list)  # RankResume.to_json, one per rank
    newest_step: int | None = None  # the newest complete snapshot at the cycle's end
    version: int = RECORD_VERSION

    def to_json(self) -> JsonDict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: JsonDict) -> NodeSnapshots:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})


@dataclass
class SnapshotsPersisted:
    """``snapshots/persisted-attempt<A>-<node>.json``: what one node's launcher persisted on
    its way out (``--snapshot-persist-dir`` / ``--snapshot-persist-hook``) and what it could
    not, in one line each."""

    attempt: int
    node: str
    node_rank: int
    run_uuid: str
    time: float
    why: str  # the breakpoint: "signal SIGTERM", "the attempt ends", "training finished"
    persisted: list[str] = field(default_factory=list)  # "rank 3 step 120 -> /path"
    not_persisted: list[str] = field(default_factory=list)  # "rank 3 step 120: why"
    took: float = 0.0
    version: int = RECORD_VERSION

    def to_json(self) -> JsonDict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: JsonDict) -> SnapshotsPersisted:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})


@dataclass(frozen=True)
class DrillRecord:
    """``drills/<time>-<fault>.json``: one fault that ``slurm-ft-drill`` injected (or tried
    to: ``injected`` False with ``problem``), so the report can put it on the timeline and
    charge the cycle it ended with what it cost."""

    fault: str
    time: float  # wall clock when the signal was sent
    node: str | None
    node_rank: int | None
    rank: int | None
    cycle: int | None  # the cycle whose processes were targeted
    signal: str | None
    pids: list[int]
    job_id: str | None
    injected: bool = True
    problem: str | None = None
    schedule: str | None = None  # "seed K, fault 3 of 10" for scheduled drills
    version: int = RECORD_VERSION

    def to_json(self) -> JsonDict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: JsonDict) -> DrillRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})


# The mark of a reading of node rank 0's newest snapshot step (``progress/snapshot-readings.jsonl``).
SNAPSHOT_MARK = "snapshot"


@dataclass(frozen=True)
class ProgressReading:
    """One line of ``progress/readings.jsonl``: the progress source moved to ``step`` at
    ``time`` (node 0 looks every second or so while the job runs). The report times each
    cycle's start-up, kept training and lost work from these."""

    time: float
    step: int
    mark: str | None = None

    def to_json(self) -> JsonDict:
        return dataclasses.asdict(self)


def append_reading(
    path: Path, reading: ProgressReading, add: Callable[[Path, bytes], None] | None = None
) -> None:
    """One line, appended whole (``O_APPEND``, one write): a reader sees complete lines, and
    at worst a torn last line after a crash, which it skips. ``add``: how the line is
    appended (the launcher's is bounded in time, ``launch.books.stateio``)."""
    line = (json.dumps(reading.to_json(), separators=(",", ":")) + "\n").encode("utf-8")
    (add or atomicfile.append_line)(path, line)


def write(
    path: Path,
    record: CycleRecord | OutcomeRecord | NodeProcesses | DrillRecord | NodeSnapshots | SnapshotsPersisted,
) -> None:
    atomicfile.write_json(path, record.to_json())


def read_json(path: Path) -> JsonDict | None:
    """A record as a dict, or None when missing or unreadable (a reader must never crash)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def written_by(path: Path, run_uuid: str) -> bool:
    doc = read_json(path)
    return doc is not None and doc.get("run_uuid") == run_uuid


def read_error_file(
    path: Path, reader: Callable[[Path], JsonDict | None] | None = None
) -> tuple[str | None, str | None]:
    """(message, traceback) from a torchelastic error file, or (None, None). ``reader``:
    how the file is read (the launcher's is bounded in time, ``launch.books.stateio``).

    ``@record`` writes ``{"message": {"message": ..., "extraInfo": {"py_callstack": ...}}}``;
    older versions and hand-written files put a plain string in ``message``.
    """
    doc = (reader or read_json)(path)
    if doc is None:
        return None, None
    msg = doc.get("message")
    if isinstance(msg, str):
        return msg, None
    if not isinstance(msg, dict):
        return None, None
    text = msg.get("message")
    extra = msg.get("extraInfo") if isinstance(msg.get("extraInfo"), dict) else {}
    tb = extra.get("py_callstack") if isinstance(extra, dict) else None
    if isinstance(tb, str) and len(tb) > TRACEBACK_LIMIT:
        tb = "..." + tb[-TRACEBACK_LIMIT:]
    return (text if isinstance(text, str) else None), (tb if isinstance(tb, str) else None)
