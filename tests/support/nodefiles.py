"""What a launcher appended to its node's own files in the state dir (``StateDir.node_dir``),
read back for a test's assertions."""

from __future__ import annotations

from pathlib import Path

from slurm_ft import jsonlines
from slurm_ft.statedir import StateDir


def processes(state: Path | StateDir, node: str, cycle: int) -> dict:
    """``node``'s process record of ``cycle`` (its last line of the cycle); KeyError when none."""
    state = state if isinstance(state, StateDir) else StateDir(state)
    found = {doc.get("cycle"): doc for doc in jsonlines.read(state.node_processes(node))}
    return found[cycle]


def snapshots(state: Path | StateDir, node: str, cycle: int) -> dict:
    """``node``'s snapshot record of ``cycle`` (its last line of the cycle); KeyError when none."""
    state = state if isinstance(state, StateDir) else StateDir(state)
    found = {doc.get("cycle"): doc for doc in jsonlines.read(state.node_snapshots(node))}
    return found[cycle]


def has_processes(state: Path | StateDir, node: str, cycle: int) -> bool:
    try:
        processes(state, node, cycle)
    except KeyError:
        return False
    return True


def stacks_file(state: Path | StateDir, node: str, cycle: int, rank: int) -> Path:
    return (state if isinstance(state, StateDir) else StateDir(state)).stacks_file(node, cycle, rank)
