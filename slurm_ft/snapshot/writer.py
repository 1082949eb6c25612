"""A state dict into a slot: tensors copied straight into shared memory, the rest pickled.

The state is pickled once with every tensor replaced by a persistent reference (its
offset, dtype and shape in the slot): the skeleton is what ``torch.save`` would write minus
the tensors, a few kilobytes. Each tensor's bytes are copied by torch from the tensor into
a view of the mapped slot file, in chunks: no pickling of tensor data, no intermediate
buffer, and a non-contiguous tensor is copied through its strides into a contiguous view.

The slot's memory is reserved (``posix_fallocate``) under the area's space lock before a
byte is copied, so the node's cap is checked with every other rank's slots counted, and a
full ``/dev/shm`` is an ``ENOSPC`` at the call - never a ``SIGBUS`` in the middle of a copy.

CUDA tensors (written for, not yet run on a GPU here): the slot's mapping is registered
as pinned memory with the CUDA runtime, each tensor is copied on a side stream that first
waits for the training stream (so the copy sees the state at the step boundary, and the
training stream itself never waits on the copy), and the seal is written only after the
side stream's event has completed.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import fcntl
import io
import mmap
import os
import pickle
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from slurm_ft.snapshot import area as areas
from slurm_ft.snapshot import claim, layout

CHUNK_BYTES = 64 << 20
# ChunkHook(k) runs before the k-th chunk is copied, and with k = the number of chunks
# just before the seal: a test kills the writer there to prove a torn copy is never seen.
ChunkHook = Callable[[int], None]


class Outcome(enum.Enum):
    KEPT = "kept"
    OVER_LIMIT = "over the node's snapshot memory"
    NO_SPACE = "shared memory full"
    NOT_OWNER = "another worker owns the rank"
    BUSY = "the slots are in use"
    UNSUPPORTED = "the state cannot be snapshot"


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    message: str = ""  # the one line to say (empty when kept or busy)
    size: int = 0  # bytes the snapshot needs in its slot


class Unsupported(Exception):
    """The state holds something a snapshot cannot keep; the message says what."""


@dataclass(frozen=True)
class Plan:
    """Where each tensor goes in the slot, and the skeleton that refers to them."""

    tensors: tuple[tuple[torch.Tensor, int], ...]  # (tensor, offset in the tensor region)
    tensor_bytes: int
    skeleton: bytes

    @property
    def file_size(self) -> int:
        return layout.HEADER_SIZE + self.tensor_bytes + len(self.skeleton)


class _SkeletonPickler(pickle.Pickler):
    """Pickles the state with every tensor reduced to a reference to its place in the slot.
    ``reducer_override`` is asked only about objects that are not plain containers and
    scalars, so a state dict's thousands of ints and strings cost no Python call; a tensor
    met twice is pickled once (the pickler's memo) and restored as one object."""

    def __init__(self, out: io.BytesIO) -> None:
        super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
        self.placed: list[tuple[torch.Tensor, int]] = []
        self.end = 0

    def reducer_override(self, obj: object) -> tuple[Callable[..., object], tuple[object, ...]]:
        if not isinstance(obj, torch.Tensor):
            return NotImplemented  # type: ignore[no-any-return]  # pickle's own word for "pickle it as usual"
        tensor = _plain(obj)
        offset = self.end
        self.placed.append((tensor, offset))
        self.end += layout.align(tensor.numel() * tensor.element_size())
        return layout.tensor_ref, (offset, str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape))


def _plain(obj: torch.Tensor) -> torch.Tensor:
    if type(obj) not in (torch.Tensor, torch.nn.Parameter):
        raise Unsupported(f"a {type(obj).__name__} tensor (pass plain tensors, e.g. a DTensor's to_local())")
    if obj.layout != torch.strided or obj.is_quantized or obj.device.type not in ("cpu", "cuda"):
        raise Unsupported(
            f"a {obj.layout} {obj.dtype} tensor on {obj.device} (plain CPU or CUDA tensors only)"
        )
    return obj.detach()


def plan(state: Mapping[str, object]) -> Plan:
    """Lay the state out; raises :class:`Unsupported` (a value that cannot be pickled too)."""
    out = io.BytesIO()
    pickler = _SkeletonPickler(out)
    try:
        pickler.dump(dict(state))
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise Unsupported(f"a value that cannot be pickled: {exc}") from None
    return Plan(tensors=tuple(pickler.placed), tensor_bytes=pickler.end, skeleton=out.getvalue())


@dataclass(frozen=True)
class Identity:
    """Who writes: everything of the header but the step and the payload's sizes."""

    world_size: int
    rank: int
    node_rank: int
    local_rank: int
    local_world_size: int
    cycle: int
    pid: int
    start_ticks: int | None


