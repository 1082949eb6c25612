"""Build sysfs-shaped fixture trees (InfiniBand ports, net interfaces) under a tmp dir.

The health NIC check reads these through its ``sysfs_root`` setting, exactly as it reads
/sys on a real node; only the directory differs.
"""

from __future__ import annotations

from pathlib import Path

IB_STATES = {"ACTIVE": "4: ACTIVE", "DOWN": "1: DOWN", "INIT": "2: INIT", "ARMED": "3: ARMED"}
PHYS_STATES = {"LinkUp": "5: LinkUp", "Polling": "2: Polling", "Disabled": "3: Disabled"}


def ib_port(
    root: Path,
    device: str,
    port: int,
    *,
    state: str = "ACTIVE",
    phys: str = "LinkUp",
    link_downed: int | None = 0,
    link_layer: str = "InfiniBand",
) -> Path:
    pdir = root / "class" / "infiniband" / device / "ports" / str(port)
    (pdir / "counters").mkdir(parents=True, exist_ok=True)
    (pdir / "state").write_text(IB_STATES.get(state, state) + "\n")
    (pdir / "phys_state").write_text(PHYS_STATES.get(phys, phys) + "\n")
    (pdir / "link_layer").write_text(link_layer + "\n")
    downed = pdir / "counters" / "link_downed"
    if link_downed is None:
        downed.unlink(missing_ok=True)
    else:
        downed.write_text(f"{link_downed}\n")
    return pdir


def net_if(
    root: Path,
    name: str,
    *,
    operstate: str = "up",
    carrier: int | None = 1,
    carrier_down_count: int | None = 0,
) -> Path:
    idir = root / "class" / "net" / name
    idir.mkdir(parents=True, exist_ok=True)
    (idir / "operstate").write_text(operstate + "\n")
    carrier_file = idir / "carrier"
    if carrier is None:
        carrier_file.unlink(missing_ok=True)
    else:
        carrier_file.write_text(f"{carrier}\n")
    cdc = idir / "carrier_down_count"
    if carrier_down_count is None:
        cdc.unlink(missing_ok=True)
    else:
        cdc.write_text(f"{carrier_down_count}\n")
    return idir


def numa_node(root: Path, node: int, cpus: str) -> None:
    ndir = root / "devices" / "system" / "node" / f"node{node}"
    ndir.mkdir(parents=True, exist_ok=True)
    (ndir / "cpulist").write_text(cpus + "\n")


def cpu_core(root: Path, cpu: int, *, package: int, siblings: str) -> None:
    tdir = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
    tdir.mkdir(parents=True, exist_ok=True)
    (tdir / "physical_package_id").write_text(f"{package}\n")
    (tdir / "thread_siblings_list").write_text(siblings + "\n")


def pci_function(root: Path, path: tuple[str, ...], *, numa: int, local_cpulist: str = "") -> Path:
    """``devices/pci0000:15/<bridge>/.../<bdf>`` plus the ``bus/pci/devices/<bdf>`` link, as sysfs has."""
    ddir = root / "devices"
    for part in path:
        ddir = ddir / part
    ddir.mkdir(parents=True, exist_ok=True)
    (ddir / "numa_node").write_text(f"{numa}\n")
    (ddir / "local_cpulist").write_text(local_cpulist + "\n")
    link = root / "bus" / "pci" / "devices" / path[-1]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(Path("..", "..", "..", "devices", *path))
    return ddir


def rdma_nic(root: Path, name: str, path: tuple[str, ...], *, numa: int, up: bool = True) -> None:
    """An RDMA device with one port whose ``device`` link points at its PCI function."""
    pci_function(root, path, numa=numa)
    ib_port(root, name, 1, state="ACTIVE" if up else "DOWN", phys="LinkUp" if up else "Polling")
    (root / "class" / "infiniband" / name / "device").symlink_to(Path("..", "..", "..", "devices", *path))
