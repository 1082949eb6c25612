"""The NIC monitor on fixture sysfs trees: what counts as news, what is fatal, what is counted."""

from __future__ import annotations

import shutil

import pytest

from slurm_ft import config
from slurm_ft.health import prom
from slurm_ft.health.nicmonitor import NicChange, NicMonitor, from_settings
from tests.support import fake_sysfs

pytestmark = pytest.mark.timeout(20)


def monitor(root, patterns=(), fatal=True):
    return NicMonitor(str(root), patterns, interval=5.0, fatal=fatal, now=100.0)


def test_a_port_going_down_is_fatal_named_and_counted_once(tmp_path):
    fake_sysfs.ib_port(tmp_path, "mlx5_0", 1)
    fake_sysfs.ib_port(tmp_path, "mlx5_1", 1)
    mon = monitor(tmp_path)
    assert mon.ports == ("mlx5_0/1", "mlx5_1/1")
    fake_sysfs.ib_port(tmp_path, "mlx5_1", 1, state="DOWN", phys="Polling", link_downed=1)
    assert mon.sample(104.9) == [], "not due yet: sysfs is read every interval only"
    (event,) = mon.sample(105.0)
    assert (event.port, event.change, event.fatal, event.when) == ("mlx5_1/1", NicChange.DOWN, True, 105.0)
    assert event.message() == "NIC mlx5_1/1 went down (state DOWN, phys_state Polling, InfiniBand)"
    assert mon.sample(110.0) == [], "still down is no news"
    assert mon.down_total == {"mlx5_0/1": 0, "mlx5_1/1": 1}
    fake_sysfs.ib_port(tmp_path, "mlx5_1", 1, link_downed=1)
    (back,) = mon.sample(115.0)
    assert (back.change, back.fatal) == (NicChange.UP, False)
    assert mon.down_total["mlx5_1/1"] == 1


def test_a_flap_between_samples_is_seen_through_the_counter(tmp_path):
    fake_sysfs.ib_port(tmp_path, "mlx5_0", 1, link_downed=4)
    mon = monitor(tmp_path, fatal=False)
    fake_sysfs.ib_port(tmp_path, "mlx5_0", 1, link_downed=6)
    (event,) = mon.sample(105.0)
    assert (event.change, event.fatal, event.detail) == (NicChange.FLAPPED, False, "link_downed 4 -> 6")


def test_ports_down_from_the_start_stay_quiet(tmp_path):
    fake_sysfs.ib_port(tmp_path, "mlx5_0", 1)
    fake_sysfs.ib_port(tmp_path, "mlx5_9", 1, state="DOWN", phys="Disabled")  # a spare rail
    mon = monitor(tmp_path)
    assert mon.sample(105.0) == []
    assert mon.up() == {"mlx5_0/1": True, "mlx5_9/1": False}


def test_a_vanished_device_and_an_ethernet_carrier_flap(tmp_path):
    fake_sysfs.ib_port(tmp_path, "mlx5_0", 1)
    fake_sysfs.net_if(tmp_path, "eth0", carrier_down_count=2)
    fake_sysfs.net_if(tmp_path, "eth1")
    mon = monitor(tmp_path, patterns=("mlx5_*", "eth0"))
    assert mon.ports == ("mlx5_0/1", "eth0")
    shutil.rmtree(tmp_path / "class" / "infiniband" / "mlx5_0")
    fake_sysfs.net_if(tmp_path, "eth0", carrier_down_count=3)
    events = mon.sample(105.0)
    assert [(e.port, e.change, e.detail) for e in events] == [
        ("mlx5_0/1", NicChange.GONE, "no longer in sysfs"),
        ("eth0", NicChange.FLAPPED, "carrier_down_count 2 -> 3"),
    ]
    assert mon.down_total == {"mlx5_0/1": 1, "eth0": 1}


def test_prometheus_rendering_of_the_counters():
    text = prom.render_nic_monitor(
        "gpu-n1", {"mlx5_1/1": 2, "mlx5_0/1": 0}, {"mlx5_0/1": True, "mlx5_1/1": False}
    )
    assert 'slurm_ft_health_nic_down_events_total{node="gpu-n1",port="mlx5_0/1"} 0' in text
    assert 'slurm_ft_health_nic_down_events_total{node="gpu-n1",port="mlx5_1/1"} 2' in text
    assert 'slurm_ft_health_nic_up{node="gpu-n1",port="mlx5_1/1"} 0' in text
    assert "# TYPE slurm_ft_health_nic_down_events_total counter" in text


def test_rebase_forgets_changes_between_cycles_but_keeps_the_counts(tmp_path):
    fake_sysfs.ib_port(tmp_path, "mlx5_0", 1)
    mon = monitor(tmp_path)
    fake_sysfs.ib_port(tmp_path, "mlx5_0", 1, state="DOWN", phys="Polling", link_downed=1)
    assert [e.change for e in mon.sample(105.0)] == [NicChange.DOWN]
    fake_sysfs.ib_port(tmp_path, "mlx5_0", 1, link_downed=3)  # back up, flapped once more meanwhile
    mon.rebase(200.0)
    assert mon.sample(204.0) == []
    assert mon.sample(205.0) == []
    assert mon.down_total == {"mlx5_0/1": 1}
    assert mon.up() == {"mlx5_0/1": True}


def test_a_port_lost_before_the_watch_starts_is_reported_at_its_first_sample(tmp_path):
    """Down after the pre-join check (during the join and the spawn): not a new normal."""
    fake_sysfs.ib_port(tmp_path, "mlx5_0", 1)
    fake_sysfs.ib_port(tmp_path, "mlx5_1", 1)
    fake_sysfs.ib_port(tmp_path, "mlx5_9", 1, state="DOWN", phys="Disabled")  # down since boot
    mon = monitor(tmp_path)
    fake_sysfs.ib_port(tmp_path, "mlx5_0", 1, state="DOWN", phys="Polling", link_downed=1)
    shutil.rmtree(tmp_path / "class" / "infiniband" / "mlx5_1")
    mon.rebase(200.0)
    events = mon.sample(205.0)
    assert [(e.port, e.change, e.fatal) for e in events] == [
        ("mlx5_0/1", NicChange.DOWN, True),
        ("mlx5_1/1", NicChange.GONE, True),
    ]
    assert mon.down_total == {"mlx5_0/1": 1, "mlx5_1/1": 1, "mlx5_9/1": 0}
    assert mon.sample(210.0) == [], "reported once"
    mon.rebase(300.0)
    assert mon.sample(305.0) == [], "still down at the next watch: already reported"


def test_settings_turn_the_monitor_on(tmp_path):
    fake_sysfs.ib_port(tmp_path, "mlx5_0", 1)
    fake_sysfs.ib_port(tmp_path, "mlx5_1", 1)
    off = config.load({"SLURM_FT_HEALTH_SYSFS_ROOT": str(tmp_path)})
    assert from_settings(off.health, 0.0) is None
    on = config.load(
        {
            "SLURM_FT_HEALTH_SYSFS_ROOT": str(tmp_path),
            "SLURM_FT_HEALTH_NIC_MONITOR": "1",
            "SLURM_FT_HEALTH_NICS": "mlx5_1",
        }
    )
    mon = from_settings(on.health, 0.0)
    assert mon is not None and mon.ports == ("mlx5_1/1",)
    with pytest.raises(
        config.ConfigError, match=r"SLURM_FT_HEALTH_NIC_MONITOR_INTERVAL: must be > 0, got 0\.0"
    ):
        config.load({"SLURM_FT_HEALTH_NIC_MONITOR_INTERVAL": "0"})
