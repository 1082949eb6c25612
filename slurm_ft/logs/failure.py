"""Why did a cycle fail: the first failure from the records, with the lines that explain it.

What someone needs at 3 a.m.: which rank on which node failed and how (the cycle
record's ``first_failure``), that rank's last lines before it, its traceback (the
torchelastic error file's, kept in the record, else the last one the rank printed), for a
hang the stacks the launcher kept before it stopped the workers (``StateDir.stacks_file``,
in the rank's node's directory;
ranks with the same stack are shown once, with their rank set), and where the full files
are. Built here as data; the front end prints it as text, a table or JSON.
"""

from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from slurm_ft import logline
from slurm_ft.logs import select
from slurm_ft.logs.ranks import format_set
from slurm_ft.logs.source import CycleLogs
from slurm_ft.records import CycleOutcome, Failure, FailureKind

TRACEBACK_START = b"Traceback (most recent call last):"
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
MAX_STACK_GROUPS = 8


@dataclass(frozen=True)
class StackGroup:
    """One distinct stack and the ranks that showed it."""

    ranks: tuple[int, ...]
    text: str

    def to_json(self) -> dict[str, object]:
        return {"ranks": format_set(self.ranks), "rank_count": len(self.ranks), "text": self.text}


@dataclass
class FailureView:
    cycle: int
    attempt: int
    outcome: str
    failure: Failure | None
    last_lines: list[str] = field(default_factory=list)  # the failing rank's, prefix kept
    traceback: str | None = None
    traceback_source: str | None = None  # "error file" | "log"
    stacks: list[StackGroup] = field(default_factory=list)
    stacks_missing: list[int] = field(default_factory=list)
    files: list[tuple[str, int | None]] = field(default_factory=list)  # path, size (None: missing)
    failed_cycles: list[int] = field(default_factory=list)  # other cycles of the job with a failure

    def to_json(self) -> dict[str, object]:
        return {
            "cycle": self.cycle,
            "attempt": self.attempt,
            "outcome": self.outcome,
            "failure": self.failure.to_json() if self.failure else None,
            "last_lines": self.last_lines,
            "traceback": self.traceback,
            "traceback_source": self.traceback_source,
            "stacks": [s.to_json() for s in self.stacks],
            "stacks_missing": format_set(self.stacks_missing),
            "files": [{"path": p, "size": s} for p, s in self.files],
            "failed_cycles": self.failed_cycles,
        }


def _size(path: str | Path) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def rank_lines(logs: CycleLogs, rank: int, keep: int, node: str | None) -> tuple[list[bytes], bytes | None]:
    """The last ``keep`` lines of ``rank`` (worker output, launcher notes left out) and its
    last traceback (from its last ``Traceback`` line to its end; bounded to ``keep * 4``
    lines). One pass over the files that can hold the rank's lines."""
    files = [Path(f.path) for f in logs.files_of({node} if node else None)]
    files = [p for p in files if _size(p) is not None]
    if not files:
        return [], None
    filt = select.LineFilter(select.Selection(ranks=frozenset({rank})), logs.world_size)
    note = logline.rank_prefix(rank, logs.width, logline.NOTE_MARK)
    tail: deque[bytes] = deque(maxlen=keep)
    trace: list[bytes] | None = None
    limit = keep * 4
    for block in select.merged_blocks(files, [_size(p) or 0 for p in files]):
        for line in select.lines_of(filt.pieces(block)):
            if line.startswith(note):
                continue
            tail.append(line)
            text = line[logs.prefix_length :]
            if text.startswith(TRACEBACK_START):
                trace = [line]
            elif trace is not None and len(trace) < limit:
                trace.append(line)
    traceback = b"\n".join(x[logs.prefix_length :] for x in trace) if trace else None
    return list(tail), traceback


