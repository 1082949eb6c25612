"""Pure placement policy: node facts + what the task may use + the request -> one placement per rank.

Binding modes mean what torchrun's ``--numa-binding`` means, with the GPU of local rank N
being the N-th GPU the launcher sees:

- ``node``: every CPU of the GPU's NUMA node;
- ``socket``: every CPU of every NUMA node on the GPU's socket;
- ``exclusive``: the GPU's NUMA node's physical cores divided evenly (hyperthread
  siblings stay together) among the ranks whose GPU is on that node, lower ranks taking
  the remainder.

Unlike torchrun, a request that cannot be met never fails the launch: the rank inherits
the launcher's CPUs and a warning says why. Only CPUs the task was given (the launcher's
affinity, which the kernel already intersects with the cgroup cpuset) are ever chosen.
Without GPUs the ranks are spread over the NUMA nodes that have CPUs the task may use, in
contiguous blocks, so neighbouring ranks share a node.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from slurm_ft.topology.facts import NodeFacts, NumaNode, PciDevice, RdmaNic, format_cpulist

SAME_SWITCH = "same PCI switch"
SAME_NUMA = "same NUMA node"
NIC_ENV = ("NCCL_IB_HCA", "UCX_NET_DEVICES")


class Binding(str, Enum):
    NONE = "none"
    NODE = "node"
    SOCKET = "socket"
    EXCLUSIVE = "exclusive"


@dataclass(frozen=True)
class RankPlacement:
    local_rank: int
    gpu: str | None  # PCI bus id of the rank's GPU
    numa: int | None  # the NUMA node the rank belongs to (its GPU's, or its share of the spread)
    cpus: frozenset[int] | None  # None: inherit the launcher's CPUs
    mem_node: int | None  # preferred memory node; None: the kernel's default (local) policy
    nics: tuple[str, ...] = ()  # RDMA ports, "mlx5_0:1"
    nic_reason: str = ""

    def nic_env(self, base: Mapping[str, str]) -> dict[str, str]:
        """NCCL_IB_HCA / UCX_NET_DEVICES for this rank, except those the user set in ``base``."""
        if not self.nics:
            return {}
        ports = ",".join(self.nics)
        values = {"NCCL_IB_HCA": f"={ports}", "UCX_NET_DEVICES": ports}
        return {k: v for k, v in values.items() if k not in base}

    def describe(self) -> str:
        where = "" if self.numa is None else f" (NUMA node {self.numa})"
        text = f"cpus {format_cpulist(self.cpus)}{where}" if self.cpus is not None else "cpus not bound"
        if self.mem_node is not None:
            text += f", memory preferred on node {self.mem_node}"
        if self.nics:
            text += f", NIC {','.join(self.nics)} ({self.nic_reason})"
        if self.gpu:
            text += f", GPU {self.gpu}"
        return text


@dataclass(frozen=True)
class Plan:
    mode: Binding
    nic_affinity: bool
    ranks: tuple[RankPlacement, ...]
    warnings: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.mode is not Binding.NONE or self.nic_affinity


class _Warnings:
    """One line per distinct problem, naming every local rank it affects."""

    def __init__(self) -> None:
        self._ranks: dict[str, list[int]] = defaultdict(list)

    def add(self, message: str, rank: int) -> None:
        if rank not in self._ranks[message]:
            self._ranks[message].append(rank)

    def lines(self) -> tuple[str, ...]:
        out = []
        for message, ranks in self._ranks.items():
            who = f"local rank {ranks[0]}" if len(ranks) == 1 else f"local ranks {format_cpulist(ranks)}"
            out.append(f"{who}: {message}")
        return tuple(out)


def _rank_numa(
    facts: NodeFacts, allowed: frozenset[int], mode: Binding, nproc: int, warn: _Warnings
) -> list[int | None]:
    if facts.gpus:
        out: list[int | None] = []
        for rank in range(nproc):
            if rank >= len(facts.gpus):
                warn.add(f"no GPU of its own ({len(facts.gpus)} GPUs); not placed", rank)
                out.append(None)
                continue
            gpu = facts.gpus[rank]
            if gpu.numa is None:
                warn.add(f"NUMA node of GPU {gpu.bdf} unknown in sysfs; not placed", rank)
            out.append(gpu.numa)
        return out
    usable = [n for n in facts.nodes if n.cpus & allowed]
    if not usable:
        if mode is not Binding.NONE:
            for rank in range(nproc):
                warn.add("no NUMA node with CPUs this task may use in sysfs; not bound", rank)
        return [None] * nproc
    return [usable[rank * len(usable) // nproc].id for rank in range(nproc)]


def _node_cpus(node: NumaNode, allowed: frozenset[int]) -> frozenset[int]:
    return node.cpus & allowed


def _socket_cpus(facts: NodeFacts, node: NumaNode, allowed: frozenset[int]) -> frozenset[int]:
    if node.socket is None:
        return node.cpus & allowed
    same = [n for n in facts.nodes if n.socket == node.socket]
    return frozenset().union(*(n.cpus for n in same)) & allowed


def _exclusive_cpus(
    facts: NodeFacts,
    node: NumaNode,
    allowed: frozenset[int],
    rank: int,
    peers: Sequence[int],
    warn: _Warnings,
) -> frozenset[int]:
    usable = node.cpus & allowed
    by_core: dict[int, set[int]] = defaultdict(set)
    for cpu in usable:
        by_core[facts.cores.get(cpu, cpu)].add(cpu)
    cores = [frozenset(by_core[c]) for c in sorted(by_core, key=lambda c: min(by_core[c]))]
    if len(cores) < len(peers):
        warn.add(
            f"NUMA node {node.id} has {len(cores)} usable cores for {len(peers)} ranks; "
            "they share the node's CPUs instead of exclusive cores",
            rank,
        )
        return usable
    share, extra = divmod(len(cores), len(peers))
    index = peers.index(rank)
    start = index * share + min(index, extra)
    end = start + share + (1 if index < extra else 0)
    return frozenset().union(*cores[start:end])


def _cpus_for(
    facts: NodeFacts,
    mode: Binding,
    allowed: frozenset[int],
    numa_of: Sequence[int | None],
    rank: int,
    warn: _Warnings,
) -> frozenset[int] | None:
    numa = numa_of[rank]
    if mode is Binding.NONE or numa is None:
        return None
    node = facts.node(numa)
    if node is None:
        warn.add(f"NUMA node {numa} not found in sysfs; not bound", rank)
        return None
    if mode is Binding.NODE:
        cpus = _node_cpus(node, allowed)
    elif mode is Binding.SOCKET:
        cpus = _socket_cpus(facts, node, allowed)
    else:
        peers = [r for r, n in enumerate(numa_of) if n == numa]
        cpus = _exclusive_cpus(facts, node, allowed, rank, peers, warn)
    if not cpus:
        warn.add(
            f"NUMA node {numa} has none of the CPUs this task may use ({format_cpulist(allowed)}); not bound",
            rank,
        )
        return None
    return cpus


def _nics_for(
    facts: NodeFacts, gpu: PciDevice | None, numa: int | None, rank: int, warn: _Warnings
) -> tuple[tuple[str, ...], str]:
    candidates = [n for n in facts.nics if n.ports and n.pci is not None]
    if not candidates:
        warn.add("no RDMA NIC with an active port; NCCL_IB_HCA not set", rank)
        return (), ""

    def ports(nics: Sequence[RdmaNic]) -> tuple[str, ...]:
        return tuple(f"{n.name}:{p}" for n in nics for p in n.ports)

    if gpu is not None and gpu.path:
        depth = {n.name: gpu.shared_depth(n.pci) for n in candidates if n.pci is not None}
        best = max(depth.values())
        if best >= 2:  # a PCI bridge below the host bridge in common: same switch (or root port)
            return ports([n for n in candidates if depth[n.name] == best]), SAME_SWITCH
    if numa is not None:
        near = [n for n in candidates if n.pci is not None and n.pci.numa == numa]
        if near:
            return ports(near), SAME_NUMA
    what = f"GPU {gpu.bdf}" if gpu is not None else f"NUMA node {numa}"
    warn.add(f"no RDMA NIC on the PCI switch or NUMA node of {what}; NCCL_IB_HCA not set", rank)
    return (), ""


def plan(
    facts: NodeFacts,
    *,
    allowed_cpus: frozenset[int],
    mode: Binding,
    nproc: int,
    nic_affinity: bool = False,
    allowed_mems: frozenset[int] | None = None,
) -> Plan:
    """One placement per local rank plus warnings; ``allowed_mems`` None: any node may hold memory."""
    warn = _Warnings()
    numa_of = _rank_numa(facts, allowed_cpus, mode, nproc, warn)
    ranks = []
    for rank in range(nproc):
        gpu = facts.gpus[rank] if rank < len(facts.gpus) else None
        cpus = _cpus_for(facts, mode, allowed_cpus, numa_of, rank, warn)
        numa = numa_of[rank]
        mem = numa if cpus is not None else None
        if mem is not None and allowed_mems is not None and mem not in allowed_mems:
            warn.add(
                f"memory of NUMA node {mem} is not allowed to this task ({format_cpulist(allowed_mems)}); "
                "memory policy left to the kernel",
                rank,
            )
            mem = None
        nics, reason = _nics_for(facts, gpu, numa, rank, warn) if nic_affinity else ((), "")
        ranks.append(RankPlacement(rank, gpu.bdf if gpu else None, numa, cpus, mem, nics, reason))
    return Plan(mode, nic_affinity, tuple(ranks), warn.lines())
