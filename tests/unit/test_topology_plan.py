"""Binding and NIC choice per local rank on sysfs trees shaped like real GPU nodes."""

from __future__ import annotations

import pytest

from slurm_ft.health.gpu import NvmlUnavailable
from slurm_ft.topology import sysfs
from slurm_ft.topology.build import build_plan
from slurm_ft.topology.facts import CpuListError, NodeFacts, NumaNode, format_cpulist, parse_cpulist
from slurm_ft.topology.plan import Binding, plan
from tests.support import machines
from tests.support.fake_nvml import FakeGpu, FakeNvml

pytestmark = pytest.mark.timeout(20)

ALL_H100 = frozenset(range(224))


def h100(tmp_path, gpus=8):
    ids = machines.dgx_h100(tmp_path)
    return sysfs.read_facts(str(tmp_path), ids[:gpus], with_nics=True)


def four(tmp_path):
    ids = machines.four_gpu_two_nics(tmp_path)
    return sysfs.read_facts(str(tmp_path), ids, with_nics=True)


def cpus_of(p):
    return [None if r.cpus is None else format_cpulist(r.cpus) for r in p.ranks]


def test_cpulist_round_trip_and_errors():
    assert parse_cpulist("0-3,8,10-11\n") == frozenset({0, 1, 2, 3, 8, 10, 11})
    assert parse_cpulist("") == frozenset()
    assert format_cpulist({11, 0, 1, 2, 3, 8, 10}) == "0-3,8,10-11"
    for bad in ("3-1", "a", "1-", "-2"):
        with pytest.raises(CpuListError):
            parse_cpulist(bad)


def test_h100_node_binding_and_nic_per_gpu(tmp_path):
    p = plan(h100(tmp_path), allowed_cpus=ALL_H100, mode=Binding.NODE, nproc=8, nic_affinity=True)
    assert cpus_of(p) == ["0-55,112-167"] * 4 + ["56-111,168-223"] * 4
    assert [r.mem_node for r in p.ranks] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [r.nic_env({}) for r in p.ranks] == [
        {"NCCL_IB_HCA": f"={nic}:1", "UCX_NET_DEVICES": f"{nic}:1"} for nic in machines.H100_COMPUTE_NICS
    ]
    assert {r.nic_reason for r in p.ranks} == {"same PCI switch"}
    assert p.warnings == ()


def test_h100_exclusive_splits_each_node_into_whole_cores(tmp_path):
    p = plan(h100(tmp_path), allowed_cpus=ALL_H100, mode=Binding.EXCLUSIVE, nproc=8)
    assert cpus_of(p) == [
        "0-13,112-125",
        "14-27,126-139",
        "28-41,140-153",
        "42-55,154-167",
        "56-69,168-181",
        "70-83,182-195",
        "84-97,196-209",
        "98-111,210-223",
    ]


def test_h100_socket_equals_node_with_one_node_per_socket(tmp_path):
    facts = h100(tmp_path)
    by_socket = plan(facts, allowed_cpus=ALL_H100, mode=Binding.SOCKET, nproc=8)
    by_node = plan(facts, allowed_cpus=ALL_H100, mode=Binding.NODE, nproc=8)
    assert by_socket.ranks == by_node.ranks


def test_never_binds_outside_the_cpus_slurm_gave(tmp_path):
    """A task given half of socket 0: socket-1 ranks stay unbound, with one line saying so."""
    allowed = parse_cpulist("0-27,112-139")
    facts = h100(tmp_path)
    node = plan(facts, allowed_cpus=allowed, mode=Binding.NODE, nproc=8)
    assert cpus_of(node) == ["0-27,112-139"] * 4 + [None] * 4
    assert [r.mem_node for r in node.ranks] == [0, 0, 0, 0, None, None, None, None]
    assert node.warnings == (
        "local ranks 4-7: NUMA node 1 has none of the CPUs this task may use (0-27,112-139); not bound",
    )
    exclusive = plan(facts, allowed_cpus=allowed, mode=Binding.EXCLUSIVE, nproc=8)
    assert cpus_of(exclusive)[:4] == ["0-6,112-118", "7-13,119-125", "14-20,126-132", "21-27,133-139"]
    for r in exclusive.ranks:
        assert r.cpus is None or r.cpus <= allowed


