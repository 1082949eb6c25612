"""The persisted copy of a snapshot: what the launchers write to durable storage on the way
out of an attempt (``--snapshot-persist-dir``), and what the next attempt's restore falls
back to when the node's memory holds nothing.

The persisted copy is the snapshot's own slot file, copied as bytes (``rank-RRRRR.step<N>.snap``,
or ``replicated.step<N>.snap`` for the node's copy of replicated state): its sealed header
says the step, the placement and the payload's size, and it is loaded like any slot
(:func:`slurm_ft.snapshot.reader.load`). No torch at the breakpoint: a ``torch.save`` of
the state meant importing torch in the persisting child (1.5-3.5 s of CPU on a loaded
2-core node) and pickling every tensor, and four launchers doing that at once at a
preemption did not finish in a 10 s grace period (the 20-minute goodput run of issue 43).
A copy of 1 GiB is a page-cache write and an fsync (``benchmarks.snapshot_persist``).
Whoever wants a ``torch.save`` file has :func:`export`, or a persist hook.

Written to a temporary name, flushed to disk, then renamed: a persist cut short (a
deadline, a dead mount) leaves the previous complete file, never a torn one. The source
slot's seal is read again after the copy: a slot rewritten meanwhile (a leftover writer)
is reported, not persisted. The step is in the name because several launchers may persist
the same key (every node holds a replicated copy; a node that was replaced still holds its
ranks' older snapshots), and a key keeps its two newest steps (a save removes only the older
ones): a breakpoint often finds the ranks a step apart, each node persists both of its
slots, and the next attempt resumes every rank from the newest step that every rank has
(:func:`resume_step`), never each rank from its own newest, which mixed steps across ranks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft import privatefiles
from slurm_ft.snapshot import layout, reader

if TYPE_CHECKING:
    from slurm_ft.snapshot.reader import SnapshotInfo

SUFFIX = layout.SUFFIX
_CHUNK = 64 << 20  # one sendfile call at most: a deadline's SIGKILL lands between calls
KEPT_STEPS = 2  # per key: the breakpoint's step and the one before it


class NoCommonStep(Exception):
    """Persisted snapshots exist, but no step that every rank can resume from."""


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


def _copy(src: int, dst: int, size: int) -> None:
    """``size`` bytes of ``src`` from its start into ``dst`` (in the kernel where it can)."""
    done = 0
    while done < size:
        try:
            sent = os.sendfile(dst, src, done, min(_CHUNK, size - done))
        except OSError:  # a file system without sendfile into it: through user space
            sent = os.write(dst, os.pread(src, min(_CHUNK, size - done), done))
        if sent <= 0:
            raise reader.Torn("the slot is shorter than its header says")
        done += sent


def save(directory: Path, info: SnapshotInfo) -> Path:
    """Copy the slot ``info`` describes into ``directory`` durably; returns the copy's path.
    Raises :class:`slurm_ft.snapshot.reader.Torn` when the slot changed meanwhile, OSError
    when the directory cannot take it."""
    directory.mkdir(parents=True, exist_ok=True)
    target = path_for(directory, info.rank, info.replicated, info.step)
    expected = layout.Sealed(info.header, info.generation)
    try:
        src = os.open(info.path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise reader.Torn(f"{info.path}: {exc.strerror}") from None
    try:
        fd, tmp = privatefiles.create_file(directory, f".{target.name}.")
        try:
            try:
                _copy(src, fd, info.header.file_size)
                os.fsync(fd)
            finally:
                os.close(fd)
            copied = reader.read_header(Path(tmp))
            if copied != expected or layout.decode(os.pread(src, layout.HEADER_SIZE, 0)) != expected:
                raise reader.Torn(f"{info.path}: rewritten while it was copied")
            os.replace(tmp, target)
        except BaseException:
            _unlink(tmp)
            raise
    finally:
        os.close(src)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    for _step, older in _steps(directory, info.rank, info.replicated)[KEPT_STEPS:]:
        _unlink(str(older))
    return target


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def describe(path: Path) -> SnapshotInfo | None:
    """A persisted file as a snapshot (its sealed header), or None: not one, torn, short."""
    sealed = reader.read_header(path)
    if sealed is None:
        return None
    key = layout.REPLICATED if sealed.header.replicated else layout.rank_key(sealed.header.rank)
    return reader.SnapshotInfo(key, path, sealed.generation, sealed.header)


def _held(directory: Path) -> dict[str, set[int]]:
    """Every key's persisted steps, from the names alone (one listing: no header is read,
    so a worker of a job of thousands of ranks reads one directory, not every file)."""
    held: dict[str, set[int]] = {}
    try:
        names = os.listdir(directory)
    except OSError:
        return held
    for name in names:
        key, sep, rest = name.partition(".step")
        if sep and rest.endswith(SUFFIX) and rest[: -len(SUFFIX)].isdigit():
            held.setdefault(key, set()).add(int(rest[: -len(SUFFIX)]))
    return held


def resume_step(held: dict[str, set[int]], world_size: int) -> int | None:
    """The newest step that each of ``world_size`` ranks has, its own file or a replicated
    copy; None when there is none. Pure: every worker computes the same step from the same
    listing."""
    replicated = held.get(layout.REPLICATED, set())
    common: set[int] | None = None
    for rank in range(world_size):
        have = held.get(layout.rank_key(rank), set()) | replicated
        common = have if common is None else common & have
        if not common:
            return None
    return max(common) if common else None


def load(directory: Path, rank: int, world_size: int) -> tuple[int, dict[str, object]] | None:
    """The persisted state of ``rank`` at the newest step every rank has (its own file,
    else the replicated copy); None when nothing was persisted, or it was taken with
    another world size or by another rank. Raises :class:`NoCommonStep` when files exist
    but no step is common to every rank, :class:`slurm_ft.snapshot.reader.Torn` for a file
    that is not a whole snapshot."""
    held = _held(directory)
    if not held:
        return None
    step = resume_step(held, world_size)
    if step is None:
        mine = sorted(held.get(layout.rank_key(rank), set()) | held.get(layout.REPLICATED, set()))
        raise NoCommonStep(
            f"no step that all {world_size} ranks persisted (this rank has {mine or 'none'}): "
            "resuming from the checkpoint, never from a mix of steps"
        )
    for replicated in (False, True):
        path = path_for(directory, rank, replicated, step)
        if not path.exists():
            continue
        info = describe(path)
        if info is None:
            raise reader.Torn(f"{path}: not a complete snapshot")
        if info.step != step or info.replicated != replicated:
            raise reader.Torn(f"{path}: its header says step {info.step}, not the step in its name")
        if info.world_size != world_size or (not replicated and info.rank != rank):
            return None
        return step, reader.load(info, copy=True)
    return None


def export(path: Path, out: Path) -> int:
    """A persisted file as one ``torch.save`` file (``{"step", "rank", "world_size",
    "replicated", "state"}``), for tools that read those; returns its step. Raises
    :class:`slurm_ft.snapshot.reader.Torn` for a file that is not a whole snapshot."""
    import torch

    info = describe(path)
    if info is None:
        raise reader.Torn(f"{path}: not a complete snapshot")
    state = reader.load(info, copy=False)
    doc = {
        "step": info.step,
        "rank": info.rank,
        "world_size": info.world_size,
        "replicated": info.replicated,
        "state": state,
    }
    with open(out, "wb") as fh:  # an output that cannot be opened is an OSError, not torch's
        torch.save(doc, fh)
    return info.step
