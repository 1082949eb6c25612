"""The command line: torchrun-compatible spellings, layering into settings."""

from __future__ import annotations

import pytest

from slurm_ft import config
from slurm_ft.cli import launch as cli
from slurm_ft.cli import launchoptions
from slurm_ft.cli.usage import UsageError


def parse(*args: str):
    return launchoptions.build_parser().parse_args(list(args))


def test_torchrun_spellings_and_script_args_pass_through():
    ns = parse(
        "--nproc_per_node", "2", "--max_restarts", "1", "train.py", "--lr", "0.1", "--nproc-per-node", "9"
    )
    assert (ns.nproc_per_node, ns.max_restarts, ns.target) == ("2", "1", "train.py")
    assert ns.args == ["--lr", "0.1", "--nproc-per-node", "9"]
    ns = parse("-m", "pkg.train", "x")
    assert ns.module and ns.target == "pkg.train" and ns.args == ["x"]
    ns = parse("--no-python", "bash", "run.sh")
    assert ns.no_python and ns.target == "bash"


def test_cli_values_layer_over_env_and_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("slurm_ft:\n  launch:\n    max_restarts: 7\n    join_timeout: 9\n")
    ns = parse("--config", str(f), "--max-restarts", "2", "--health-checks", "none", "t.py")
    s = config.load({"SLURM_FT_LAUNCH_JOIN_TIMEOUT": "11"}, ns.config, launchoptions.settings_overrides(ns))
    assert (s.launch.max_restarts, s.launch.join_timeout, s.health.checks) == (2, 11.0, [])
    assert not cli._health_enabled(s.health.checks)


def test_parse_errors_are_usage_errors():
    with pytest.raises(UsageError):
        parse("--max-restarts")


def test_main_bad_input_is_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["--nproc-per-node", "x", "missing.py"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("slurm-ft-launch: error: ")


def _three_node_job(monkeypatch, tmp_path, node: int) -> None:
    from tests.unit.test_launch_cycle import job_env

    for key, value in job_env(node, 3).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SLURM_FT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text("")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--spare-nodes", "3"], "--spare-nodes 3: the job has only 3 node(s); at least one must be active"),
        (
            ["--spare-nodes", "1", "--segment", "2"],
            "--segment 2: the job's 3 node(s) and its 2 active node(s)",
        ),
        (["--suspect-after", "0"], "--suspect-after: must be >= 1, got 0"),
    ],
)
def test_bad_spare_settings_are_one_line(capsys, monkeypatch, tmp_path, args, message):
    _three_node_job(monkeypatch, tmp_path, 0)
    assert cli.main([*args, "--nproc-per-node", "1", "--health-checks", "none", "t.py"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and message in err[0], err


def test_dry_run_of_a_spare_says_so_and_the_world_size_excludes_the_spares(capsys, monkeypatch, tmp_path):
    _three_node_job(monkeypatch, tmp_path, 2)
    argv = ["--spare-nodes", "1", "--nproc-per-node", "2", "--health-checks", "none", "--dry-run", "t.py"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "spares: 1 of 3 node(s) stand by (segment 1, suspect after 2); this node starts as a spare" in out
    assert "world size 4, no ranks here until it replaces an active node" in out
    assert "worker local_rank" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--health-check-interval", "-1"], "--health-check-interval: must be >= 0 (0 is off), got -1.0"),
        (["--health-check-interval", "soon"], "--health-check-interval: expected number, got 'soon'"),
        (
            ["--ft-node-health-check-interval", "-2"],
            "--ft-node-health-check-interval: expected a number of seconds >= 0, got '-2'",
        ),
    ],
)
def test_bad_health_check_intervals_are_one_line(capsys, monkeypatch, tmp_path, args, message):
    _three_node_job(monkeypatch, tmp_path, 0)
    assert cli.main([*args, "--nproc-per-node", "1", "t.py"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and message in err[0], err


def test_ft_launchers_interval_is_the_health_check_interval():
    """Issue 34, item 3: --ft-node-health-check-interval (any spelling, or its YAML key) sets
    health.check_interval; its off values turn the checks while training off."""
    it = launchoptions.interpret(["--ft-node_health_check_interval", "5", "t.py"])
    assert it.cli["health.check_interval"] == 5.0
    it = launchoptions.interpret(
        ["--ft-cfg-path", "c.yaml", "t.py"],
        read_yaml=lambda path: {"fault_tolerance": {"node_health_check_interval": "none"}},
    )
    assert it.cli["health.check_interval"] == 0.0
    it = launchoptions.interpret(
        ["--ft-node-health-check-interval", "5", "--health-check-interval", "9", "t.py"]
    )
    assert it.cli["health.check_interval"] == "9", "slurm-ft's own option wins, as for every alias"
