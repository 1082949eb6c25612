"""ft_launcher's --ft-* options and YAML -> slurm-ft settings; the rest refused by name."""

from __future__ import annotations

import pytest

from slurm_ft.compat import argv as compat_argv
from slurm_ft.compat import ftlauncher as ft
from slurm_ft.compat.errors import CompatError


@pytest.mark.parametrize(
    "written",
    [
        "--ft-rank-heartbeat-timeout",
        "--ft-rank_heartbeat_timeout",
        "--ft_rank_heartbeat_timeout",
        "--ft-param-rank_heartbeat_timeout",
    ],
)
def test_every_spelling_is_one_option(written: str) -> None:
    assert ft.canonical(written) == "rank-heartbeat-timeout"


def test_yaml_first_then_options() -> None:
    section = {"checkpoint_iteration_file": "/a", "min_progress_iterations": 5}
    t = ft.translate([("--ft-checkpoint-iteration-file", "/b")], section)
    assert t.overrides == {"progress.checkpoint_iteration_file": "/b", "progress.min_progress_iterations": 5}


def test_section_is_found_nested_shallowest_first() -> None:
    doc = {"a": {"b": {"fault_tolerance": {"x": 1}}}, "c": {"fault_tolerance": {"y": 2}}}
    assert ft.find_section(doc) == {"y": 2}
    assert ft.find_section({"fault_tolerance": {"z": 3}}) == {"z": 3}
    assert ft.find_section({"other": 1}) is None


def test_section_timeouts_become_the_hang_text_form() -> None:
    t = ft.translate([("--ft-rank-section-timeouts", "setup:600, step:180,ckpt:none")], None)
    assert t.overrides == {"hang.rank_section_timeouts": "setup=600,step=180"}
    t = ft.translate([], {"rank_section_timeouts": {"setup": 900, "step": None}})
    assert t.overrides == {"hang.rank_section_timeouts": "setup=900"}


def test_health_check_edits() -> None:
    t = ft.translate(
        [("--ft-enable-nic-healthcheck", "true"), ("--ft-storage-health-check-path", "/d,/e")], None
    )
    assert ft.merge_checks(["gpu"], t) == ["gpu", "nic", "storage"]
    assert t.overrides["health.nic_mode"] == "transition"
    t = ft.translate([], {"enable_nic_healthcheck": False})
    assert ft.merge_checks(["nic", "storage", "gpu"], t) == ["storage", "gpu"]
    with pytest.raises(CompatError, match="paths must be absolute"):
        ft.translate([("--ft-storage-health-check-path", "rel")], None)


@pytest.mark.parametrize(
    ("options", "section", "message"),
    [
        (
            [("--ft-foo-bar", "1")],
            None,
            "--ft-foo-bar: not supported by slurm-ft-launch (no such ft_launcher option",
        ),
        (
            [("--ft-numa-bind-strict", "true")],
            None,
            "--ft-numa-bind-strict: not supported by slurm-ft-launch (`--numa-binding node` binds",
        ),
        ([("--ft-restart-policy", "min-healthy")], None, "--ft-restart-policy min-healthy: not supported"),
        ([("--ft-enable-log-server", "true")], None, "--ft-enable-log-server true: not supported"),
        ([], {"no_such_key": 1}, "fault_tolerance.no_such_key: not an ft_launcher setting"),
        ([], {"pci_topo_file": "/t"}, "fault_tolerance.pci_topo_file: not supported by slurm-ft-launch"),
        ([("--ft-min-progress-iterations", "x")], None, "--ft-min-progress-iterations: expected an integer"),
        ([("--ft-min-progress-iterations", None)], None, "--ft-min-progress-iterations: expected a value"),
    ],
)
def test_refused_by_name(options, section, message: str) -> None:
    with pytest.raises(CompatError) as err:
        ft.translate(options, section)
    assert str(err.value).startswith(message)


def test_safety_factor_sets_the_learned_hang_timeouts() -> None:
    """Issue 34: ft_launcher's timeouts from observed intervals are the learned hang timeouts."""
    assert ft.translate([("--ft-safety-factor", "5")], None).overrides == {"hang.safety_factor": 5.0}
    assert ft.translate([], {"safety_factor": 3}).overrides == {"hang.safety_factor": 3.0}


def test_off_values_of_unsupported_options_ask_for_nothing() -> None:
    t = ft.translate([("--ft-pci-topo-file", ""), ("--ft-numa-bind-strict", "none")], {"log_level": None})
    assert t.overrides == {}


def test_migrants_are_pointed_at_the_features_that_exist() -> None:
    """Issue 32, item 8: --ft-segment is --segment; strict NUMA binding names --numa-binding."""
    assert ft.translate([("--ft-segment", "4")], None).overrides == {"launch.segment": 4}
    assert ft.translate([], {"segment": 2}).overrides == {"launch.segment": 2}


def test_argv_split_takes_ft_options_and_reads_tee() -> None:
    takes = {"--nnodes": True, "--standalone": False, "--tee": True}
    got = compat_argv.split(
        [
            "--nnodes",
            "2",
            "--ft-x=1",
            "--ft-ignore-missing-cfg",
            "--ft_y",
            "2",
            "--tee",
            "train.py",
            "--ft-z",
            "3",
        ],
        takes,
    )
    assert got.ft == [("--ft-x", "1"), ("--ft-ignore-missing-cfg", None), ("--ft_y", "2")]
    assert got.launcher == ["--nnodes", "2", "--tee=", "train.py", "--ft-z", "3"]
    got = compat_argv.split(["-t", "0:1,1:2", "--standalone", "s.py"], takes)
    assert got.launcher == ["-t=0:1,1:2", "--standalone", "s.py"]
