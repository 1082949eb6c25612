"""What sysfs says about a node's NUMA nodes, CPU cores, GPUs and RDMA NICs: plain data."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


class CpuListError(ValueError):
    """A cpulist/nodelist string that is not of the kernel's ``0-3,8,10-11`` form."""


def parse_cpulist(text: str) -> frozenset[int]:
    """The kernel's list format (``0-3,8``); an empty string is the empty set."""
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            first = int(lo)
            last = int(hi) if sep else first
        except ValueError:
            raise CpuListError(f"bad cpu list {text.strip()!r}") from None
        if first < 0 or last < first:
            raise CpuListError(f"bad cpu list {text.strip()!r}")
        out.update(range(first, last + 1))
    return frozenset(out)


def format_cpulist(cpus: Iterable[int]) -> str:
    """The inverse of :func:`parse_cpulist`: ranges joined by commas, shortest form."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True)
class NumaNode:
    id: int
    cpus: frozenset[int]
    socket: int | None  # physical_package_id of its CPUs; None for a memory-only node


@dataclass(frozen=True)
class PciDevice:
    bdf: str  # "0000:18:00.0", sysfs spelling
    numa: int | None  # None where sysfs says -1 and the node cannot be inferred, or no entry
    path: tuple[str, ...]  # ("pci0000:17", "0000:17:01.0", ..., bdf); () when sysfs has no entry

    def shared_depth(self, other: PciDevice) -> int:
        """How many PCI path elements the two share: 0 other root complex, 1 same host bridge only."""
        depth = 0
        for mine, theirs in zip(self.path, other.path, strict=False):
            if mine != theirs:
                break
            depth += 1
        return depth


@dataclass(frozen=True)
class RdmaNic:
    name: str  # "mlx5_0"
    ports: tuple[int, ...]  # ports that are up; a NIC with none is never chosen
    pci: PciDevice | None


@dataclass(frozen=True)
class NodeFacts:
    nodes: tuple[NumaNode, ...] = ()
    cores: Mapping[int, int] = field(default_factory=dict)  # cpu -> lowest cpu of its core
    gpus: tuple[PciDevice, ...] = ()  # one per local rank's GPU, in local-rank order
    nics: tuple[RdmaNic, ...] = ()

    def node(self, numa: int) -> NumaNode | None:
        return next((n for n in self.nodes if n.id == numa), None)
