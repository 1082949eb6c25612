"""The persisted copy of a snapshot: what the launchers write to durable storage on the
way out of an attempt (``--snapshot-persist-dir``), and what the next attempt's restore
falls back to when the node's memory holds nothing.

One ``torch.save`` file per rank (``rank-RRRRR.pt``), or one for the replicated state
(``replicated.pt``), each holding the step, the placement it was taken in and the state.
Written to a temporary name, flushed to disk, then renamed: a persist cut short (a
deadline, a dead mount) leaves the previous complete file, never a torn one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft import privatefiles
from slurm_ft.snapshot import layout

if TYPE_CHECKING:
    from slurm_ft.snapshot.reader import SnapshotInfo

FORMAT_VERSION = 1
SUFFIX = ".pt"


def path_for(directory: Path, rank: int, replicated: bool) -> Path:
    return directory / f"{layout.REPLICATED if replicated else layout.rank_key(rank)}{SUFFIX}"


def save(directory: Path, info: SnapshotInfo, state: dict[str, object]) -> Path:
    """Write ``state`` (the snapshot ``info`` describes) durably; returns its path."""
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    target = path_for(directory, info.rank, info.replicated)
    doc = {
        "version": FORMAT_VERSION,
        "step": info.step,
        "rank": info.rank,
        "world_size": info.world_size,
        "replicated": info.replicated,
        "state": state,
    }
    fd, tmp = privatefiles.create_file(directory, f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(doc, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        _unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def load(directory: Path, rank: int, world_size: int) -> tuple[int, dict[str, object]] | None:
    """The persisted step and state of ``rank`` (its own file, else the replicated copy);
    None when there is none, or it was taken with another world size or by another rank."""
    import torch

    for replicated in (False, True):
        path = path_for(directory, rank, replicated)
        if not path.is_file():
            continue
        doc = torch.load(path, map_location="cpu", weights_only=False)
        if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
            continue
        if doc.get("world_size") != world_size or (not replicated and doc.get("rank") != rank):
            continue
        step, state = doc.get("step"), doc.get("state")
        if isinstance(step, int) and isinstance(state, dict):
            return step, state
    return None
