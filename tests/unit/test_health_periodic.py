"""Health during training (issue 34, item 3): which checks run, what they expect, and the
periodic runner's timing (one run at a time, the next an interval after the last ended,
a failure reported once and woken for) on a clock the test moves."""

from __future__ import annotations

import os
import select
import threading

import pytest

from slurm_ft import config
from slurm_ft.config import HealthSettings
from slurm_ft.health import Status, run_checks
from slurm_ft.health.periodic import (
    PeriodicCheck,
    expected_gpus,
    families,
    gpus_seen,
    unhealthy_detail,
)
from slurm_ft.health.result import Report, Result
from slurm_ft.launch import policy
from slurm_ft.records import Failure, FailureKind
from tests.support.fake_nvml import FakeGpu, FakeNvml
from tests.support.waiting import wait_until

pytestmark = pytest.mark.timeout(20)

HEALTHY = Report((Result("gpu:count", Status.PASS, "2 GPUs", 0.0, {"count": 2}),), "node1")
SICK = Report((Result("gpu:0", Status.FAIL, "recovery action GPU_RESET"),), "node1")


class Clock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_only_the_gpu_and_storage_families_run_while_training():
    assert families(["nic", "storage", "gpu"]) == ["storage", "gpu"]
    assert families(["gpu", "nic"]) == ["gpu"]
    assert families(["nic"]) == []


def test_the_gpu_count_seen_before_the_join_is_expected_unless_one_is_configured():
    assert gpus_seen(HEALTHY) == 2
    assert gpus_seen(None) is None
    failed_count = Report(
        (Result("gpu:count", Status.FAIL, "found 1 GPUs, expected 2", 0.0, {"count": 1}),), "n"
    )
    assert gpus_seen(failed_count) is None, "a failed count is no reference"
    assert gpus_seen(Report((Result("gpu", Status.SKIP, "NVML unavailable"),), "n")) is None
    assert expected_gpus(8, 2) == 8
    assert expected_gpus(None, 2) == 2
    assert expected_gpus(0, None) is None


def test_the_detail_names_the_first_failing_check():
    assert unhealthy_detail(SICK) == "gpu:0: recovery action GPU_RESET"
    assert unhealthy_detail(HEALTHY) is None


def test_runs_are_due_an_interval_apart_one_at_a_time_and_a_failure_is_told_once():
    clock = Clock()
    gate = threading.Event()
    answers = [HEALTHY, SICK]
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK)
    try:

        def run() -> Report:
            gate.wait(10)
            return answers.pop(0)

        check = PeriodicCheck(run, 30.0, node_name="node1", now=clock(), wake_fd=write_fd, clock=clock)
        assert check.poll(129.9) is None and not check.running, "not due before one interval"
        assert check.poll(130.0) is None and check.running
        assert check.poll(500.0) is None, "never a second run while one is going on"
        clock.now = 135.0
        gate.set()
        wait_until(lambda: check.runs == 1, 5, message="the first run")
        assert check.last is HEALTHY
        with pytest.raises(BlockingIOError):
            os.read(read_fd, 8)  # a healthy run wakes no one
        assert check.poll(164.9) is None and not check.running, "the next one interval after the last ended"
        assert check.poll(165.0) is None
        # the wake-up is the last thing a failed run does: wait for it, not for the count
        wait_until(lambda: select.select([read_fd], [], [], 0)[0], 5, message="the failed run's wake-up")
        assert os.read(read_fd, 8) == b"h", "a failed run wakes the watch"
        assert check.runs == 2
        assert check.poll(166.0) is SICK
        assert check.poll(166.0) is None, "told once"
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_a_late_failure_is_taken_by_the_next_join_and_a_crash_is_a_failure():
    def crash() -> Report:
        raise RuntimeError("bug")

    check = PeriodicCheck(crash, 1.0, node_name="node4", now=0.0)
    check.poll(1.0)
    assert check.join(5)
    failed = check.take_failed()
    assert failed is not None and failed.node_name == "node4"
    assert unhealthy_detail(failed) == "health: check crashed: RuntimeError: bug"
    assert check.take_failed() is None