class _Mapped:
    """One slot file kept open and mapped between snapshots (remapped when its size changes)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.map: mmap.mmap | None = None
        self.pinned = False

    def follow_path(self) -> None:
        """Reopen when the file at the slot's path is no longer the one held open (the
        launcher put a received copy there, or removed it): writes go where readers look."""
        try:
            same = os.stat(self.path).st_ino == os.fstat(self.fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            self._unmap()
            os.close(self.fd)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def new_inode(self) -> None:
        """Put a new, empty file in the slot's place: a mapped restore's tensors keep the
        old one (unlinked, freed with the last of them), never seeing a later snapshot."""
        self._unmap()
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)

    def hold(self) -> bool:
        """Hold the slot's file for this write (exclusive, never waiting); False while a
        sender holds it still (:func:`slurm_ft.snapshot.ship.pinned`). Closing the file or
        :meth:`let_go` drops the hold."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def let_go(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def generation(self) -> int:
        sealed = layout.decode(os.pread(self.fd, layout.HEADER_SIZE, 0))
        return sealed.generation if sealed is not None else 0

    def unseal(self) -> None:
        if self.size() >= layout.HEADER_SIZE:
            os.pwrite(self.fd, layout.ZERO_SEAL, layout.SEAL_OFFSET)

    def resize(self, size: int) -> None:
        if self.map is not None and len(self.map) == size:
            return
        self._unmap()
        os.ftruncate(self.fd, size)
        os.posix_fallocate(self.fd, 0, size)
        self.map = mmap.mmap(self.fd, size)

    def release_memory(self) -> None:
        """Give the slot's memory back (after a refused reservation)."""
        self._unmap()
        os.ftruncate(self.fd, 0)

    def _unmap(self) -> None:
        if self.map is not None:
            if self.pinned:
                _unpin(self.map)
                self.pinned = False
            with contextlib.suppress(BufferError):  # a caller's view still alive: the GC unmaps
                self.map.close()
            self.map = None


