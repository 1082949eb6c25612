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