def test_a_closed_check_writes_nothing_to_the_wake_pipe():
    read_fd, write_fd = os.pipe2(os.O_NONBLOCK)
    try:
        check = PeriodicCheck(lambda: SICK, 1.0, node_name="n", now=0.0, wake_fd=write_fd)
        check.close()
        check.poll(1.0)
        assert check.join(5)
        with pytest.raises(BlockingIOError):
            os.read(read_fd, 8)
        assert check.take_failed() is SICK
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_while_training_the_workers_gpu_memory_is_not_foreign_but_ecc_still_fails(tmp_path):
    """The job's own workers hold the GPUs then (with pids NVML may give from another pid
    namespace): foreign memory is not judged; the hardware's answers still are."""
    busy = FakeGpu(processes=[(4242, 30 * 1024 * 1024 * 1024)])
    hs = HealthSettings(checks=["gpu"], discover_mounts=False, deadline=2.0)
    before = run_checks(hs, node_name="n", expected_gpus=1, nvml_opener=lambda: FakeNvml([busy]))
    assert not before.healthy and "processes not ours hold" in (unhealthy_detail(before) or "")
    during = run_checks(
        hs, node_name="n", expected_gpus=1, nvml_opener=lambda: FakeNvml([busy]), foreign_memory=False
    )
    assert during.healthy
    assert during.results[1].data["foreign_memory"]["status"] == "skip"
    busy.volatile_uncorrected_ecc = 3
    during = run_checks(
        hs, node_name="n", expected_gpus=1, nvml_opener=lambda: FakeNvml([busy]), foreign_memory=False
    )
    assert unhealthy_detail(during) == "gpu:0: 3 volatile uncorrected ECC errors"


def test_a_gpu_gone_is_a_failure_against_the_count_seen_before():
    gone = run_checks(
        HealthSettings(checks=["gpu"], discover_mounts=False, deadline=2.0),
        node_name="n",
        expected_gpus=expected_gpus(None, gpus_seen(HEALTHY)),
        nvml_opener=lambda: FakeNvml([FakeGpu()]),
        foreign_memory=False,
    )
    assert unhealthy_detail(gone) == "gpu:count: found 1 GPUs, expected 2"


def test_an_unhealthy_failure_is_retried_so_spares_replace_the_node():
    failure = Failure(FailureKind.UNHEALTHY, "node1", 1, 0.0, detail="health check while training: gpu:0: x")
    assert failure.retryable
    assert failure.describe() == "node1 (node 1): health check while training: gpu:0: x"
    placed = policy.Placement((0, 2), (policy.Replacement(1, 1, 2, "unhealthy: gpu:0: x"),))
    verdict = policy.decide(
        restart=1, max_restarts=3, previous_failure=failure, unhealthy=[("node1", "gpu:0: x")], lost=(),
        missing=(), placement=placed,
    )  # fmt: skip
    assert verdict.run
    verdict = policy.decide(
        restart=1, max_restarts=3, previous_failure=failure, unhealthy=[("node1", "gpu:0: x")], lost=(),
        missing=(),
    )  # fmt: skip
    assert (verdict.run, verdict.exit_code, verdict.reason) == (False, 94, "unhealthy: node1: gpu:0: x")


def test_the_watch_wakes_for_the_next_check():
    assert policy.watch_sleep(5.0, 10.0, None, False, 2.0) == 2.0
    assert policy.watch_sleep(5.0, 10.0, None, False, None) == 5.0


@pytest.mark.parametrize(
    ("layer", "expected"),
    [
        ({"env": {"SLURM_FT_HEALTH_CHECK_INTERVAL": "60"}}, 60.0),
        ({"yaml": "slurm_ft:\n  health:\n    check_interval: 30\n"}, 30.0),
        (
            {
                "yaml": "slurm_ft:\n  health:\n    check_interval: 30\n",
                "env": {"SLURM_FT_HEALTH_CHECK_INTERVAL": "60"},
                "cli": {"health.check_interval": "0"},
            },
            0.0,
        ),
        ({}, 300.0),
    ],
)
def test_the_interval_is_layered_like_every_setting(tmp_path, layer, expected):
    path = None
    if "yaml" in layer:
        path = tmp_path / "c.yaml"
        path.write_text(layer["yaml"])
    settings = config.load(layer.get("env", {}), str(path) if path else None, layer.get("cli"))
    assert settings.health.check_interval == expected


def test_a_negative_interval_names_where_it_came_from():
    with pytest.raises(config.ConfigError) as err:
        config.load({"SLURM_FT_HEALTH_CHECK_INTERVAL": "-5"})
    assert (
        str(err.value)
        == "environment variable SLURM_FT_HEALTH_CHECK_INTERVAL: must be >= 0 (0 is off), got -5.0"
    )
