"""The launcher's edge: find the GPUs, read sysfs and the task's limits, and plan once at start.

Local rank N uses the N-th GPU CUDA shows it: the N-th entry of ``CUDA_VISIBLE_DEVICES``
(NVML indices or ``GPU-`` UUIDs, as Slurm and users write it) or, unset, NVML index N.
NVML enumerates in PCI bus order, which is CUDA's order for identical GPUs (the usual
node); a node mixing GPU models should set ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from slurm_ft.health.gpu import NvmlAdapter, NvmlError, NvmlNotSupported, NvmlUnavailable
from slurm_ft.topology import apply, sysfs
from slurm_ft.topology.facts import CpuListError, parse_cpulist
from slurm_ft.topology.plan import Binding, Plan, RankPlacement, plan


class GpuLister(Protocol):
    def device_count(self) -> int: ...
    def pci_bus_id(self, index: int) -> str: ...
    def uuid(self, index: int) -> str: ...
    def close(self) -> None: ...


class GpuListError(Exception):
    """The GPUs exist but which one is whose cannot be told: binding them would be a guess."""


def gpu_bus_ids(nvml: GpuLister, visible: str | None) -> list[str]:
    """PCI bus ids of the GPUs in CUDA's order as ``CUDA_VISIBLE_DEVICES`` restricts it."""
    try:
        count = nvml.device_count()
        if visible is None:
            return [nvml.pci_bus_id(i) for i in range(count)]
        out = []
        uuids: dict[str, int] | None = None
        for item in (v.strip() for v in visible.split(",")):
            if not item:
                continue
            if item.isdigit():
                index = int(item)
            elif item.startswith("GPU-"):
                if uuids is None:
                    uuids = {nvml.uuid(i): i for i in range(count)}
                match = [i for u, i in uuids.items() if u.startswith(item)]
                if len(match) != 1:
                    raise GpuListError(f"CUDA_VISIBLE_DEVICES entry {item!r} matches {len(match)} GPUs")
                index = match[0]
            elif item == "-1":
                break  # CUDA stops at the first invalid entry
            else:
                raise GpuListError(f"CUDA_VISIBLE_DEVICES entry {item!r} (MIG or unknown) cannot be placed")
            if index >= count:
                raise GpuListError(f"CUDA_VISIBLE_DEVICES entry {item!r}: NVML sees {count} GPUs")
            out.append(nvml.pci_bus_id(index))
        return out
    except (NvmlError, NvmlNotSupported) as exc:
        raise GpuListError(f"NVML cannot tell the GPUs' PCI bus ids: {exc}") from None


def allowed_mems(proc_root: str) -> frozenset[int] | None:
    """``Mems_allowed_list`` of this process: the memory nodes of its cgroup cpuset."""
    try:
        for line in Path(proc_root, "self", "status").read_text().splitlines():
            if line.startswith("Mems_allowed_list:"):
                return parse_cpulist(line.split(":", 1)[1])
    except (OSError, CpuListError):
        return None
    return None


def _unplaced(mode: Binding, nic_affinity: bool, nproc: int, why: str) -> Plan:
    ranks = tuple(RankPlacement(r, None, None, None, None) for r in range(nproc))
    who = "local rank 0" if nproc == 1 else f"local ranks 0-{nproc - 1}"
    return Plan(mode, nic_affinity, ranks, (f"{who}: {why}; not placed",))


def build_plan(
    *,
    mode: Binding,
    nic_affinity: bool,
    nproc: int,
    sysfs_root: str,
    proc_root: str,
    visible_devices: str | None,
    allowed_cpus: frozenset[int] | None = None,
    opener: Callable[[], GpuLister] = NvmlAdapter.open,
    mempolicy_problem: Callable[[int], str | None] = apply.mempolicy_problem,
) -> Plan:
    """The plan for this node's workers; every problem is a warning, never an exception."""
    try:
        nvml = opener()
    except NvmlUnavailable:
        bus_ids: list[str] = []
    else:
        try:
            bus_ids = gpu_bus_ids(nvml, visible_devices)
        except GpuListError as exc:
            return _unplaced(mode, nic_affinity, nproc, str(exc))
        finally:
            nvml.close()
    facts = sysfs.read_facts(sysfs_root, bus_ids, with_nics=nic_affinity)
    cpus = allowed_cpus if allowed_cpus is not None else frozenset(os.sched_getaffinity(0))
    result = plan(
        facts,
        allowed_cpus=cpus,
        mode=mode,
        nproc=nproc,
        nic_affinity=nic_affinity,
        allowed_mems=allowed_mems(proc_root),
    )
    mem_nodes = sorted({r.mem_node for r in result.ranks if r.mem_node is not None})
    problem = next((p for p in map(mempolicy_problem, mem_nodes) if p), None)
    if problem is None:
        return result
    ranks = tuple(dataclasses.replace(r, mem_node=None) for r in result.ranks)
    return dataclasses.replace(
        result, ranks=ranks, warnings=(*result.warnings, f"memory policy not set ({problem}): CPUs only")
    )
