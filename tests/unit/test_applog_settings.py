"""Application-log settings that must be refused up front (exit 2 at the CLI)."""

from __future__ import annotations

import pytest

from slurm_ft import config


@pytest.mark.parametrize(
    ("cli", "message"),
    [
        (
            {"applog.prefix": "logs/job.log"},
            "slurm_ft.applog.prefix: must be an absolute path, got 'logs/job.log'",
        ),
        ({"applog.drain_timeout": "0"}, "slurm_ft.applog.drain_timeout: must be > 0, got 0.0"),
        ({"applog.local_ranks_filter": "0,-1"}, "slurm_ft.applog.local_ranks_filter: ranks must be >= 0"),
        ({"applog.line_cap_bytes": "10"}, "slurm_ft.applog.line_cap_bytes: must be >= 64, got 10"),
    ],
)
def test_bad_applog_settings(cli: dict[str, str], message: str) -> None:
    with pytest.raises(config.ConfigError) as info:
        config.load({}, None, cli)
    assert str(info.value).startswith(message)


def test_relative_prefix_from_the_environment_is_refused_too() -> None:
    with pytest.raises(
        config.ConfigError, match=r"^environment variable SLURM_FT_APPLOG_PREFIX: must be an absolute"
    ):
        config.load({"SLURM_FT_APPLOG_PREFIX": "job.log"})


def test_good_applog_settings() -> None:
    applog = config.load(
        {}, None, {"applog.prefix": "/abs/job.log", "applog.local_ranks_filter": "0,3"}
    ).applog
    assert (applog.prefix, applog.local_ranks_filter) == ("/abs/job.log", [0, 3])
