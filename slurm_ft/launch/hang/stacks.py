"""The evidence a hang leaves: each worker's Python stacks, asked for by signal."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from slurm_ft.launch.hang.proc import STOPPED_STATES, process_state
from slurm_ft.launch.workers.env import STACK_SIGNAL


def collect_stacks(
    files: Mapping[int, tuple[int, str]], timeout: float, clock: Callable[[], float] = time.monotonic
) -> dict[int, str]:
    """Ask each worker (rank -> (pid, stack file)) for its stacks and read what they wrote
    within ``timeout``; a worker that cannot answer (not Python, stuck in C with the
    GIL... faulthandler still answers then) is simply missing from the result. A worker
    that is stopped (state T: SIGSTOPped or traced) cannot answer at all: it is not asked
    and not waited for, and its entry says so instead of a stack."""
    stopped = {rank: pid for rank, (pid, _) in files.items() if process_state(pid) in STOPPED_STATES}
    asked = {rank: entry for rank, entry in files.items() if rank not in stopped}
    for pid, _ in asked.values():
        try:
            os.kill(pid, STACK_SIGNAL)
        except (ProcessLookupError, PermissionError):
            continue
    deadline = clock() + timeout
    sizes: dict[int, int] = {}
    stable: dict[int, int] = {}
    while asked:
        for rank, (_, path) in asked.items():
            try:
                size = os.path.getsize(path)
            except OSError:
                size = 0
            stable[rank] = stable.get(rank, 0) + 1 if size and size == sizes.get(rank) else 0
            sizes[rank] = size
        if all(stable.get(rank, 0) >= 2 for rank in asked) or clock() >= deadline:
            break
        time.sleep(0.02)
    out = {
        rank: f"pid {pid} is stopped (process state T: SIGSTOPped or traced); it cannot answer, no stacks\n"
        for rank, pid in stopped.items()
    }
    for rank, (_, path) in asked.items():
        try:
            text = Path(path).read_text(errors="replace")
        except OSError:
            continue
        if text:
            out[rank] = text
    return out
