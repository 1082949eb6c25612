"""Range and syntax checks that a type alone cannot express, run on every settings value
that a layer made (:func:`slurm_ft.config.coerce.apply`)."""

from __future__ import annotations

from slurm_ft.config.sections import (
    YAML_ROOT,
    ConfigError,
    HangSettings,
    LaunchSettings,
    ProgressSettings,
    Settings,
)
from slurm_ft.settingsyntax import FILE as PROGRESS_FILE
from slurm_ft.settingsyntax import (
    SourceError,
    StdSpecError,
    check_applog_prefix,
    parse_persist_hook,
    parse_port_range,
    parse_preload,
    parse_progress_source,
    parse_section_timeouts,
    parse_signals,
    parse_snapshot_memory,
    parse_std,
)


def validate(settings: Settings) -> None:
    """Range checks that a type alone cannot express."""
    _validate_hang(settings.hang)
    launch = settings.launch
    if launch.max_restarts < 0:
        raise ConfigError(f"{YAML_ROOT}.launch.max_restarts: must be >= 0, got {launch.max_restarts}")
    if launch.failure_stop_grace < 0:
        raise ConfigError(
            f"{YAML_ROOT}.launch.failure_stop_grace: must be >= 0, got {launch.failure_stop_grace}"
        )
    for key in (
        "monitor_interval",
        "workers_stop_timeout",
        "kill_timeout",
        "term_timeout",
        "write_timeout",
        "join_timeout",
        "heartbeat_interval",
        "heartbeat_timeout",
    ):
        if getattr(launch, key) <= 0:
            raise ConfigError(f"{YAML_ROOT}.launch.{key}: must be > 0, got {getattr(launch, key)}")
    if launch.spare_nodes < 0:
        raise ConfigError(f"{YAML_ROOT}.launch.spare_nodes: must be >= 0, got {launch.spare_nodes}")
    for key in ("segment", "suspect_after"):
        if getattr(launch, key) < 1:
            raise ConfigError(f"{YAML_ROOT}.launch.{key}: must be >= 1, got {getattr(launch, key)}")
    try:
        parse_port_range(launch.rdzv_port_range)
    except ValueError as exc:
        raise ConfigError(f"{YAML_ROOT}.launch.rdzv_port_range: {exc}") from None
    if launch.rdzv_port is not None and not 1 <= launch.rdzv_port <= 65535:
        raise ConfigError(f"{YAML_ROOT}.launch.rdzv_port: must be 1-65535, got {launch.rdzv_port}")
    try:
        parse_signals(launch.forward_signals)
    except ValueError as exc:
        raise ConfigError(f"{YAML_ROOT}.launch.forward_signals: {exc}") from None
    if settings.applog.line_cap_bytes < 64:
        raise ConfigError(
            f"{YAML_ROOT}.applog.line_cap_bytes: must be >= 64, got {settings.applog.line_cap_bytes}"
        )
    applog = settings.applog
    if applog.prefix is not None:
        try:
            check_applog_prefix(applog.prefix)
        except ValueError as exc:
            raise ConfigError(f"{YAML_ROOT}.applog.prefix: {exc}") from None
    if applog.drain_timeout <= 0:
        raise ConfigError(f"{YAML_ROOT}.applog.drain_timeout: must be > 0, got {applog.drain_timeout}")
    if applog.local_ranks_filter is not None and any(r < 0 for r in applog.local_ranks_filter):
        raise ConfigError(
            f"{YAML_ROOT}.applog.local_ranks_filter: ranks must be >= 0, got {applog.local_ranks_filter}"
        )
    interval = settings.health.nic_monitor_interval
    if interval <= 0:
        raise ConfigError(f"{YAML_ROOT}.health.nic_monitor_interval: must be > 0, got {interval}")
    for key in ("redirects", "tee_streams"):
        if getattr(applog, key) != "0":  # the default needs no parser
            try:
                parse_std(getattr(applog, key), f"{YAML_ROOT}.applog.{key}:")
            except StdSpecError as exc:
                raise ConfigError(str(exc)) from None
    _validate_snapshots(launch)
    try:
        parse_preload(settings.launch.preload)
    except ValueError as exc:
        raise ConfigError(f"{YAML_ROOT}.launch.preload: {exc}") from None
    if not settings.launch.role.strip():
        raise ConfigError(f"{YAML_ROOT}.launch.role: must not be empty")
    if settings.health.deadline <= 0:
        raise ConfigError(f"{YAML_ROOT}.health.deadline: must be > 0, got {settings.health.deadline}")
    every = settings.health.check_interval
    if every < 0:
        raise ConfigError(f"{YAML_ROOT}.health.check_interval: must be >= 0 (0 is off), got {every}")
    _validate_progress(settings.progress)


