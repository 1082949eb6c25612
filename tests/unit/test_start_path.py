"""What a command loads before it does its work: only what this command line and this job
need. Each module left out is start-up time on every launch and every health check
(README "Benchmarks", issue 19); these tests keep them out and check that the features
behind them still work when asked for."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from slurm_ft.cli import launchoptions
from slurm_ft.cli.usage import UsageParser, terminal_columns
from slurm_ft.slurm import SlurmEnvError, SlurmJob


def _loaded_after(code: str, env_extra: dict[str, str] | None = None) -> set[str]:
    """The slurm_ft and stdlib modules a fresh interpreter holds after ``code``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "COLUMNS"))}
    env.update(env_extra or {})
    probe = code + "\nimport sys\nprint('\\n'.join(sorted(sys.modules)))\n"
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return set(done.stdout.split())


def test_a_plain_launch_start_loads_neither_shutil_nor_ft_launcher_nor_hostlist(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    loaded = _loaded_after(
        textwrap.dedent(
            f"""
            from slurm_ft.cli import launch, launchoptions
            it = launchoptions.interpret([{str(script)!r}])
            job = launch._topology(it, {{}})
            launch._settings_for(it, {{}}, job)
            """
        )
    )
    assert "slurm_ft.compat.torchrun" in loaded  # the probe did reach the command line's reading
    assert not {"shutil", "slurm_ft.compat.ftlauncher", "slurm_ft.hostlist"} & loaded


def test_a_plain_launch_loads_neither_the_dry_run_nor_ft_launcher(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    code = f"from slurm_ft.cli import launch\nassert launch.main([{str(script)!r}]) == 0"
    settings = {"SLURM_FT_STATE_DIR": str(tmp_path / "state"), "SLURM_FT_LAUNCH_NPROC_PER_NODE": "1"}
    loaded = _loaded_after(code, {**settings, "SLURM_FT_HEALTH_CHECKS": "none"})
    assert "slurm_ft.launch.cycle.agent" in loaded  # the probe did launch
    assert not {"slurm_ft.cli.dryrun", "slurm_ft.compat.ftlauncher", "slurm_ft.hostlist"} & loaded
    # Only a store host's successor fences (through the drill's senders).
    assert (
        not {"slurm_ft.launch.succession.handover", "slurm_ft.launch.succession.fence", "slurm_ft.drill.send"}
        & loaded
    )
    # Its state dir is on a local disk: no writes through a scribe child, so no scribe loaded.
    assert not {"slurm_ft.scribe"} & loaded


def test_a_health_check_start_does_not_load_shutil(tmp_path):
    loaded = _loaded_after(
        "from slurm_ft.cli import healthcheck\n"
        f"healthcheck.main(['--checks', 'storage', '--paths', {str(tmp_path)!r}])\n"
    )
    assert "slurm_ft.health.storage" in loaded
    assert "shutil" not in loaded


def test_ft_options_still_load_their_table_and_translate(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    plain = launchoptions.interpret([str(script)])
    assert plain.ft is None
    ft = launchoptions.interpret(["--ft-rank-heartbeat-timeout", "30", str(script)])
    assert ft.ft is not None
    assert ft.cli["hang.rank_heartbeat_timeout"] == 30.0
    assert "slurm_ft.compat.ftlauncher" in sys.modules


def test_slurm_jobs_still_expand_their_node_list():
    env = {
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "node[001-003]",
        "SLURM_JOB_NUM_NODES": "3",
        "SLURM_NODEID": "1",
        "SLURMD_NODENAME": "node002",
    }
    job = SlurmJob.from_env(env)
    assert job.hosts == ("node001", "node002", "node003")
    assert job.hostlist == "node[001-003]"
    with pytest.raises(SlurmEnvError, match="hosts"):
        SlurmJob.from_env(env, max_hosts=2)


def _widest_help_line(help_text: str) -> int:
    parser = UsageParser(prog="x")
    parser.add_argument("--flag", help=help_text)
    return max(len(line) for line in parser.format_help().splitlines())


def test_help_is_as_wide_as_columns_says(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    assert terminal_columns() == 60
    assert _widest_help_line("word " * 40) <= 60
    monkeypatch.setenv("COLUMNS", "140")
    assert 100 < _widest_help_line("word " * 40) <= 140
    monkeypatch.setenv("COLUMNS", "not-a-number")
    assert terminal_columns() > 0


def test_without_columns_or_a_terminal_help_is_80_wide(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "__stdout__", None)
    assert terminal_columns() == 80
    assert 60 < _widest_help_line("word " * 40) <= 80


def test_settings_types_are_read_from_evaluated_annotations():
    """config reads its field types at every start; string annotations would make
    typing.get_type_hints compile each of them again (config/sections.py's module docstring)."""
    from typing import Literal

    from slurm_ft import config

    for section in (config.Settings, config.LaunchSettings, config.HealthSettings):
        assert not any(isinstance(tp, str) for tp in section.__annotations__.values())
    assert config.KEY_TYPES["launch.max_restarts"] is int
    assert config.KEY_TYPES["health.nic_mode"] == Literal["absolute", "transition"]
    assert config.apply(config.Settings(), {"launch.max_restarts": "7"}).launch.max_restarts == 7


def test_selecting_log_lines_loads_neither_rich_nor_torch_nor_the_launcher(tmp_path):
    from slurm_ft import atomicfile
    from slurm_ft.records import CycleOutcome, CycleRecord, LogFile
    from slurm_ft.statedir import StateDir

    log = tmp_path / "job_cycle0.log"
    log.write_text("0: hello\n1: world\n")
    rec = CycleRecord(0, 0, 0, "r", "u" * 32, 0.0, ["n0"], 2, 2, "n0", 1, CycleOutcome.SUCCEEDED)
    rec.log_files = [LogFile(str(log)).to_json()]
    atomicfile.write_json(StateDir(tmp_path / "state").cycle_record(0), rec.to_json())
    code = (
        "from slurm_ft.cli import logs\n"
        f"assert logs.main(['--state-dir', {str(tmp_path / 'state')!r}, '--rank', '1']) == 0\n"
    )
    loaded = _loaded_after(code)
    assert "slurm_ft.logs.select" in loaded  # the probe did select
    assert not {"rich", "torch", "slurm_ft.launch", "numpy"} & loaded
