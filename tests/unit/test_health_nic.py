"""NIC policy against fixture sysfs trees: selection, all ports, absolute and transition."""

from __future__ import annotations

import shutil

import pytest

from slurm_ft.health import Status, nic
from tests.support.fake_sysfs import ib_port, net_if

pytestmark = pytest.mark.timeout(20)


def by_name(results):
    return {r.name: r for r in results}


def test_every_port_of_every_rdma_device_is_checked_not_only_port_1(tmp_path):
    ib_port(tmp_path, "mlx5_0", 1)
    ib_port(tmp_path, "mlx5_0", 2, state="DOWN", phys="Polling")
    ib_port(tmp_path, "mlx5_1", 1, link_layer="Ethernet")
    results = nic.check(str(tmp_path), [], "absolute", None)
    got = {r.name: (r.status, r.detail) for r in results}
    assert got == {
        "nic:mlx5_0/1": (Status.PASS, "up (state ACTIVE, phys_state LinkUp, InfiniBand)"),
        "nic:mlx5_0/2": (Status.FAIL, "down (state DOWN, phys_state Polling, InfiniBand)"),
        "nic:mlx5_1/1": (Status.PASS, "up (state ACTIVE, phys_state LinkUp, Ethernet)"),
    }


def test_active_but_not_linkup_is_down(tmp_path):
    ib_port(tmp_path, "mlx5_0", 1, state="ACTIVE", phys="Disabled")
    (r,) = nic.check(str(tmp_path), [], "absolute", None)
    assert r.status is Status.FAIL


def test_default_selection_is_rdma_only_and_skips_without_devices(tmp_path):
    net_if(tmp_path, "eth0", operstate="down", carrier=0)
    (r,) = nic.check(str(tmp_path), [], "absolute", None)
    assert (r.name, r.status, r.detail) == ("nic", Status.SKIP, "no RDMA devices under class/infiniband")


def test_globs_and_names_select_rdma_devices_and_ethernet(tmp_path):
    ib_port(tmp_path, "mlx5_0", 1)
    ib_port(tmp_path, "mlx5_1", 1)
    ib_port(tmp_path, "bnxt_re0", 1, state="DOWN", phys="Polling")
    net_if(tmp_path, "eth0")
    net_if(tmp_path, "eth1", operstate="down", carrier=None)
    net_if(tmp_path, "ib0")
    results = by_name(nic.check(str(tmp_path), ["mlx5_*", "eth*"], "absolute", None))
    assert sorted(results) == ["nic:eth0", "nic:eth1", "nic:mlx5_0/1", "nic:mlx5_1/1"]
    assert results["nic:eth1"].status is Status.FAIL
    assert results["nic:eth1"].detail == "down (operstate down, carrier -)"
    assert results["nic:eth0"].detail == "up (operstate up, carrier 1)"


def test_unknown_operstate_with_carrier_counts_as_up(tmp_path):
    net_if(tmp_path, "lo", operstate="unknown", carrier=1)
    net_if(tmp_path, "dummy0", operstate="unknown", carrier=0)
    results = by_name(nic.check(str(tmp_path), ["lo", "dummy0"], "absolute", None))
    assert results["nic:lo"].status is Status.PASS
    assert results["nic:dummy0"].status is Status.FAIL


def test_a_name_that_matches_nothing_fails(tmp_path):
    ib_port(tmp_path, "mlx5_0", 1)
    results = by_name(nic.check(str(tmp_path), ["mlx5_0", "ib9"], "absolute", None))
    assert results["nic:ib9"].status is Status.FAIL
    assert results["nic:ib9"].detail == "no RDMA device or network interface matches 'ib9'"


@pytest.mark.parametrize("bad", ["", "mlx5[", "mlx5]", "a[[b]]", "eth 0", "eth0/1", "x;rm"])
def test_bad_globs_are_rejected(bad):
    with pytest.raises(nic.PatternError):
        nic.validate_pattern(bad)


@pytest.mark.parametrize("good", ["mlx5_*", "ib0", "eth*", "mlx5_[0-3]", "en?s0", "bond0.100", "ib[!2]"])
def test_good_globs_are_accepted(good):
    nic.validate_pattern(good)


def test_transition_mode_fails_only_on_change_and_warns_for_ports_down_at_start(tmp_path):
    ib_port(tmp_path, "mlx5_0", 1)
    ib_port(tmp_path, "mlx5_0", 2, state="DOWN", phys="Polling")
    ib_port(tmp_path, "mlx5_1", 1, link_downed=3)
    ib_port(tmp_path, "mlx5_2", 1)
    baseline = nic.take_baseline(str(tmp_path), [])
    # During the job: mlx5_0/1 goes down, mlx5_1/1 flaps (counter grows, link back up),
    # mlx5_0/2 stays down, mlx5_2 disappears, mlx5_3 appears up.
    ib_port(tmp_path, "mlx5_0", 1, state="DOWN", phys="Polling")
    ib_port(tmp_path, "mlx5_1", 1, link_downed=5)
    shutil.rmtree(tmp_path / "class" / "infiniband" / "mlx5_2")
    ib_port(tmp_path, "mlx5_3", 1)
    got = {r.name: (r.status, r.detail) for r in nic.check(str(tmp_path), [], "transition", baseline)}
    assert got == {
        "nic:mlx5_0/1": (Status.FAIL, "went down since start (state DOWN, phys_state Polling, InfiniBand)"),
        "nic:mlx5_0/2": (Status.WARN, "down since start (state DOWN, phys_state Polling, InfiniBand)"),
        "nic:mlx5_1/1": (Status.FAIL, "flapped: link_downed 3 -> 5 since start"),
        "nic:mlx5_2/1": (Status.FAIL, "disappeared since start"),
        "nic:mlx5_3/1": (Status.PASS, "up (state ACTIVE, phys_state LinkUp, InfiniBand); not in baseline"),
    }


def test_transition_port_that_came_up_passes_and_ethernet_flap_counts(tmp_path):
    ib_port(tmp_path, "mlx5_0", 1, state="DOWN", phys="Polling")
    net_if(tmp_path, "eth0", carrier_down_count=1)
    baseline = nic.take_baseline(str(tmp_path), ["mlx5_0", "eth0"])
    ib_port(tmp_path, "mlx5_0", 1)
    net_if(tmp_path, "eth0", carrier_down_count=2)
    got = by_name(nic.check(str(tmp_path), ["mlx5_0", "eth0"], "transition", baseline))
    assert got["nic:mlx5_0/1"].status is Status.PASS
    assert got["nic:eth0"].status is Status.FAIL
    assert got["nic:eth0"].detail == "flapped: carrier_down_count 1 -> 2 since start"


def test_transition_without_baseline_is_judged_absolute_and_says_so(tmp_path):
    ib_port(tmp_path, "mlx5_0", 1, state="DOWN", phys="Polling")
    (r,) = nic.check(str(tmp_path), [], "transition", None)
    assert r.status is Status.FAIL
    assert r.detail.endswith("; no baseline, judged absolute")
