"""The newest complete snapshot: described from headers alone, or loaded into a state dict.

Describing is torch-free (the launcher lists what its node holds without importing torch
or touching a payload). Loading maps the slot file privately (copy-on-write) and builds
each tensor over its bytes with ``torch.frombuffer``: with ``copy=False`` the tensors
are the mapped pages themselves (no copy at all; safe where nothing writes the slot while
they are used: the launcher persisting after the workers have gone), with ``copy=True``
each is cloned once into the process's own memory. Either way the seal is read again
after the skeleton and tensors are taken, so a slot rewritten meanwhile is reported as
torn rather than returned.
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft.snapshot import claim, layout

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class SnapshotInfo:
    """One complete snapshot in an area, from its header."""

    key: str
    path: Path
    generation: int
    header: layout.Header

    @property
    def step(self) -> int:
        return self.header.step

    @property
    def world_size(self) -> int:
        return self.header.world_size

    @property
    def rank(self) -> int:
        return self.header.rank

    @property
    def replicated(self) -> bool:
        return self.header.replicated

    @property
    def size(self) -> int:
        """Bytes of the slot file: what shipping it moves."""
        return self.header.file_size


class Torn(Exception):
    """The slot changed or was unreadable while it was loaded."""


def read_header(path: Path) -> layout.Sealed | None:
    """The slot's sealed header, or None (no file, never sealed, torn, not a slot)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        sealed = layout.decode(os.pread(fd, layout.HEADER_SIZE, 0))
        if sealed is None or os.fstat(fd).st_size < sealed.header.file_size:
            return None
        return sealed
    except OSError:
        return None
    finally:
        os.close(fd)


def complete_slots(area: Path, key: str) -> list[SnapshotInfo]:
    """Both slots of ``key`` that hold a complete snapshot, the newest first."""
    found = []
    for path in layout.slot_paths(area, key):
        sealed = read_header(path)
        if sealed is not None:
            found.append(SnapshotInfo(key, path, sealed.generation, sealed.header))
    return sorted(found, key=lambda info: info.generation, reverse=True)


def newest(area: Path, key: str) -> SnapshotInfo | None:
    slots = complete_slots(area, key)
    return slots[0] if slots else None


def keys(area: Path) -> list[str]:
    try:
        names = os.listdir(area)
    except OSError:
        return []
    return sorted({key for name in names if (key := layout.key_of(Path(name))) is not None})


def describe(area: Path) -> list[SnapshotInfo]:
    """The newest complete snapshot of every key in the area (ranks, then the node's
    replicated copy), read from headers only."""
    return [info for key in keys(area) if (info := newest(area, key)) is not None]


def held_steps(area: Path) -> dict[str, list[int]]:
    """Every key's complete snapshots' steps, newest first (what the launcher reports for
    :func:`slurm_ft.snapshot.choice.newest_common_step`)."""
    return {key: [info.step for info in complete_slots(area, key)] for key in keys(area)}


@contextlib.contextmanager
def held_still(area: Path, key: str, *, wait_s: float) -> Iterator[SnapshotInfo | None]:
    """The key's newest complete snapshot, kept from change while the block runs: a worker
    that is still running skips its snapshots meanwhile (its call returns False). For the
    launcher persisting a snapshot (``load(copy=False)`` and ``torch.save`` inside the
    block) while the workers may still be alive. None: no snapshot, or the lock was not
    had within ``wait_s``."""
    lock = claim.KeyLock.acquire(layout.owner_path(area, key), shared=True, wait_s=wait_s)
    if lock is None:
        yield None
        return
    with lock:
        yield newest(area, key)


# --------------------------------------------------------------------------- loading


def load(info: SnapshotInfo, *, copy: bool) -> dict[str, object]:
    """The state dict of a complete snapshot; raises :class:`Torn` when the slot is not
    the snapshot ``info`` describes any more (rewritten, removed, corrupt)."""
    try:
        fd = os.open(info.path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise Torn(f"{info.path}: {exc.strerror}") from None
    try:
        size = info.header.file_size
        if os.fstat(fd).st_size < size:
            raise Torn(f"{info.path}: shorter than its header says")
        view = mmap.mmap(fd, size, access=mmap.ACCESS_COPY)
    finally:
        os.close(fd)
    state = _unpickle(view, info.header, copy)
    if layout.decode(view[: layout.HEADER_SIZE]) != layout.Sealed(info.header, info.generation):
        raise Torn(f"{info.path}: rewritten while it was read")
    if copy:
        try:
            view.close()
        except BufferError:  # a view is still referenced somewhere: the GC unmaps it
            pass
    return state


def _unpickle(view: mmap.mmap, header: layout.Header, copy: bool) -> dict[str, object]:
    start = layout.HEADER_SIZE + header.tensor_bytes
    unpickler = _SkeletonUnpickler(view, header, copy, view[start : start + header.skeleton_size])
    try:
        state = unpickler.load()
    except Exception as exc:  # a skeleton that does not load is a corrupt slot, whatever it raised
        raise Torn(f"the skeleton does not load: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict):
        raise Torn("the skeleton is not a state dict")
    return state


class _SkeletonUnpickler(pickle.Unpickler):
    def __init__(self, view: mmap.mmap, header: layout.Header, copy: bool, skeleton: bytes) -> None:
        super().__init__(io.BytesIO(skeleton))
        self._view = view
        self._header = header
        self._copy = copy

    def find_class(self, module: str, name: str) -> object:
        if (module, name) == (layout.__name__, layout.tensor_ref.__name__):
            return self._tensor
        return super().find_class(module, name)

    def _tensor(self, offset: object, dtype_name: object, shape: object) -> torch.Tensor:
        import torch

        pid = (offset, dtype_name, shape)
        dtype = getattr(torch, str(dtype_name), None)
        if not isinstance(dtype, torch.dtype) or not isinstance(offset, int) or not isinstance(shape, tuple):
            raise pickle.UnpicklingError(f"bad tensor reference {pid!r}")
        numel = 1
        for dim in shape:
            if not isinstance(dim, int) or dim < 0:
                raise pickle.UnpicklingError(f"bad tensor shape {shape!r}")
            numel *= dim
        nbytes = numel * dtype.itemsize
        if offset < 0 or offset % layout.ALIGN or offset + nbytes > self._header.tensor_bytes:
            raise pickle.UnpicklingError(f"tensor reference {pid!r} outside the slot")
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype)
        # a storage of its own per tensor, not views of one region: torch.save (the launcher
        # persisting a mapped snapshot) refuses tensors of several dtypes over one storage
        raw = torch.frombuffer(
            self._view, dtype=torch.uint8, count=nbytes, offset=layout.HEADER_SIZE + offset
        )
        tensor = raw.view(dtype).view(shape)
        return tensor.clone() if self._copy else tensor
