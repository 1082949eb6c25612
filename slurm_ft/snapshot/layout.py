"""The bytes of a snapshot slot file, and the names of a rank's files in an area.

Each key (a rank's shard, or the node's one copy of replicated state) has two slot files,
``<key>.0.snap`` and ``<key>.1.snap``. A file is a 4 KiB header and the payload: the
tensors' bytes, each 64-byte aligned, then the pickled skeleton (the state with every
tensor replaced by a reference to its bytes). The writer always fills the slot that does
not hold the newest complete snapshot, so the newest one is never touched while it is
the newest. A slot file a sender holds still (:mod:`slurm_ft.snapshot.ship`) is not
rewritten either: the writer unlinks it (the sender keeps reading it) and fills a new file
in its place, so a key always has its two newest snapshots where readers look.

Whole or invisible: the header's last 16 bytes are the seal, a generation and a CRC-32
of the header's fields and that generation. The writer zeroes the seal before it touches
the slot, writes the payload and the fields, and writes the seal last. A writer killed at
any point (even half-way through the seal's own bytes) leaves a slot whose seal does not
check, which no reader takes; the other slot still holds the previous snapshot. Readers
take the valid slot with the highest generation.

One slot file is one whole snapshot: it can be copied as bytes to another node and
sealed there (:mod:`slurm_ft.snapshot.ship`). Standard library only: the launcher reads
headers without torch.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"SFTSNAP1"
VERSION = 1
HEADER_SIZE = 4096  # the payload starts page-aligned
ALIGN = 64  # every tensor's bytes start on a cache line
SUFFIX = ".snap"
REPLICATED = "replicated"

# magic, version, flags, step, world size, rank, node rank, local rank, local world size,
# cycle, writer pid, origin, tensor bytes, skeleton offset, skeleton size
_FIELDS = struct.Struct("<8sIIqIIIIIQIIQQQ")
_SEAL = struct.Struct("<QI4x")
SEAL_OFFSET = HEADER_SIZE - _SEAL.size
_FLAG_REPLICATED = 1


class Origin(enum.IntEnum):
    """How the snapshot came into this node's memory (the report says where state came from)."""

    WRITTEN = 0  # written here by the trainer
    PEER = 1  # copied from another node's memory
    REPLICA = 2  # a replica another node pushed here

    @property
    def word(self) -> str:
        return {Origin.WRITTEN: "memory", Origin.PEER: "peer memory", Origin.REPLICA: "replica"}[self]


@dataclass(frozen=True)
class Header:
    """What a slot holds, readable without its payload."""

    step: int
    world_size: int
    rank: int  # the writer's global rank (for replicated state: the rank that wrote the node's copy)
    replicated: bool
    node_rank: int
    local_rank: int
    local_world_size: int
    cycle: int
    writer_pid: int
    origin: Origin
    tensor_bytes: int  # the tensors' region, alignment included; the skeleton follows it
    skeleton_size: int

    @property
    def payload_size(self) -> int:
        return self.tensor_bytes + self.skeleton_size

    @property
    def file_size(self) -> int:
        return HEADER_SIZE + self.payload_size


@dataclass(frozen=True)
class Sealed:
    header: Header
    generation: int


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def encode_fields(h: Header) -> bytes:
    """The header without its seal (written before the seal, which covers it)."""
    flags = _FLAG_REPLICATED if h.replicated else 0
    return _FIELDS.pack(
        MAGIC,
        VERSION,
        flags,
        h.step,
        h.world_size,
        h.rank,
        h.node_rank,
        h.local_rank,
        h.local_world_size,
        h.cycle,
        h.writer_pid,
        int(h.origin),
        h.tensor_bytes,
        HEADER_SIZE + h.tensor_bytes,
        h.skeleton_size,
    )


def encode_seal(fields: bytes, generation: int) -> bytes:
    return _SEAL.pack(generation, zlib.crc32(fields + generation.to_bytes(8, "little")))


ZERO_SEAL = bytes(_SEAL.size)


def decode(raw: bytes | bytearray | memoryview) -> Sealed | None:
    """The header of a complete snapshot, or None (torn, never sealed, not ours, nonsense)."""
    if len(raw) < HEADER_SIZE:
        return None
    fields = bytes(raw[: _FIELDS.size])
    generation, crc = _SEAL.unpack_from(raw, SEAL_OFFSET)
    if generation == 0 or zlib.crc32(fields + generation.to_bytes(8, "little")) != crc:
        return None
    (magic, version, flags, step, world, rank, node, local, local_world, cycle, pid, origin, tbytes, skel_off,
     skel_size) = _FIELDS.unpack(fields)  # fmt: skip
    if (
        magic != MAGIC
        or version != VERSION
        or skel_off != HEADER_SIZE + tbytes
        or origin not in Origin._value2member_map_
    ):
        return None
    if world < 1 or rank >= world or tbytes % ALIGN:
        return None
    header = Header(
        step=step,
        world_size=world,
        rank=rank,
        replicated=bool(flags & _FLAG_REPLICATED),
        node_rank=node,
        local_rank=local,
        local_world_size=local_world,
        cycle=cycle,
        writer_pid=pid,
        origin=Origin(origin),
        tensor_bytes=tbytes,
        skeleton_size=skel_size,
    )
    return Sealed(header, generation)


def tensor_ref(offset: int, dtype: str, shape: tuple[int, ...]) -> object:
    """What a skeleton calls in each tensor's place (found by name when it is pickled);
    :mod:`slurm_ft.snapshot.reader` puts the tensor there instead, so this never runs."""
    import pickle  # not at import: a launcher whose workers never snapshot never pays for it

    raise pickle.UnpicklingError("a snapshot's skeleton is loaded by slurm_ft.snapshot.reader only")


# ------------------------------------------------------------------------ names in an area


def rank_key(rank: int) -> str:
    return f"rank-{rank:05d}"


def slot_paths(area: Path, key: str) -> tuple[Path, Path]:
    return area / f"{key}.0{SUFFIX}", area / f"{key}.1{SUFFIX}"


def owner_path(area: Path, key: str) -> Path:
    """The key's claim file: who may write its slots (:mod:`slurm_ft.snapshot.claim`)."""
    return area / f"{key}.owner"


def space_lock_path(area: Path) -> Path:
    """Held while a writer checks the node's cap and reserves its slot's memory."""
    return area / "space.lock"


def key_of(path: Path) -> str | None:
    """The key of a slot file's name, or None when the name is not a slot file's."""
    name = path.name
    if not name.endswith(SUFFIX):
        return None
    key, dot, index = name[: -len(SUFFIX)].rpartition(".")
    if not dot or index not in ("0", "1"):
        return None
    if key == REPLICATED or (key.startswith("rank-") and key[5:].isdigit()):
        return key
    return None
