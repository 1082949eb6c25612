"""Read a node's NUMA, CPU-core, GPU-PCI and RDMA-NIC facts below a sysfs root.

The root is a setting (``health.sysfs_root``) so tests read fixture trees shaped like real
machines with the same code that reads ``/sys``. What cannot be read is left out rather
than guessed; the planner turns each gap into a warning.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from slurm_ft.health import nic
from slurm_ft.topology.facts import CpuListError, NodeFacts, NumaNode, PciDevice, RdmaNic, parse_cpulist


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _read_cpus(path: Path) -> frozenset[int] | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return parse_cpulist(text)
    except CpuListError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def numa_nodes(root: Path) -> tuple[NumaNode, ...]:
    base = root / "devices" / "system" / "node"
    try:
        names = [p.name for p in base.iterdir() if p.name.startswith("node") and p.name[4:].isdigit()]
    except OSError:
        return ()
    out = []
    for name in sorted(names, key=lambda n: int(n[4:])):
        cpus = _read_cpus(base / name / "cpulist") or frozenset()
        socket = None
        if cpus:
            socket = _read_int(
                root / "devices" / "system" / "cpu" / f"cpu{min(cpus)}" / "topology" / "physical_package_id"
            )
        out.append(NumaNode(int(name[4:]), cpus, socket))
    return tuple(out)


def cores(root: Path, cpus: frozenset[int]) -> dict[int, int]:
    """cpu -> lowest cpu of its physical core (hyperthread siblings share one core)."""
    out = {}
    for cpu in cpus:
        siblings = _read_cpus(
            root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology" / "thread_siblings_list"
        )
        out[cpu] = min(siblings) if siblings else cpu
    return out


def _pci_path(device_dir: Path) -> tuple[str, ...]:
    parts = Path(os.path.realpath(device_dir)).parts
    start = next((i for i, p in enumerate(parts) if p.startswith("pci")), None)
    return tuple(parts[start:]) if start is not None else ()


def pci_device(device_dir: Path, nodes: Sequence[NumaNode]) -> PciDevice | None:
    """One PCI function; a NUMA node of -1 is inferred from ``local_cpulist`` when it can be."""
    if not device_dir.exists():
        return None
    path = _pci_path(device_dir)
    bdf = path[-1] if path else device_dir.name
    numa = _read_int(device_dir / "numa_node")
    if numa is None or numa < 0:
        numa = None
        local = _read_cpus(device_dir / "local_cpulist")
        if len(nodes) == 1:
            numa = nodes[0].id
        elif local:
            numa = next((n.id for n in nodes if n.cpus and local <= n.cpus), None)
    return PciDevice(bdf, numa, path)


def normalize_bus_id(bus_id: str) -> str:
    """NVML's ``00000000:18:00.0`` -> sysfs's ``0000:18:00.0``."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus_id.strip().lower()


def rdma_nics(root: Path, nodes: Sequence[NumaNode]) -> tuple[RdmaNic, ...]:
    out = []
    for name in nic.rdma_devices(str(root)):
        up = tuple(int(p.key.rsplit("/", 1)[1]) for p in nic.read_rdma_ports(str(root), name) if p.up)
        out.append(RdmaNic(name, up, pci_device(root / "class" / "infiniband" / name / "device", nodes)))
    return tuple(out)


def read_facts(sysfs_root: str, gpu_bus_ids: Sequence[str], *, with_nics: bool) -> NodeFacts:
    """Everything the planner needs; ``gpu_bus_ids`` in local-rank order (NVML spelling is fine)."""
    root = Path(sysfs_root)
    nodes = numa_nodes(root)
    all_cpus = frozenset().union(*(n.cpus for n in nodes)) if nodes else frozenset()
    gpus = []
    for bus_id in gpu_bus_ids:
        bdf = normalize_bus_id(bus_id)
        gpus.append(pci_device(root / "bus" / "pci" / "devices" / bdf, nodes) or PciDevice(bdf, None, ()))

    return NodeFacts(nodes, cores(root, all_cpus), tuple(gpus), rdma_nics(root, nodes) if with_nics else ())
