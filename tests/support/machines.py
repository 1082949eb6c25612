"""sysfs trees shaped like real GPU nodes, for the topology reader and planner.

Each builder writes the tree under ``root`` and returns the GPUs' PCI bus ids as NVML
spells them (upper case, 8-digit domain), in NVML index order.
"""

from __future__ import annotations

from pathlib import Path

from tests.support import fake_sysfs

# DGX-H100-like: 2 sockets x 56 cores x 2 threads, one NUMA node per socket; every GPU
# shares a PCIe switch with one ConnectX-7 compute NIC; two storage NICs on their own
# root complex on socket 1 (one of them down).
H100_GPU_BUSES = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)
H100_NIC_BUSES = (0x18, 0x40, 0x4F, 0x5E, 0x9A, 0xC0, 0xCE, 0xDC)
H100_COMPUTE_NICS = ("mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11")
H100_NODE_CPUS = ("0-55,112-167", "56-111,168-223")


def _cpus(root: Path, sockets: int, cores_per_socket: int) -> None:
    threads = sockets * cores_per_socket
    for core in range(threads):
        package = core // cores_per_socket
        for cpu in (core, core + threads):
            fake_sysfs.cpu_core(root, cpu, package=package, siblings=f"{core},{core + threads}")


def _switch(rc_bus: int) -> tuple[str, ...]:
    """Host bridge, root port, switch upstream port."""
    return (f"pci0000:{rc_bus:02x}", f"0000:{rc_bus:02x}:01.0", f"0000:{rc_bus + 1:02x}:00.0")


def dgx_h100(root: Path) -> list[str]:
    for node, cpus in enumerate(H100_NODE_CPUS):
        fake_sysfs.numa_node(root, node, cpus)
    _cpus(root, 2, 56)
    bus_ids = []
    for i, (gpu_bus, nic_bus, nic) in enumerate(
        zip(H100_GPU_BUSES, H100_NIC_BUSES, H100_COMPUTE_NICS, strict=True)
    ):
        node = i // 4
        up = _switch(nic_bus - 3)
        gpu = (*up, f"0000:{nic_bus - 1:02x}:00.0", f"0000:{gpu_bus:02x}:00.0")
        fake_sysfs.pci_function(root, gpu, numa=node, local_cpulist=H100_NODE_CPUS[node])
        fake_sysfs.rdma_nic(
            root, nic, (*up, f"0000:{nic_bus - 1:02x}:01.0", f"0000:{nic_bus:02x}:00.0"), numa=node
        )
        bus_ids.append(f"00000000:{gpu_bus:02X}:00.0")
    fake_sysfs.rdma_nic(root, "mlx5_7", ("pci0000:a0", "0000:a0:01.0", "0000:a1:00.0"), numa=1)
    fake_sysfs.rdma_nic(root, "mlx5_8", ("pci0000:a0", "0000:a0:01.0", "0000:a1:00.1"), numa=1, up=False)
    return bus_ids


# A 4-GPU node: 2 sockets x 16 cores x 2 threads. GPUs 0-1 share a PCIe switch with
# mlx5_0 on socket 0; GPUs 2-3 hang off a switch on socket 1 whose NIC (mlx5_1) sits on
# another root complex of the same socket; GPU 3's numa_node reads -1 (a BIOS that does
# not fill in the proximity domain), so its node comes from local_cpulist.
FOUR_NODE_CPUS = ("0-15,32-47", "16-31,48-63")


def four_gpu_two_nics(root: Path) -> list[str]:
    for node, cpus in enumerate(FOUR_NODE_CPUS):
        fake_sysfs.numa_node(root, node, cpus)
    _cpus(root, 2, 16)
    bus_ids = []
    for i, (rc, gpu_bus) in enumerate(((0x40, 0x43), (0x40, 0x44), (0xC0, 0xC3), (0xC0, 0xC4))):
        node = i // 2
        up = _switch(rc)
        path = (*up, f"0000:{rc + 2:02x}:{i % 2:02x}.0", f"0000:{gpu_bus:02x}:00.0")
        fake_sysfs.pci_function(root, path, numa=-1 if i == 3 else node, local_cpulist=FOUR_NODE_CPUS[node])
        bus_ids.append(f"00000000:{gpu_bus:02X}:00.0")
    fake_sysfs.rdma_nic(root, "mlx5_0", (*_switch(0x40), "0000:42:02.0", "0000:45:00.0"), numa=0)
    fake_sysfs.rdma_nic(root, "mlx5_1", ("pci0000:e0", "0000:e0:01.0", "0000:e1:00.0"), numa=1)
    return bus_ids
