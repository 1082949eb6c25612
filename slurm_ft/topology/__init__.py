"""Where workers run: NUMA/CPU binding and GPU-to-NIC affinity from the node's sysfs.

``facts`` holds the plain data read from sysfs, ``sysfs`` reads it, ``plan`` decides
(pure), ``apply`` puts a decision into effect when a worker is spawned, ``build`` joins
them for the launcher.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slurm_ft.config import Settings
    from slurm_ft.topology.plan import Plan


def node_plan(settings: Settings, nproc: int, visible_devices: str | None) -> Plan | None:
    """The plan ``launch.numa_binding`` / ``launch.nic_affinity`` ask for; None when neither
    does. The planning modules are imported only then: a launcher that places nothing
    does not pay for them at start-up."""
    if settings.launch.numa_binding == "none" and not settings.launch.nic_affinity:
        return None
    from slurm_ft.topology.build import build_plan
    from slurm_ft.topology.plan import Binding

    return build_plan(
        mode=Binding(settings.launch.numa_binding),
        nic_affinity=settings.launch.nic_affinity,
        nproc=nproc,
        sysfs_root=settings.health.sysfs_root,
        proc_root=settings.health.proc_root,
        visible_devices=visible_devices,
    )