def _validate_snapshots(launch: LaunchSettings) -> None:
    try:
        parse_snapshot_memory(launch.snapshot_memory)
    except ValueError as exc:
        raise ConfigError(f"{YAML_ROOT}.launch.snapshot_memory: {exc}") from None
    if launch.snapshot_persist_hook is not None:
        try:
            parse_persist_hook(launch.snapshot_persist_hook)
        except ValueError as exc:
            raise ConfigError(f"{YAML_ROOT}.launch.snapshot_persist_hook: {exc}") from None
    if launch.snapshot_persist_timeout <= 0:
        raise ConfigError(
            f"{YAML_ROOT}.launch.snapshot_persist_timeout: must be > 0, got {launch.snapshot_persist_timeout}"
        )
    if launch.snapshot_replicas not in (0, 1):
        raise ConfigError(
            f"{YAML_ROOT}.launch.snapshot_replicas: must be 0 or 1, got {launch.snapshot_replicas}"
        )


def _validate_progress(progress: ProgressSettings) -> None:
    if progress.min_progress_iterations < 1:
        raise ConfigError(
            f"{YAML_ROOT}.progress.min_progress_iterations: must be >= 1, "
            f"got {progress.min_progress_iterations}"
        )
    if progress.read_timeout <= 0:
        raise ConfigError(f"{YAML_ROOT}.progress.read_timeout: must be > 0, got {progress.read_timeout}")
    if progress.pattern is not None and progress.source is None:
        raise ConfigError(f"{YAML_ROOT}.progress.pattern: needs progress.source checkpoint-dir:DIR")
    if progress.source is None:
        return
    try:
        spec = parse_progress_source(progress.source, progress.pattern)
    except SourceError as exc:
        raise ConfigError(f"{YAML_ROOT}.progress.source: {exc}") from None
    if spec.kind == PROGRESS_FILE and progress.min_progress_iterations != 1:
        raise ConfigError(
            f"{YAML_ROOT}.progress.min_progress_iterations: a file: source counts each replacement "
            f"as one step, so it must be 1, got {progress.min_progress_iterations}"
        )


def _validate_hang(hang: HangSettings) -> None:
    for key in (
        "timeout",
        "iteration_timeout",
        "rank_heartbeat_timeout",
        "rank_initial_heartbeat_timeout",
        "rank_out_of_section_timeout",
    ):
        if getattr(hang, key) < 0:
            raise ConfigError(f"{YAML_ROOT}.hang.{key}: must be >= 0 (0 is off), got {getattr(hang, key)}")
    for key in ("learned_floor", "initial_timeout"):
        if getattr(hang, key) < 0:
            raise ConfigError(f"{YAML_ROOT}.hang.{key}: must be >= 0, got {getattr(hang, key)}")
    if hang.safety_factor != 0 and hang.safety_factor < 1:
        raise ConfigError(
            f"{YAML_ROOT}.hang.safety_factor: must be >= 1 (0 is fixed timeouts), got {hang.safety_factor}"
        )
    if hang.stack_dump_timeout <= 0:
        raise ConfigError(f"{YAML_ROOT}.hang.stack_dump_timeout: must be > 0, got {hang.stack_dump_timeout}")
    if hang.rank_section_timeouts:
        try:
            parse_section_timeouts(hang.rank_section_timeouts)
        except ValueError as exc:
            raise ConfigError(f"{YAML_ROOT}.hang.rank_section_timeouts: {exc}") from None
    try:
        parse_signals([hang.rank_termination_signal])
    except ValueError as exc:
        raise ConfigError(f"{YAML_ROOT}.hang.rank_termination_signal: {exc}") from None
