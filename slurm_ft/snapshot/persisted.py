"""The persisted copy of a snapshot: what the launchers write to durable storage on the
way out of an attempt (``--snapshot-persist-dir``), and what the next attempt's restore
falls back to when the node's memory holds nothing.

One ``torch.save`` file per rank (``rank-RRRRR.step<N>.pt``), or for the replicated state
(``replicated.step<N>.pt``), each holding the step, the placement it was taken in and the
state. Written to a temporary name, flushed to disk, then renamed: a persist cut short (a
deadline, a dead mount) leaves the previous complete file, never a torn one. The step is in
the name because several launchers may persist the same key (every node holds a replicated
copy; a node that was replaced still holds its ranks' older snapshots): the newest step
wins whoever writes last, and a save removes only the key's older files.
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


def _key(rank: int, replicated: bool) -> str:
    return layout.REPLICATED if replicated else layout.rank_key(rank)


def path_for(directory: Path, rank: int, replicated: bool, step: int) -> Path:
    return directory / f"{_key(rank, replicated)}.step{step:012d}{SUFFIX}"


def _steps(directory: Path, rank: int, replicated: bool) -> list[tuple[int, Path]]:
    """The key's persisted files, the newest step first."""
    prefix = f"{_key(rank, replicated)}.step"
    found = []
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    for name in names:
        if name.startswith(prefix) and name.endswith(SUFFIX):
            digits = name[len(prefix) : -len(SUFFIX)]
            if digits.isdigit():
                found.append((int(digits), directory / name))
    return sorted(found, reverse=True)


def save(directory: Path, info: SnapshotInfo, state: dict[str, object]) -> Path:
    """Write ``state`` (the snapshot ``info`` describes) durably; returns its path."""
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    target = path_for(directory, info.rank, info.replicated, info.step)
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
    for step, older in _steps(directory, info.rank, info.replicated):
        if step < info.step:
            _unlink(str(older))
    return target


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def load(directory: Path, rank: int, world_size: int) -> tuple[int, dict[str, object]] | None:
    """The persisted step and state of ``rank`` (its own newest file, else the newest
    replicated copy);
    None when there is none, or it was taken with another world size or by another rank."""
    import torch

    for replicated in (False, True):
        newest = _steps(directory, rank, replicated)
        if not newest:
            continue
        doc = torch.load(newest[0][1], map_location="cpu", weights_only=False)
        if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION:
            continue
        if doc.get("world_size") != world_size or (not replicated and doc.get("rank") != rank):
            continue
        step, state = doc.get("step"), doc.get("state")
        if isinstance(step, int) and isinstance(state, dict):
            return step, state
    return None
