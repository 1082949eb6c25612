"""Report shape, JSON and the Prometheus textfile."""

from __future__ import annotations

import json

import pytest

from slurm_ft.health import Report, Result, Status, prom

pytestmark = pytest.mark.timeout(20)


def sample() -> Report:
    return Report(
        (
            Result("nic:mlx5_0/1", Status.PASS, "up", 0.001, {"up": True}),
            Result("storage:/lustre/a", Status.FAIL, "timed out after 2 s", 1.95, {"timed_out": True}),
            Result("gpu", Status.SKIP, "NVML unavailable", 0.0, {}),
            Result("storage:/nfs/b", Status.FAIL, "does not exist", 0.02, {}),
        ),
        "node7",
        2.0,
    )


def test_healthy_and_first_failure():
    rep = sample()
    assert not rep.healthy
    assert rep.first_failure is not None and rep.first_failure.name == "storage:/lustre/a"
    ok = Report((Result("gpu", Status.SKIP, "x"), Result("nic:eth0", Status.WARN, "y")), "n")
    assert ok.healthy and ok.first_failure is None


def test_to_json_has_every_result_and_is_serialisable():
    doc = json.loads(json.dumps(sample().to_json()))
    assert doc["node"] == "node7"
    assert doc["healthy"] is False
    assert doc["first_failure"] == "storage:/lustre/a: timed out after 2 s"
    assert doc["counts"] == {"pass": 1, "warn": 0, "fail": 2, "skip": 1}
    assert [r["name"] for r in doc["results"]] == [
        "nic:mlx5_0/1",
        "storage:/lustre/a",
        "gpu",
        "storage:/nfs/b",
    ]
    assert doc["results"][1] == {
        "name": "storage:/lustre/a",
        "status": "fail",
        "detail": "timed out after 2 s",
        "duration_s": 1.95,
        "data": {"timed_out": True},
    }


def test_prometheus_textfile():
    text = prom.render(sample(), now=1700000000.0)
    lines = text.splitlines()
    assert 'slurm_ft_health_healthy{node="node7"} 0' in lines
    assert 'slurm_ft_health_failures{node="node7"} 2' in lines
    assert 'slurm_ft_health_last_run_timestamp_seconds{node="node7"} 1700000000.000' in lines
    assert 'slurm_ft_health_run_duration_seconds{node="node7"} 2.000000' in lines
    states = [
        ln
        for ln in lines
        if ln.startswith('slurm_ft_health_check_status{node="node7",check="storage:/lustre/a"')
    ]
    assert states == [
        'slurm_ft_health_check_status{node="node7",check="storage:/lustre/a",status="pass"} 0',
        'slurm_ft_health_check_status{node="node7",check="storage:/lustre/a",status="warn"} 0',
        'slurm_ft_health_check_status{node="node7",check="storage:/lustre/a",status="fail"} 1',
        'slurm_ft_health_check_status{node="node7",check="storage:/lustre/a",status="skip"} 0',
    ]
    assert 'slurm_ft_health_check_duration_seconds{node="node7",check="storage:/lustre/a"} 1.950000' in lines
    assert text.endswith("\n")
    # Every sample line is NAME{labels} VALUE; every metric has HELP and TYPE.
    names = {ln.split("{")[0] for ln in lines if not ln.startswith("#")}
    for name in names:
        assert f"# TYPE {name} gauge" in lines


def test_label_values_are_escaped():
    rep = Report((Result('storage:/a"b\\c', Status.PASS, "ok"),), "n")
    assert 'check="storage:/a\\"b\\\\c"' in prom.render(rep, now=0.0)
