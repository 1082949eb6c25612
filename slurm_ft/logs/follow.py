"""``-f``: follow a running job's cycle log, cycle after cycle, until its outcome is written.

The launcher appends whole lines (one ``writev`` each), so new bytes are read from where
the last look stopped, and a line still being written (an NFS client, a full disk) waits
for its ``\\n``. A newer cycle record means a restart: the old cycle's files are read to
their end (its workers were stopped and its log closed before the next record was
written), then the new cycle's files are followed. The launcher run that wrote the cycle
writing its outcome ends the follow, after a last read. Polling, like ``tail -f``: every
``poll`` seconds, stat and read only the files that grew.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from slurm_ft import records
from slurm_ft.logs.source import CycleLogs, Job, LogsError, logs_of, open_job
from slurm_ft.records import CycleRecord

READ_LIMIT = 4 << 20
Emit = Callable[[CycleLogs, list[bytes]], None]
Announce = Callable[[str], None]


@dataclass
class _FileState:
    path: Path
    pos: int = 0
    carry: bytes = b"\n"


@dataclass
class _Cycle:
    logs: CycleLogs
    files: list[_FileState] = field(default_factory=list)


def _open(logs: CycleLogs, from_end: bool) -> _Cycle:
    cur = _Cycle(logs)
    for f in logs.files:
        state = _FileState(Path(f.path))
        if from_end:
            try:
                state.pos = os.path.getsize(state.path)
            except OSError:
                state.pos = 0
        cur.files.append(state)
    return cur


def _read_new(f: _FileState, *, final: bool) -> tuple[bytes | None, bool]:
    """New whole lines of ``f`` as a block (starts and ends with ``\\n``) or None, and
    whether more is waiting: at most :data:`READ_LIMIT` bytes a call, so following a job
    whose file is already large starts with bounded memory. ``final``: the file is
    complete, an unterminated last line is given its ``\\n``."""
    try:
        size = os.path.getsize(f.path)
    except OSError:
        return None, False
    if size < f.pos:  # truncated by hand: start over
        f.pos, f.carry = 0, b"\n"
    want = min(size - f.pos, READ_LIMIT)
    more = size - f.pos > want
    if want == 0:
        if final and len(f.carry) > 1:
            data, f.carry = f.carry + b"\n", b"\n"
            return data, False
        return None, False
    with open(f.path, "rb") as fh:
        fh.seek(f.pos)
        data = fh.read(want)
    f.pos += len(data)
    data = f.carry + data
    if final and not more:
        f.carry = b"\n"
        return (data if data.endswith(b"\n") else data + b"\n"), False
    cut = data.rfind(b"\n")
    f.carry = data[cut:]
    return (data[: cut + 1] if cut > 0 else None), more


def _next_cycle(logs: CycleLogs) -> CycleLogs | None:
    later = [c for c in logs.state.recorded_cycles() if c > logs.cycle]
    for number in later:
        doc = records.read_json(logs.state.cycle_record(number))
        if doc is None:
            continue  # being written: the next look sees it whole
        try:
            rec = CycleRecord.from_json(doc)
        except (TypeError, ValueError, KeyError) as exc:
            raise LogsError(f"cycle {number}'s record is damaged: {exc}") from None
        return logs_of(logs.state, rec)
    return None


def _finished(logs: CycleLogs) -> bool:
    doc = records.read_json(logs.state.outcome)
    return doc is not None and doc.get("run_uuid") == logs.record.run_uuid


def follow(
    logs: CycleLogs,
    emit: Emit,
    announce: Announce,
    *,
    poll: float = 0.25,
    from_end: bool = False,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Follow from ``logs`` (from the files' current ends with ``from_end``) until the run's
    outcome is written; returns the exit code (0). ^C is the caller's to turn into an exit."""
    cur = _open(logs, from_end)
    while True:
        # A later cycle first: every cycle of a launcher run shares its outcome's run_uuid,
        # so a follower that comes late sees the outcome while still on an earlier cycle.
        nxt = _next_cycle(cur.logs)
        done = nxt is None and _finished(cur.logs)
        final = done or nxt is not None
        for f in cur.files:
            more = True
            while more:
                block, more = _read_new(f, final=final)
                if block is not None:
                    emit(cur.logs, [block])
        if done:
            announce(f"cycle {cur.logs.cycle}: the job's outcome is written, end of follow")
            return 0
        if nxt is not None:
            announce(f"cycle {cur.logs.cycle} ended; following cycle {nxt.cycle}")
            cur = _open(nxt, False)
            continue
        sleep(poll)


def first_cycle(
    path: Path, announce: Announce, *, poll: float = 0.25, sleep: Callable[[float], None] = time.sleep
) -> Job:
    """The job at ``path`` once it has a cycle record: ``-f`` right after ``sbatch``."""
    job = open_job(path, allow_empty=True)
    if not job.cycles:
        announce(f"waiting for the first cycle record in {path}")
    while not job.cycles:
        sleep(poll)
        job = open_job(path, allow_empty=True)
    return job