def test_more_ranks_than_cores_share_the_node(tmp_path):
    allowed = parse_cpulist("0-2,112-114")  # three cores on node 0
    p = plan(h100(tmp_path, gpus=4), allowed_cpus=allowed, mode=Binding.EXCLUSIVE, nproc=4)
    assert cpus_of(p) == ["0-2,112-114"] * 4
    assert p.warnings == (
        "local ranks 0-3: NUMA node 0 has 3 usable cores for 4 ranks; "
        "they share the node's CPUs instead of exclusive cores",
    )


def test_four_gpus_one_nic_per_pair(tmp_path):
    facts = four(tmp_path)
    assert [g.numa for g in facts.gpus] == [0, 0, 1, 1]  # GPU 3's -1 inferred from local_cpulist
    p = plan(facts, allowed_cpus=frozenset(range(64)), mode=Binding.EXCLUSIVE, nproc=4, nic_affinity=True)
    assert cpus_of(p) == ["0-7,32-39", "8-15,40-47", "16-23,48-55", "24-31,56-63"]
    assert [(r.nics, r.nic_reason) for r in p.ranks] == [
        (("mlx5_0:1",), "same PCI switch"),
        (("mlx5_0:1",), "same PCI switch"),
        (("mlx5_1:1",), "same NUMA node"),
        (("mlx5_1:1",), "same NUMA node"),
    ]


def test_without_gpus_ranks_are_spread_over_numa_nodes_in_blocks(tmp_path):
    machines.dgx_h100(tmp_path)
    facts = sysfs.read_facts(str(tmp_path), [], with_nics=False)
    three = plan(facts, allowed_cpus=ALL_H100, mode=Binding.NODE, nproc=3)
    assert [r.numa for r in three.ranks] == [0, 0, 1]
    four_ranks = plan(facts, allowed_cpus=ALL_H100, mode=Binding.EXCLUSIVE, nproc=4)
    assert cpus_of(four_ranks) == ["0-27,112-139", "28-55,140-167", "56-83,168-195", "84-111,196-223"]
    only_node1 = plan(facts, allowed_cpus=parse_cpulist("60-63"), mode=Binding.NODE, nproc=2)
    assert cpus_of(only_node1) == ["60-63", "60-63"]


