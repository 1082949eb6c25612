"""--dry-run shows each local rank's CPUs, memory node and NIC, read from a DGX-shaped sysfs tree."""

from __future__ import annotations

import ctypes
import os
import subprocess

import pytest

from slurm_ft.health.gpu import LIBRARY
from slurm_ft.topology.apply import mempolicy_problem
from slurm_ft.topology.facts import format_cpulist, parse_cpulist
from tests.integration.launch_cluster import ECHO, LAUNCH, clean_env, slurm_env
from tests.support import machines

pytestmark = pytest.mark.timeout(60)


def _has_nvml() -> bool:
    try:
        ctypes.CDLL(LIBRARY)
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_nvml(), reason="a real NVML's GPUs are not in the fixture tree")
def test_dry_run_shows_placement_of_every_local_rank(tmp_path):
    sys_root = tmp_path / "sys"
    machines.dgx_h100(sys_root)
    env = clean_env()
    env.update(slurm_env("77", 1, 0))
    env["SLURM_FT_HEALTH_SYSFS_ROOT"] = str(sys_root)
    env["UCX_NET_DEVICES"] = "mlx5_7:1"  # the user's own choice is kept
    args = ["--dry-run", "--nproc-per-node", "2", "--numa-binding", "node", "--nic-affinity"]
    args += ["--nic-monitor", "--nic-monitor-fatal", "--state-dir", str(tmp_path / "s"), str(ECHO)]
    p = subprocess.run([*LAUNCH, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    # No GPU here: both ranks go to the NUMA nodes holding this machine's CPUs, and use their NICs.
    allowed = frozenset(os.sched_getaffinity(0))
    node0 = parse_cpulist(machines.H100_NODE_CPUS[0]) & allowed
    assert node0, "this machine's CPUs are numbered from 0"
    mem = ", memory preferred on node 0" if mempolicy_problem(0) is None else ""
    nics = "mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1"
    placed = f"  placement: cpus {format_cpulist(node0)} (NUMA node 0){mem}, NIC {nics} (same NUMA node)"
    assert "placement: numa binding node, NIC affinity on" in lines
    assert "NIC monitor: all RDMA ports every 5s while training; a port going down fails the node" in lines
    assert [ln for ln in lines if ln.startswith("  placement:")] == [placed, placed]
    assert lines.count(f"  NCCL_IB_HCA=={nics}") == 2
    assert not [ln for ln in lines if ln.startswith("  UCX_NET_DEVICES=")]
    assert not (tmp_path / "s").exists()


def test_bad_binding_mode_is_bad_input(tmp_path):
    env = clean_env()
    env.update(slurm_env("77", 1, 0))
    p = subprocess.run(
        [*LAUNCH, "--dry-run", "--numa-binding", "numa", str(ECHO)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "slurm-ft-launch: error: --numa-binding: expected one of none, node, socket, exclusive, got 'numa'"
    ]