class SlotWriter:
    """A key's two slots as one writer process sees them."""

    def __init__(self, area: Path, key: str, me: Identity, limit: int | None) -> None:
        self.area = area
        self.key = key
        self.me = me
        self.limit = limit
        self._slots = tuple(_Mapped(p) for p in layout.slot_paths(area, key))
        self._owner_path = layout.owner_path(area, key)
        self._space_lock_path = layout.space_lock_path(area)
        self._side_stream: torch.cuda.Stream | None = None
        self._lent: set[Path] = set()  # slots whose pages a mapped restore handed out

    def lend(self, path: Path) -> None:
        """``path``'s pages were handed to the trainer without a copy: its next write goes
        to a new file rather than under those tensors."""
        self._lent.add(path)

    def write(self, step: int, state: Mapping[str, object], *, on_chunk: ChunkHook | None = None) -> Result:
        try:
            laid = plan(state)
        except Unsupported as exc:
            return Result(Outcome.UNSUPPORTED, f"the state holds {exc}")
        lock = claim.KeyLock.acquire(self._owner_path)
        if lock is None:
            return Result(Outcome.BUSY, size=laid.file_size)
        with lock:
            verdict = lock.claim(claim.Claimant(self.me.cycle, self.me.pid, self.me.start_ticks))
            if verdict is not claim.Verdict.MINE:
                owner = lock.owner()
                who = f"pid {owner.pid} of cycle {owner.cycle}" if owner else "another process"
                return Result(Outcome.NOT_OWNER, f"{self.key} is written by {who}", laid.file_size)
            return self._write_locked(step, laid, on_chunk)

    def _write_locked(self, step: int, laid: Plan, on_chunk: ChunkHook | None) -> Result:
        for slot in self._slots:
            slot.follow_path()
        gens = [s.generation() for s in self._slots]
        target = self._slots[0 if gens[0] <= gens[1] else 1]
        if target.path in self._lent or not target.hold():
            # lent to a mapped restore, or held still by a sender (a replica, a fetch): the
            # old file stays whole for them, unlinked, and this write goes to a new one
            self._lent.discard(target.path)
            target.new_inode()
            if not target.hold():  # a sender holds only sealed files: not reached, but never waited on
                return Result(Outcome.BUSY, size=laid.file_size)
        try:
            return self._write_held(step, laid, on_chunk, target, max(gens) + 1)
        finally:
            target.let_go()

    def _write_held(
        self, step: int, laid: Plan, on_chunk: ChunkHook | None, target: _Mapped, generation: int
    ) -> Result:
        target.unseal()
        refused = self._reserve(target, laid.file_size)
        if refused is not None:
            return refused
        view = target.map
        assert view is not None
        self._copy(view, target, laid, on_chunk)
        view[layout.HEADER_SIZE + laid.tensor_bytes : laid.file_size] = laid.skeleton
        fields = layout.encode_fields(
            layout.Header(
                step=step,
                world_size=self.me.world_size,
                rank=self.me.rank,
                replicated=self.key == layout.REPLICATED,
                node_rank=self.me.node_rank,
                local_rank=self.me.local_rank,
                local_world_size=self.me.local_world_size,
                cycle=self.me.cycle,
                writer_pid=self.me.pid,
                origin=layout.Origin.WRITTEN,
                tensor_bytes=laid.tensor_bytes,
                skeleton_size=len(laid.skeleton),
            )
        )
        view[: len(fields)] = fields
        if on_chunk is not None:
            on_chunk(_chunk_count(laid))
        view[layout.SEAL_OFFSET : layout.HEADER_SIZE] = layout.encode_seal(fields, generation)
        return Result(Outcome.KEPT, size=laid.file_size)

    def _reserve(self, target: _Mapped, size: int) -> Result | None:
        lock = claim.KeyLock.acquire(self._space_lock_path, wait_s=30.0)
        if lock is None:
            return Result(Outcome.BUSY, size=size)
        with lock:
            others = areas.held(self.area) - target.size()
            if self.limit is not None and others + size > self.limit:
                target.release_memory()
                return Result(
                    Outcome.OVER_LIMIT,
                    f"{areas.human(size)} for {self.key} with {areas.human(others)} held on the node would "
                    f"exceed the node's snapshot memory of {areas.human(self.limit)}",
                    size,
                )
            try:
                target.resize(size)
            except OSError as exc:
                target.release_memory()
                if exc.errno in (errno.ENOSPC, errno.ENOMEM, errno.EDQUOT):
                    return Result(
                        Outcome.NO_SPACE,
                        f"{self.area.parent} is full: no room for {areas.human(size)} for {self.key}",
                        size,
                    )
                return Result(Outcome.NO_SPACE, f"{target.path}: {exc.strerror}", size)
        return None

    def _copy(self, view: mmap.mmap, target: _Mapped, laid: Plan, on_chunk: ChunkHook | None) -> None:
        if not laid.tensor_bytes:
            return
        on_gpu = any(t.is_cuda for t, _ in laid.tensors)
        if on_gpu and not target.pinned:
            target.pinned = _pin(view)
        chunk = 0
        with self._stream_context(on_gpu) as stream:
            region = torch.frombuffer(
                view, dtype=torch.uint8, count=laid.tensor_bytes, offset=layout.HEADER_SIZE
            )
            for tensor, offset in laid.tensors:
                for dst, src in _pieces(region, tensor, offset):
                    if on_chunk is not None:
                        on_chunk(chunk)
                    chunk += 1
                    dst.copy_(src, non_blocking=stream is not None and src.is_cuda)
            if stream is not None:
                stream.synchronize()  # the seal comes after the bytes are in the slot

    @contextlib.contextmanager
    def _stream_context(self, on_gpu: bool) -> Iterator[torch.cuda.Stream | None]:
        if not on_gpu:
            yield None
            return
        if self._side_stream is None:
            self._side_stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        side = self._side_stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            yield side


def _pieces(
    region: torch.Tensor, tensor: torch.Tensor, offset: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(destination, source) pairs that together copy ``tensor`` to ``region[offset:]``."""
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return
    flat_dst = region[offset : offset + nbytes].view(tensor.dtype)
    if not tensor.is_contiguous() or nbytes <= CHUNK_BYTES:
        yield flat_dst.view(tensor.shape), tensor  # copy_ walks a source's strides: no temporary
        return
    src = tensor.reshape(-1)
    step = max(1, CHUNK_BYTES // tensor.element_size())
    for begin in range(0, src.numel(), step):
        yield flat_dst[begin : begin + step], src[begin : begin + step]


def _chunk_count(laid: Plan) -> int:
    count = 0
    for tensor, _ in laid.tensors:
        n = tensor.numel()
        if n == 0:
            continue
        count += 1 if not tensor.is_contiguous() else -(-n // max(1, CHUNK_BYTES // tensor.element_size()))
    return count


def _pin(view: mmap.mmap) -> bool:
    """Register the mapping as pinned host memory, so device-to-host copies are DMA that
    does not wait for the CPU; False (plain pageable copies) when the runtime refuses."""
    base = torch.frombuffer(view, dtype=torch.uint8)
    runtime = torch.cuda.cudart()  # type: ignore[no-untyped-call]  # torch leaves it untyped
    return int(runtime.cudaHostRegister(base.data_ptr(), len(view), 0)) == 0


def _unpin(view: mmap.mmap) -> None:
    base = torch.frombuffer(view, dtype=torch.uint8)
    runtime = torch.cuda.cudart()  # type: ignore[no-untyped-call]  # torch leaves it untyped
    runtime.cudaHostUnregister(base.data_ptr())
