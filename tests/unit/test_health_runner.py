"""run_checks: validation, concurrency under one deadline, crash containment."""

from __future__ import annotations

import threading
import time

import pytest

from slurm_ft.config import ConfigError, HealthSettings
from slurm_ft.health import Status, run_checks, take_baseline, validate
from slurm_ft.health.runner import expand_paths
from tests.support.fake_nvml import FakeGpu, FakeNvml
from tests.support.fake_sysfs import ib_port

pytestmark = pytest.mark.timeout(20)


def settings(tmp_path, **kw) -> HealthSettings:
    base = dict(checks=["nic", "gpu"], sysfs_root=str(tmp_path), discover_mounts=False, deadline=2.0)
    base.update(kw)
    return HealthSettings(**base)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"checks": ["nic", "disk"]},
            "slurm_ft.health.checks: unknown check 'disk' (known: nic, storage, gpu)",
        ),
        ({"checks": []}, "slurm_ft.health.checks: no checks selected"),
        ({"paths": ["/ok", "scratch"]}, "slurm_ft.health.paths: 'scratch' is not an absolute path"),
        ({"nics": ["mlx5_[0"]}, "slurm_ft.health.nics: bad NIC name or glob 'mlx5_[0': '[' without ']'"),
        ({"gpus": -1}, "slurm_ft.health.gpus: must be >= 0, got -1"),
    ],
)
def test_bad_settings_are_config_errors(tmp_path, kw, message):
    with pytest.raises(ConfigError) as err:
        validate(settings(tmp_path, **kw))
    assert str(err.value) == message


def test_families_report_in_fixed_order_with_the_node_name(tmp_path):
    ib_port(tmp_path, "mlx5_0", 1)
    fake = FakeNvml([FakeGpu(), FakeGpu()])
    rep = run_checks(settings(tmp_path), node_name="node3", expected_gpus=2, nvml_opener=lambda: fake)
    assert rep.node_name == "node3"
    assert [r.name for r in rep.results] == ["nic:mlx5_0/1", "gpu:count", "gpu:0", "gpu:1"]
    assert rep.healthy


def test_expected_gpus_argument_wins_over_the_setting(tmp_path):
    fake = FakeNvml([FakeGpu()])
    rep = run_checks(
        settings(tmp_path, checks=["gpu"], gpus=1), node_name="n", expected_gpus=2, nvml_opener=lambda: fake
    )
    assert rep.first_failure is not None
    assert rep.first_failure.detail == "found 1 GPUs, expected 2"
    rep = run_checks(
        settings(tmp_path, checks=["gpu"], gpus=1),
        node_name="n",
        expected_gpus=None,
        nvml_opener=lambda: FakeNvml([FakeGpu()]),
    )
    assert rep.healthy


def test_a_hung_family_is_reported_timed_out_at_the_deadline(tmp_path):
    ib_port(tmp_path, "mlx5_0", 1)
    release = threading.Event()

    def stuck_nvml():
        release.wait(30)
        raise AssertionError("not reached in time")

    try:
        start = time.monotonic()
        rep = run_checks(
            settings(tmp_path, deadline=0.5), node_name="n", expected_gpus=None, nvml_opener=stuck_nvml
        )
        took = time.monotonic() - start
    finally:
        release.set()
    assert took < 0.5 + 0.3, took
    got = {r.name: (r.status, r.detail) for r in rep.results}
    assert got == {
        "nic:mlx5_0/1": (Status.PASS, "up (state ACTIVE, phys_state LinkUp, InfiniBand)"),
        "gpu": (Status.FAIL, "timed out after 0.5 s"),
    }


def test_a_crashing_check_fails_without_raising(tmp_path):
    def broken():
        raise RuntimeError("driver said something odd")

    rep = run_checks(
        settings(tmp_path, checks=["gpu"]), node_name="n", expected_gpus=None, nvml_opener=broken
    )
    (r,) = rep.results
    assert (r.name, r.status, r.detail) == (
        "gpu",
        Status.FAIL,
        "check crashed: RuntimeError: driver said something odd",
    )


def test_transition_mode_uses_the_baseline(tmp_path):
    ib_port(tmp_path, "mlx5_0", 1)
    s = settings(tmp_path, checks=["nic"], nic_mode="transition")
    baseline = take_baseline(s)
    ib_port(tmp_path, "mlx5_0", 1, state="DOWN", phys="Polling")
    rep = run_checks(s, node_name="n", expected_gpus=None, baseline=baseline)
    assert rep.first_failure is not None
    assert rep.first_failure.detail.startswith("went down since start")


def test_percent_n_in_paths_is_the_node_name():
    assert expand_paths(["/scratch/%n/ok", "/a"], "node2") == ["/scratch/node2/ok", "/a"]
