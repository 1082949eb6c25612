"""Which files hold a cycle's output, and which rank ran where: from the state dir's
records only, never from guessed paths.

The cycle record names its log files (``records.LogFile``: one for the job, or one per
node with ``--applog-per-node``) and says who ran the cycle (``nodes``, ``active_nodes``,
``nproc_per_node``), so rank -> node follows the launcher's own rule: node rank K holds
ranks ``K * nproc .. K * nproc + nproc - 1``. Records are read with the report's tolerant
loader; a problem the reader must hear about is a :class:`LogsError` (one line, exit 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from slurm_ft import hostlist, logline
from slurm_ft.logs.ranks import format_set
from slurm_ft.records import CycleRecord, Failure, LogFile, OutcomeRecord
from slurm_ft.report import load
from slurm_ft.statedir import StateDir


class LogsError(Exception):
    """Bad input: an unknown job, a cycle that does not exist, a dir that is not a state dir."""


@dataclass(frozen=True)
class CycleLogs:
    """One cycle's log files and layout, as its record states them."""

    state: StateDir
    record: CycleRecord
    files: tuple[LogFile, ...]

    @property
    def cycle(self) -> int:
        return self.record.cycle

    @property
    def world_size(self) -> int:
        return self.record.world_size

    @property
    def width(self) -> int:
        return logline.rank_width(self.record.world_size)

    @property
    def prefix_length(self) -> int:
        return logline.prefix_length(self.record.world_size)

    @property
    def node_ranks(self) -> list[str]:
        """Who held each node rank (index = node rank)."""
        return list(self.record.active_nodes or self.record.nodes)

    def node_of(self, rank: int) -> str | None:
        nproc = self.record.nproc_per_node
        holders = self.node_ranks
        if nproc <= 0 or not 0 <= rank // nproc < len(holders):
            return None
        return holders[rank // nproc]

    def ranks_of(self, node: str) -> range:
        nproc = self.record.nproc_per_node
        holders = self.node_ranks
        if node not in holders:
            return range(0)
        k = holders.index(node)
        return range(k * nproc, (k + 1) * nproc)

    def files_of(self, nodes: set[str] | None) -> tuple[LogFile, ...]:
        """The files that can hold the lines of ``nodes`` (None: all): a per-node file only
        for its node, the job's shared file for everyone."""
        if nodes is None:
            return self.files
        return tuple(f for f in self.files if f.node is None or f.node in nodes)

    @property
    def failure(self) -> Failure | None:
        doc = self.record.first_failure
        if doc is None:
            return None
        try:
            return Failure.from_json(doc)
        except (TypeError, ValueError, KeyError):
            return None


@dataclass(frozen=True)
class Job:
    """What the state dir holds that the log reader uses."""

    state: StateDir
    files: load.StateFiles

    @property
    def cycles(self) -> list[CycleRecord]:
        return self.files.cycles

    def cycle(self, number: int | None, attempt: int | None = None) -> CycleLogs:
        """Cycle ``number`` (None: the last one, of ``attempt`` when given)."""
        records = self.cycles
        if attempt is not None:
            records = [c for c in records if c.attempt == attempt]
            if not records:
                known = sorted({c.attempt for c in self.cycles})
                raise LogsError(f"attempt {attempt} ran no cycle (attempts with cycles: {_list(known)})")
        if number is None:
            if not records:
                raise LogsError(f"state dir {self.state.path} has no cycle records yet")
            return logs_of(self.state, records[-1])
        for rec in records:
            if rec.cycle == number:
                return logs_of(self.state, rec)
        where = f" of attempt {attempt}" if attempt is not None else ""
        raise LogsError(f"cycle {number}{where} does not exist (cycles: {_list([c.cycle for c in records])})")

    def outcome_of(self, record: CycleRecord) -> OutcomeRecord | None:
        """The outcome of the launcher run that ran ``record``, once it is written."""
        for out in self.files.outcomes:
            if out.run_uuid == record.run_uuid:
                return out
        return None


def _list(numbers: list[int]) -> str:
    return format_set(numbers) or "none"


def logs_of(state: StateDir, record: CycleRecord) -> CycleLogs:
    files = []
    for doc in record.log_files:
        try:
            if not isinstance(doc, dict):
                raise ValueError(f"log file entry is not an object: {doc!r}")
            files.append(LogFile.from_json(doc))
        except ValueError as exc:
            raise LogsError(f"cycle {record.cycle}'s record is damaged: {exc}") from None
    return CycleLogs(state, record, tuple(files))


def open_job(path: Path, *, allow_empty: bool = False) -> Job:
    """The state dir at ``path``; LogsError when it is not one (``allow_empty``: a dir
    without records yet is taken, for following a job that has not started a cycle)."""
    try:
        if not path.exists():
            raise LogsError(f"state dir {path} does not exist")
        if not path.is_dir():
            raise LogsError(f"state dir {path} is not a directory")
    except OSError as exc:
        raise LogsError(f"state dir {path}: {exc.strerror or exc}") from None
    if not os.access(path, os.R_OK | os.X_OK):
        raise LogsError(f"state dir {path} is not readable")
    state = StateDir(path)
    files = load.load(state, accounting=False)
    if files.empty and not allow_empty:
        raise LogsError(f"{path} is not a slurm-ft state dir (no records in it)")
    return Job(state, files)


def ranks_on(logs: CycleLogs, spec: str) -> tuple[set[str], frozenset[int]]:
    """``--node NAME|HOSTLIST`` -> (the nodes, their ranks) in this cycle."""
    try:
        names = hostlist.expand(spec)
    except hostlist.HostlistError as exc:
        raise LogsError(f"--node: {exc}") from None
    ranks: set[int] = set()
    for name in names:
        held = logs.ranks_of(name)
        if not held:
            raise LogsError(
                f"node {name} ran no ranks in cycle {logs.cycle} "
                f"(nodes: {hostlist.compress(logs.node_ranks) if logs.node_ranks else 'none recorded'})"
            )
        ranks.update(held)
    return set(names), frozenset(ranks)