def node_lines(logs: CycleLogs, node: str, keep: int) -> list[bytes]:
    """The last ``keep`` lines the ranks of ``node`` printed (launcher notes left out)."""
    files = [Path(f.path) for f in logs.files_of({node})]
    files = [p for p in files if _size(p) is not None]
    ranks = frozenset(logs.ranks_of(node))
    filt = select.LineFilter(select.Selection(ranks=ranks), logs.world_size)
    notes = {logline.rank_prefix(r, logs.width, logline.NOTE_MARK) for r in ranks}
    p = logs.prefix_length
    tail: deque[bytes] = deque(maxlen=keep)
    for block in select.merged_blocks(files, [_size(f) or 0 for f in files]) if files else ():
        tail.extend(line for line in select.lines_of(filt.pieces(block)) if line[:p] not in notes)
    return list(tail)


def _stack_groups(logs: CycleLogs, ranks: list[int]) -> tuple[list[StackGroup], list[int]]:
    """Ranks whose stacks differ only in thread addresses (each process has its own) are
    one group, shown with the stack of its first rank."""
    by_shape: dict[str, tuple[str, list[int]]] = {}
    missing = []
    for r in ranks:
        try:
            text = _stacks_file(logs, r).read_text(errors="replace").strip()
        except OSError:
            missing.append(r)
            continue
        by_shape.setdefault(_ADDRESS.sub("0x...", text), (text, []))[1].append(r)
    groups = [StackGroup(tuple(rs), text) for text, rs in by_shape.values()]
    groups.sort(key=lambda g: (-len(g.ranks), g.ranks))
    return groups, missing


def explain(logs: CycleLogs, failed_cycles: list[int], keep: int = 20) -> FailureView:
    rec = logs.record
    failure = logs.failure
    view = FailureView(
        cycle=rec.cycle,
        attempt=rec.attempt,
        outcome=rec.outcome.value if isinstance(rec.outcome, CycleOutcome) else str(rec.outcome),
        failure=failure,
        failed_cycles=[c for c in failed_cycles if c != rec.cycle],
    )
    view.files = [(f.path, _size(f.path)) for f in logs.files]
    if failure is None:
        return view
    if failure.rank is not None:
        node = logs.node_of(failure.rank) or failure.node
        lines, traceback = rank_lines(logs, failure.rank, keep, node if _per_node(logs) else None)
        view.last_lines = [x.decode(errors="replace") for x in lines]
        if failure.traceback:
            view.traceback, view.traceback_source = failure.traceback, "error file"
        elif traceback:
            view.traceback, view.traceback_source = traceback.decode(errors="replace"), "log"
        err = _kept(
            logs.state.error_file(failure.node, rec.cycle, failure.rank),
            logs.state.legacy_error_file(rec.cycle, failure.rank),
        )
        if _size(err) is not None:
            view.files.append((str(err), _size(err)))
    elif failure.kind is not FailureKind.HANG and logs.ranks_of(failure.node):
        # a lost node, its NIC, its launcher: what its ranks printed last
        view.last_lines = [x.decode(errors="replace") for x in node_lines(logs, failure.node, keep)]
    if failure.kind is FailureKind.HANG:
        hung = failure.hung_ranks or list(range(logs.world_size))
        view.stacks, view.stacks_missing = _stack_groups(logs, hung)
        for group in view.stacks[:MAX_STACK_GROUPS]:
            path = _stacks_file(logs, group.ranks[0])
            view.files.append((str(path), _size(path)))
    return view


def _stacks_file(logs: CycleLogs, rank: int) -> Path:
    node = logs.node_of(rank) or ""
    return _kept(
        logs.state.stacks_file(node, logs.cycle, rank), logs.state.legacy_stacks_file(logs.cycle, rank)
    )


def _kept(path: Path, legacy: Path) -> Path:
    """``path``, or where the layout before #45 kept the file when only that one exists (a
    job requeued across an upgrade keeps its earlier cycles)."""
    return legacy if _size(path) is None and _size(legacy) is not None else path


def _per_node(logs: CycleLogs) -> bool:
    return any(f.node is not None for f in logs.files)