def test_socket_takes_every_numa_node_of_the_socket():
    """Two NUMA nodes per socket (AMD NPS2): socket binding spans both."""
    nodes = tuple(NumaNode(i, frozenset(range(4 * i, 4 * i + 4)), i // 2) for i in range(4))
    facts = NodeFacts(nodes=nodes)
    p = plan(facts, allowed_cpus=frozenset(range(16)), mode=Binding.SOCKET, nproc=4)
    assert cpus_of(p) == ["0-7", "0-7", "8-15", "8-15"]
    assert [r.mem_node for r in p.ranks] == [0, 1, 2, 3]


def test_user_set_nic_variables_win(tmp_path):
    p = plan(h100(tmp_path, gpus=1), allowed_cpus=ALL_H100, mode=Binding.NONE, nproc=1, nic_affinity=True)
    (rank,) = p.ranks
    assert (rank.cpus, rank.mem_node) == (None, None)
    assert rank.nic_env({"NCCL_IB_HCA": "=mlx5_7:1"}) == {"UCX_NET_DEVICES": "mlx5_0:1"}
    assert rank.nic_env({"NCCL_IB_HCA": "x", "UCX_NET_DEVICES": "y"}) == {}


def test_memory_node_outside_the_cpuset_mems_is_not_preferred(tmp_path):
    p = plan(h100(tmp_path), allowed_cpus=ALL_H100, mode=Binding.NODE, nproc=8, allowed_mems=frozenset({0}))
    assert [r.mem_node for r in p.ranks] == [0] * 4 + [None] * 4
    assert p.warnings == (
        "local ranks 4-7: memory of NUMA node 1 is not allowed to this task (0); "
        "memory policy left to the kernel",
    )


def test_no_nic_near_a_gpu_is_a_warning(tmp_path):
    facts = four(tmp_path)
    only_socket0 = NodeFacts(
        facts.nodes, facts.cores, facts.gpus, tuple(n for n in facts.nics if n.name == "mlx5_0")
    )
    p = plan(only_socket0, allowed_cpus=frozenset(range(64)), mode=Binding.NONE, nproc=4, nic_affinity=True)
    assert [r.nics for r in p.ranks] == [("mlx5_0:1",), ("mlx5_0:1",), (), ()]
    assert p.warnings == (
        "local rank 2: no RDMA NIC on the PCI switch or NUMA node of GPU 0000:c3:00.0; NCCL_IB_HCA not set",
        "local rank 3: no RDMA NIC on the PCI switch or NUMA node of GPU 0000:c4:00.0; NCCL_IB_HCA not set",
    )
    none = NodeFacts(facts.nodes, facts.cores, facts.gpus, ())
    p = plan(none, allowed_cpus=frozenset(range(64)), mode=Binding.NONE, nproc=2, nic_affinity=True)
    assert p.warnings == ("local ranks 0-1: no RDMA NIC with an active port; NCCL_IB_HCA not set",)


def fake_h100_nvml(ids):
    return FakeNvml([FakeGpu(pci_bus_id=b, uuid=f"GPU-{i}aaa-{i}") for i, b in enumerate(ids)])


def build(tmp_path, visible, opener, *, mode=Binding.NODE, nproc=2, problem=None):
    proc = tmp_path / "proc" / "self"
    proc.mkdir(parents=True, exist_ok=True)
    (proc / "status").write_text("Name:\tx\nMems_allowed_list:\t0-1\n")
    return build_plan(
        mode=mode,
        nic_affinity=True,
        nproc=nproc,
        sysfs_root=str(tmp_path / "sys"),
        proc_root=str(tmp_path / "proc"),
        visible_devices=visible,
        allowed_cpus=ALL_H100,
        opener=opener,
        mempolicy_problem=lambda node: problem,
    )


def test_build_maps_local_ranks_through_cuda_visible_devices(tmp_path):
    ids = machines.dgx_h100(tmp_path / "sys")
    fake = fake_h100_nvml(ids)
    by_index = build(tmp_path, "5,2", lambda: fake)
    assert fake.closed
    assert [(r.gpu, r.numa, r.nics) for r in by_index.ranks] == [
        ("0000:c3:00.0", 1, ("mlx5_9:1",)),
        ("0000:52:00.0", 0, ("mlx5_4:1",)),
    ]
    by_uuid = build(tmp_path, "GPU-5aaa,GPU-2", lambda: fake)
    assert by_uuid.ranks == by_index.ranks
    assert [r.gpu for r in build(tmp_path, None, lambda: fake).ranks] == ["0000:1b:00.0", "0000:43:00.0"]


def test_build_refuses_to_guess_and_degrades_without_nvml(tmp_path):
    ids = machines.dgx_h100(tmp_path / "sys")
    mig = build(tmp_path, "MIG-1234", lambda: fake_h100_nvml(ids))
    assert {r.cpus for r in mig.ranks} == {None}
    assert mig.warnings == (
        "local ranks 0-1: CUDA_VISIBLE_DEVICES entry 'MIG-1234' (MIG or unknown) cannot be placed; "
        "not placed",
    )

    def no_nvml():
        raise NvmlUnavailable("no driver")

    cpu_only = build(tmp_path, None, no_nvml, nproc=2)
    assert [(r.gpu, r.numa, r.nics) for r in cpu_only.ranks] == [
        (None, 0, ("mlx5_0:1", "mlx5_3:1", "mlx5_4:1", "mlx5_5:1")),
        (None, 1, ("mlx5_10:1", "mlx5_11:1", "mlx5_6:1", "mlx5_7:1", "mlx5_9:1")),
    ]


def test_build_drops_the_memory_policy_where_the_kernel_refuses_it(tmp_path):
    ids = machines.dgx_h100(tmp_path / "sys")
    p = build(tmp_path, None, lambda: fake_h100_nvml(ids), problem="set_mempolicy: Operation not permitted")
    assert [r.mem_node for r in p.ranks] == [None, None]
    assert [r.cpus is not None for r in p.ranks] == [True, True]
    assert p.warnings == ("memory policy not set (set_mempolicy: Operation not permitted): CPUs only",)
