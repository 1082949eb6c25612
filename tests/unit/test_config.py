"""Settings: defaults < YAML file < SLURM_FT_* environment < command line, and clear errors."""

from __future__ import annotations

import pytest

from slurm_ft import config
from slurm_ft.config import ConfigError


def write(tmp_path, text: str):
    path = tmp_path / "slurm_ft.yaml"
    path.write_text(text)
    return str(path)


def test_defaults_without_any_layer():
    s = config.load({})
    assert s.launch.max_restarts == 3
    assert s.launch.workers_stop_timeout == 15.0
    assert s.launch.term_timeout < 30.0  # below Slurm's usual KillWait
    assert s.applog.line_cap_bytes == 1024 * 1024
    assert s.progress.max_no_progress_cycles == 2
    assert s.progress.min_progress_iterations == 1
    assert s.state_dir is None


def test_each_layer_overrides_the_one_below(tmp_path):
    path = write(
        tmp_path,
        "slurm_ft:\n"
        "  state_dir: /from/yaml\n"
        "  launch:\n"
        "    max_restarts: 5\n"
        "    join_timeout: 60\n"
        "    term_timeout: 20\n"
        "  health:\n"
        "    nics: [mlx5_*, ib0]\n",
    )
    env = {"SLURM_FT_LAUNCH_MAX_RESTARTS": "7", "SLURM_FT_LAUNCH_JOIN_TIMEOUT": "90"}
    s = config.load(env, path, {"launch.max_restarts": 9})
    assert s.launch.max_restarts == 9  # command line wins
    assert s.launch.join_timeout == 90.0  # environment beats the file
    assert s.launch.term_timeout == 20.0  # file beats the default
    assert s.state_dir == "/from/yaml"
    assert s.health.nics == ["mlx5_*", "ib0"]


def test_config_file_named_by_environment(tmp_path):
    path = write(tmp_path, "slurm_ft:\n  progress:\n    max_no_progress_cycles: 4\n")
    s = config.load({"SLURM_FT_CONFIG": path})
    assert s.progress.max_no_progress_cycles == 4


def test_command_line_none_means_not_given():
    s = config.load({"SLURM_FT_LAUNCH_MAX_RESTARTS": "7"}, None, {"launch.max_restarts": None})
    assert s.launch.max_restarts == 7


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", True), ("true", True), ("yes", True), ("0", False), ("off", False)],
)
def test_booleans_from_environment(raw, expected):
    assert config.load({"SLURM_FT_APPLOG_TEE": raw}).applog.tee is expected


def test_lists_from_environment_are_comma_separated():
    s = config.load(
        {"SLURM_FT_HEALTH_PATHS": "/lustre/a, /nfs/b", "SLURM_FT_APPLOG_LOCAL_RANKS_FILTER": "0,3"}
    )
    assert s.health.paths == ["/lustre/a", "/nfs/b"]
    assert s.applog.local_ranks_filter == [0, 3]


def test_optional_values_can_be_cleared():
    s = config.load({"SLURM_FT_LAUNCH_RDZV_PORT": "29400"}, None, {"launch.rdzv_port": "none"})
    assert s.launch.rdzv_port is None


def test_worker_variables_are_not_settings():
    s = config.load({"SLURM_FT_CYCLE": "3", "SLURM_FT_CYCLE_INFO": "/x.json", "SLURM_FT_TEST_MARKER": "m"})
    assert s == config.Settings()


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        (
            "slurm_ft:\n  launch:\n    max_restarts: three\n",
            "slurm_ft.launch.max_restarts: expected int, got 'three'",
        ),
        ("slurm_ft:\n  launch:\n    max_restart: 3\n", "slurm_ft.launch.max_restart: unknown setting"),
        ("slurm_ft:\n  bogus: 1\n", "slurm_ft.bogus: unknown setting"),
        ("slurm_ft:\n  launch: 3\n", "slurm_ft.launch: expected a mapping, got 3"),
        ("slurm_ft:\n  applog:\n    tee: maybe\n", "slurm_ft.applog.tee: expected bool, got 'maybe'"),
        (
            "slurm_ft:\n  health:\n    nic_mode: sometimes\n",
            "slurm_ft.health.nic_mode: expected one of absolute, transition, got 'sometimes'",
        ),
        ("launch:\n  max_restarts: 3\n", "expected a top-level 'slurm_ft:' mapping"),
        (
            "slurm_ft:\n  launch:\n    max_restarts: -1\n",
            "slurm_ft.launch.max_restarts: must be >= 0, got -1",
        ),
        (
            "slurm_ft:\n  launch:\n    rdzv_port_range: 10-5\n",
            "slurm_ft.launch.rdzv_port_range: expected LOW-HIGH within 1024-65535, got '10-5'",
        ),
        ("slurm_ft:\n  launch: [1, 2\n", "not valid YAML"),
        (
            "slurm_ft:\n  hang:\n    safety_factor: 0.5\n",
            "slurm_ft.hang.safety_factor: must be >= 1 (0 is fixed timeouts), got 0.5",
        ),
        ("slurm_ft:\n  hang:\n    learned_floor: -1\n", "slurm_ft.hang.learned_floor: must be >= 0, got -1"),
    ],
)
def test_bad_files_name_the_key_path(tmp_path, yaml_text, message):
    with pytest.raises(ConfigError) as err:
        config.load({}, write(tmp_path, yaml_text))
    assert message in str(err.value)


def test_bad_environment_names_the_variable():
    with pytest.raises(ConfigError, match="SLURM_FT_LAUNCH_MAX_RESTART: unknown setting"):
        config.load({"SLURM_FT_LAUNCH_MAX_RESTART": "3"})
    with pytest.raises(
        ConfigError, match=r"^environment variable SLURM_FT_LAUNCH_JOIN_TIMEOUT: expected number, got 'soon'$"
    ):
        config.load({"SLURM_FT_LAUNCH_JOIN_TIMEOUT": "soon"})


def test_unreadable_config_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        config.load({}, str(tmp_path / "missing.yaml"))


def test_empty_file_is_all_defaults(tmp_path):
    assert config.load({}, write(tmp_path, "")) == config.Settings()


def test_every_setting_is_described_with_env_name_and_default():
    rows = config.describe_keys()
    keys = {r[0] for r in rows}
    assert "slurm_ft.launch.max_restarts" in keys
    assert ("slurm_ft.state_dir", "SLURM_FT_STATE_DIR", "None") in rows
    assert all(env.startswith("SLURM_FT_") for _, env, _ in rows)
