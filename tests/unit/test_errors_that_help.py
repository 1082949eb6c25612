"""Errors that help (issue 32, item 9): the nearest spelling of a misspelt option or key,
the source of a bad value, the subcommands, a state dir that is a file, a missing module.
In-process front ends: nothing is started by any of these."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_ft.cli import healthcheck, progress, report
from slurm_ft.cli import launch as launch_cli

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def clean(monkeypatch, tmp_path):
    for name in list(__import__("os").environ):
        if name.startswith(("SLURM", "TORCHELASTIC")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


def launch_error(capsys, *args: str) -> str:
    assert launch_cli.main(list(args)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.splitlines()
    return line


def test_a_misspelt_option_names_the_nearest_one(clean, capsys):
    line = launch_error(capsys, "--max-restart", "3", "train.py")
    assert (
        line == "slurm-ft-launch: error: unrecognized arguments: --max-restart (did you mean --max-restarts?)"
    )
    assert progress.main(["check", "--max-no-progres", "3"]) == 2
    assert "(did you mean --max-no-progress-cycles?)" in capsys.readouterr().err
    assert report.main(["--jsn"]) == 2
    assert (
        capsys.readouterr().err == "slurm-ft-report: unrecognized arguments: --jsn (did you mean --json?)\n"
    )


def test_a_misspelt_yaml_key_names_the_file_and_the_nearest_key(clean, capsys):
    cfg = clean / "c.yaml"
    cfg.write_text("slurm_ft:\n  launch:\n    max_restart: 3\n")
    assert launch_error(capsys, "--config", str(cfg), "train.py") == (
        f"slurm-ft-launch: error: config file {cfg}: slurm_ft.launch.max_restart: unknown setting "
        "(did you mean slurm_ft.launch.max_restarts?)"
    )


def test_a_bad_value_names_where_it_came_from(clean, capsys, monkeypatch):
    expected = "expected int, got 'abc'"
    assert launch_error(capsys, "--max-restarts", "abc", "train.py").endswith(
        f"error: --max-restarts: {expected}"
    )
    cfg = clean / "d.yaml"
    cfg.write_text("slurm_ft:\n  launch:\n    max_restarts: abc\n")
    assert launch_error(capsys, "--config", str(cfg), "train.py").endswith(
        f"error: config file {cfg}: slurm_ft.launch.max_restarts: {expected}"
    )
    monkeypatch.setenv("SLURM_FT_LAUNCH_MAX_RESTARTS", "abc")
    assert launch_error(capsys, "train.py").endswith(
        f"error: environment variable SLURM_FT_LAUNCH_MAX_RESTARTS: {expected}"
    )
    monkeypatch.delenv("SLURM_FT_LAUNCH_MAX_RESTARTS")
    monkeypatch.setenv("SLURM_FT_LAUNCH_MAX_RESTART", "3")
    assert launch_error(capsys, "train.py").endswith(
        "error: environment variable SLURM_FT_LAUNCH_MAX_RESTART: unknown setting "
        "(did you mean SLURM_FT_LAUNCH_MAX_RESTARTS?)"
    )


def test_progress_without_a_command_lists_them(clean, capsys):
    assert progress.main([]) == 2
    assert capsys.readouterr().err == (
        "slurm-ft-progress: a command is required: status, check, reset (see slurm-ft-progress --help)\n"
    )


def test_a_state_dir_that_is_a_file_says_so(clean, capsys):
    (clean / "afile").write_text("")
    for dry in ([], ["--dry-run"]):
        assert launch_error(capsys, *dry, "--state-dir", "afile", "train.py") == (
            "slurm-ft-launch: error: state dir afile is a file, not a directory"
        )


def test_a_missing_module_is_refused_up_front(clean, capsys):
    assert launch_error(capsys, "-m", "no_such_module_here", "--x") == (
        f"slurm-ft-launch: error: module not found: no_such_module_here "
        f"(python -m no_such_module_here in {clean} would fail)"
    )
    pkg = Path(clean, "mypkg")
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    assert launch_cli.main(["--dry-run", "-m", "mypkg.sub"]) == 0  # found in the cwd, as python -m would
    assert launch_cli.main(["--dry-run", "-m", "json.tool"]) == 0


def test_abbreviations_are_refused_by_every_command(clean, capsys):
    assert healthcheck.main(["--chec", "nic"]) == 2
    assert "unrecognized arguments: --chec (did you mean --checks?)" in capsys.readouterr().err
    assert progress.main(["status", "--state"]) == 2
    assert "did you mean --state-dir?" in capsys.readouterr().err


def test_the_docs_say_what_the_errors_say(clean, capsys):
    page = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "settings.md").read_text()
    settings = page.split("# Settings\n", 1)[1].split("<!-- SETTINGS:START -->", 1)[0]
    prose = " ".join(settings.split())
    cfg = clean / "run.yaml"
    cfg.write_text("slurm_ft:\n  launch:\n    max_restarts: three\n")
    said = launch_error(capsys, "--config", "run.yaml", "train.py").split("error: ", 1)[1]
    assert f"`{said}`" in prose
    cfg.write_text("slurm_ft:\n  launch:\n    max_restart: 3\n")
    said = launch_error(capsys, "--config", "run.yaml", "train.py").split("error: ", 1)[1]
    assert f"`{said}`" in prose


COMMANDS = ("launch", "healthcheck", "progress", "report", "logs", "drill", "snapshot")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_answers_version(command, capsys):
    import importlib

    from slurm_ft import __version__

    module = importlib.import_module(f"slurm_ft.cli.{command}")
    with pytest.raises(SystemExit) as done:
        module.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"slurm-ft-{command} {__version__}\n"


def test_one_name_per_setting_across_commands(clean, capsys):
    """The health check takes the launcher's --health-checks (its own --checks stays)."""
    from slurm_ft.cli import launchoptions

    launcher = launchoptions.build_parser().format_help()
    health = healthcheck.build_parser().format_help()
    for shared in ("--health-checks", "--nics", "--paths", "--config", "--nic-mode"):
        assert shared in launcher and shared in health, shared
    assert healthcheck.build_parser().parse_args(["--health-checks", "storage"]).checks == "storage"
    assert healthcheck.build_parser().parse_args(["--checks", "storage"]).checks == "storage"
    assert "default absolute" in " ".join(health.split())  # and why it differs from the launcher's
