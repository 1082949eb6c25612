"""The job-wide cycle counter in the state dir.

Cycle numbers continue across Slurm requeues so that no per-cycle log or record is ever
reused; the counter file is only a shortcut, the cycle records themselves are the truth
when it is missing or damaged.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from slurm_ft import atomicfile
from slurm_ft.statedir import StateDir

if TYPE_CHECKING:
    from slurm_ft.launch.stateio import StateIO


def read_next_cycle(state: StateDir) -> int:
    """The first global cycle number of this attempt: the counter, or one past the highest
    cycle record if the counter is missing or unreadable (never reuse a log file)."""
    counter: int | None = None
    with contextlib.suppress(OSError, ValueError):
        counter = int(state.cycle_counter.read_text().strip())
    highest = max(state.recorded_cycles(), default=-1)
    return max(counter if counter is not None and counter >= 0 else 0, highest + 1)


def write_next_cycle(state: StateDir, value: int, io: StateIO | None = None) -> None:
    """``io``: the launcher's bounded state-dir access (kept in memory on a stall)."""
    data = f"{value}\n".encode()
    if io is not None:
        io.write_bytes(state.cycle_counter, data)
    else:
        atomicfile.write_bytes(state.cycle_counter, data)
