"""The job-wide cycle counter in the state dir.

Cycle numbers continue across Slurm requeues so that no per-cycle log or record is ever
reused; the counter file is only a shortcut, the cycle records themselves are the truth
when it is missing or damaged.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from slurm_ft import atomicfile
from slurm_ft.statedir import CYCLE_RECORD_STEM, StateDir

if TYPE_CHECKING:
    from slurm_ft.launch.books.stateio import StateIO


def read_next_cycle(state: StateDir, io: StateIO | None = None) -> int:
    """The first global cycle number of this attempt: the counter, or one past the highest
    cycle record if the counter is missing or unreadable (never reuse a log file).
    ``io``: the launcher's bounded state-dir access; a state dir that does not answer
    raises ``StateDirStalled`` (no number can be trusted then)."""
    if io is not None and io.scribed:
        return _read_bounded(state, io)
    counter: int | None = None
    with contextlib.suppress(OSError, ValueError):
        counter = int(state.cycle_counter.read_text().strip())
    highest = max(state.recorded_cycles(), default=-1)
    return max(counter if counter is not None and counter >= 0 else 0, highest + 1)


def _read_bounded(state: StateDir, io: StateIO) -> int:
    from slurm_ft.launch.books.stateio import StateDirStalled

    counter: int | None = None
    with contextlib.suppress(OSError, ValueError):
        raw = io.read_bytes(state.cycle_counter)
        counter = int(raw.decode().strip()) if raw is not None else None
    with contextlib.suppress(OSError):
        names = io.list_names(state.cycles_dir)
    if io.stalled_on is not None:
        raise StateDirStalled(io.problem() or f"state dir {io.root} on {io.node} does not answer")
    stem = CYCLE_RECORD_STEM
    numbers = [
        n[len(stem) : -len(".json")] for n in names or () if n.startswith(stem) and n.endswith(".json")
    ]
    highest = max((int(n) for n in numbers if n.isdigit()), default=-1)
    return max(counter if counter is not None and counter >= 0 else 0, highest + 1)


def write_next_cycle(state: StateDir, value: int, io: StateIO | None = None) -> None:
    """``io``: the launcher's bounded state-dir access (kept in memory on a stall)."""
    data = f"{value}\n".encode()
    if io is not None:
        io.write_bytes(state.cycle_counter, data)
    else:
        atomicfile.write_bytes(state.cycle_counter, data)
