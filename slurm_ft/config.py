"""Settings for every command: defaults < YAML file < SLURM_FT_* environment < command line.

One dataclass tree serves all three commands so that a YAML file written for the launcher
also configures the health check it runs and the progress guard a template calls. Values
arrive as strings from the environment and from argparse, and as YAML scalars from the
file; one coercion routine turns all of them into the declared field type, so a typo is
reported the same way whatever layer it came from: with its full key path.

Environment names mirror the YAML path: ``slurm_ft.launch.max_restarts`` is
``SLURM_FT_LAUNCH_MAX_RESTARTS``; top-level keys drop the section (``SLURM_FT_STATE_DIR``).
Variables that do not start with a known section prefix are left alone, because the
launcher itself exports ``SLURM_FT_CYCLE`` and friends to workers.

Unlike the other modules, this one evaluates its annotations when the classes are made
(no ``from __future__ import annotations``): the coercion reads the field types at every
start, and string annotations would have ``typing.get_type_hints`` compile each of them
again (some 70 small compilations, a few ms of every command's start).
"""

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

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

ENV_PREFIX = "SLURM_FT_"
CONFIG_ENV = "SLURM_FT_CONFIG"
YAML_ROOT = "slurm_ft"


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the key path and the value."""


@dataclass
class LaunchSettings:
    """The launcher's ``launch:`` section: restarts, timeouts, rendezvous, placement."""

    nproc_per_node: str = "auto"
    max_restarts: int = 3
    monitor_interval: float = 5.0  # a fallback only: every event wakes the watch at once
    workers_stop_timeout: float = 15.0
    kill_timeout: float = 30.0  # after SIGKILL: a worker still there is stuck in the kernel
    failure_stop_grace: float = 0.2
    term_timeout: float = 25.0
    # A write to a cycle log, the launcher log or the state dir off local disks that has
    # not finished after this long: its file system stopped answering (README).
    write_timeout: float = 10.0
    join_timeout: float = 300.0
    rdzv_port: int | None = None
    rdzv_port_range: str = "20000-29999"
    heartbeat_interval: float = 1.0
    heartbeat_timeout: float = 6.0
    forward_signals: list[str] = field(default_factory=lambda: ["SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2"])
    gpu_release_timeout: float = 30.0
    gpu_release_tolerance_mib: int = 512
    health_before_join: bool = True
    result_linger_timeout: float = 30.0
    numa_binding: Literal["none", "node", "socket", "exclusive"] = "none"
    nic_affinity: bool = False
    # The launcher's own NIC mode (health.nic_mode is the standalone check's): judged
    # against its start-time snapshot, a port down from the start cannot fail every node.
    nic_mode: Literal["absolute", "transition"] = "transition"
    role: str = "default"
    prom_file: str | None = None
    spare_nodes: int = 0
    segment: int = 1
    suspect_after: int = 2
    # Start even outside a job step (an salloc shell, a batch script without srun): the
    # user knows this node is the one to run on. Two launchers on one node stay refused.
    allow_outside_step: bool = False
    # What a standby worker imports while it waits to be the next cycle's worker: auto (the
    # installed packages the script imports), none (no standbys), or module names.
    preload: str = "auto"
    # Snapshots (README "Snapshots"): the bytes the node's launcher lets its workers keep in
    # shared memory ("auto": from the node's memory and /dev/shm; "0": none), where the
    # launchers persist the newest snapshot on the way out, a trainer's own persist hook
    # (module:function) instead, and how long persisting may take.
    snapshot_memory: str = "auto"
    snapshot_persist_dir: str | None = None
    snapshot_persist_hook: str | None = None
    snapshot_persist_timeout: float = 120.0
    # copies of each node's shard snapshots kept in other nodes' memory (0 or 1; #44)
    snapshot_replicas: int = 0


@dataclass
class AppLogSettings:
    """The ``applog:`` section: how the workers' output reaches the cycle file and the console."""

    prefix: str | None = None
    per_node: bool = False
    line_cap_bytes: int = 1024 * 1024
    drain_timeout: float = 5.0
    tee: bool = False
    local_ranks_filter: list[int] | None = None
    launcher_log: str | None = None
    quiet: bool = False
    log_dir: str | None = None
    redirects: str = "0"
    tee_streams: str = "0"


@dataclass
class HealthSettings:
    """The ``health:`` section, shared by the launcher's pre-rendezvous check and
    ``slurm-ft-healthcheck``."""

    checks: list[str] = field(default_factory=lambda: ["nic", "storage", "gpu"])
    deadline: float = 10.0
    nics: list[str] = field(default_factory=list)
    nic_mode: Literal["absolute", "transition"] = "absolute"
    sysfs_root: str = "/sys"
    proc_root: str = "/proc"
    paths: list[str] = field(default_factory=list)
    write_probe: bool = False
    discover_mounts: bool = True
    gpus: int | None = None
    gpu_foreign_memory_tolerance_mib: int = 1024
    drain: bool = False
    scontrol: str | None = None
    nic_monitor: bool = False
    nic_monitor_interval: float = 5.0
    nic_monitor_fatal: bool = False
    # The GPU check and the storage probes again every S s while workers train (the same
    # checks as before each join, bounded by ``deadline``); 0: only before each join.
    check_interval: float = 300.0


@dataclass
class ProgressSettings:
    """The ``progress:`` section: the source the no-progress guard reads and when it stops a job."""

    checkpoint_iteration_file: str | None = None
    max_no_progress_cycles: int = 2
    min_progress_iterations: int = 1
    source: str | None = None
    pattern: str | None = None
    read_timeout: float = 5.0


@dataclass
class HangSettings:
    """Hang detection; a timeout of 0 turns its detector off (see README, "Hangs")."""

    timeout: float = 1800.0  # no worker of the whole job wrote anything for this long
    iteration_timeout: float = 0.0  # the checkpoint iteration did not advance for this long
    # Learned timeouts (README "Hangs"): a hang at safety_factor x the longest gap between
    # the job's signs of life, at least learned_floor, at most timeout; 0: fixed timeouts.
    safety_factor: float = 7.0  # hang.learn.DEFAULT_FACTOR (why 7: its comment)
    learned_floor: float = 20.0
    initial_timeout: float = 600.0  # each cycle's warm-up at most (see hang.learn.warm_until)
    rank_heartbeat_timeout: float = 0.0  # slurm_ft.worker.heartbeat() not called for this long
    rank_initial_heartbeat_timeout: float = 0.0  # ... before a rank's first heartbeat
    rank_section_timeouts: list[str] = field(default_factory=list)  # "name=S" entries
    rank_out_of_section_timeout: float = 0.0  # outside every section, once one was used
    rank_termination_signal: str = "SIGTERM"  # first signal of every failure stop
    stack_dump_timeout: float = 2.0  # how long the stacks of a hung job may take to arrive


@dataclass
class Settings:
    """Every layer merged (defaults, YAML, environment, command line), validated once in ``cli/``."""

    state_dir: str | None = None
    launch: LaunchSettings = field(default_factory=LaunchSettings)
    applog: AppLogSettings = field(default_factory=AppLogSettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    progress: ProgressSettings = field(default_factory=ProgressSettings)
    hang: HangSettings = field(default_factory=HangSettings)


SECTIONS: tuple[str, ...] = ("launch", "applog", "health", "progress", "hang")


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _key_types() -> dict[str, Any]:
    """Every settable dotted key ('launch.max_restarts', 'state_dir') and its type."""
    out: dict[str, Any] = {}
    for name, tp in _field_types(Settings).items():
        if name in SECTIONS:
            for sub, subtp in _field_types(tp).items():
                out[f"{name}.{sub}"] = subtp
        else:
            out[name] = tp
    return out


KEY_TYPES: dict[str, Any] = _key_types()


def _coerce(path: str, tp: Any, value: Any) -> Any:
    """Turn a YAML scalar or a string into ``tp``; raise ConfigError with the key path."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        is_empty = value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null"))
        if is_empty and type(None) in args:
            return None
        return _coerce(path, non_none[0], value)
    if origin is Literal:
        if value in args:
            return value
        raise ConfigError(f"{YAML_ROOT}.{path}: expected one of {', '.join(map(str, args))}, got {value!r}")
    if origin is list:
        (item_tp,) = args
        if isinstance(value, str):
            items: list[Any] = [p.strip() for p in value.split(",") if p.strip()]
        elif isinstance(value, list | tuple):
            items = list(value)
        else:
            raise ConfigError(f"{YAML_ROOT}.{path}: expected a list, got {value!r}")
        return [_coerce(path, item_tp, v) for v in items]
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{YAML_ROOT}.{path}: expected bool, got {value!r}")
    if tp is int:
        if isinstance(value, bool):
            raise ConfigError(f"{YAML_ROOT}.{path}: expected int, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, str):
            try:
                return int(value.strip())
            except ValueError:
                pass
        raise ConfigError(f"{YAML_ROOT}.{path}: expected int, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{YAML_ROOT}.{path}: expected number, got {value!r}")
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise ConfigError(f"{YAML_ROOT}.{path}: expected number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{YAML_ROOT}.{path}: expected string, got {value!r}")
    raise ConfigError(f"{YAML_ROOT}.{path}: unsupported setting type {tp!r}")


def apply(settings: Settings, values: Mapping[str, Any]) -> Settings:
    """Return a copy of ``settings`` with dotted keys replaced (coerced to their types)."""
    new = dataclasses.replace(
        settings,
        **{s: dataclasses.replace(getattr(settings, s)) for s in SECTIONS},
    )
    for key, raw in values.items():
        if key not in KEY_TYPES:
            raise ConfigError(f"{YAML_ROOT}.{key}: unknown setting")
        value = _coerce(key, KEY_TYPES[key], raw)
        if "." in key:
            section, name = key.split(".", 1)
            setattr(getattr(new, section), name, value)
        else:
            setattr(new, key, value)
    validate(new)
    return new


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


def _flatten_yaml(doc: Any, source: str) -> dict[str, Any]:
    if doc is None:
        return {}
    if not isinstance(doc, dict) or set(doc) != {YAML_ROOT}:
        raise ConfigError(f"{source}: expected a top-level '{YAML_ROOT}:' mapping and nothing else")
    root = doc[YAML_ROOT] or {}
    if not isinstance(root, dict):
        raise ConfigError(f"{source}: '{YAML_ROOT}' must be a mapping")
    flat: dict[str, Any] = {}
    for key, value in root.items():
        if key in SECTIONS:
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"{YAML_ROOT}.{key}: expected a mapping, got {value!r}")
            for sub, subvalue in value.items():
                flat[f"{key}.{sub}"] = subvalue
        else:
            flat[str(key)] = value
    return flat


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Dotted keys of a config file; unreadable or malformed files are ConfigErrors."""
    import yaml  # lazily: the health check and progress guard start without a config file

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"config file {path}{where}: not valid YAML") from None
    return _flatten_yaml(doc, str(path))


def env_values(env: Mapping[str, str]) -> dict[str, str]:
    """Dotted keys from SLURM_FT_* variables; unknown names under a known section are errors."""
    out: dict[str, str] = {}
    by_env = {env_name(key): key for key in KEY_TYPES}
    section_prefixes = tuple(f"{ENV_PREFIX}{s.upper()}_" for s in SECTIONS)
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV:
            continue
        if name in by_env:
            out[by_env[name]] = value
        elif name.startswith(section_prefixes):
            section = next(p for p in section_prefixes if name.startswith(p))
            raise ConfigError(
                f"environment variable {name}: unknown setting{did_you_mean(name, by_env, section)}"
            )
    return out


def env_name(key: str) -> str:
    return ENV_PREFIX + key.replace(".", "_").upper()


def load(
    env: Mapping[str, str],
    config_file: str | None = None,
    cli: Mapping[str, Any] | None = None,
    cli_names: Mapping[str, str] | None = None,
) -> Settings:
    """Build the effective settings. ``cli`` holds only options the user actually gave.

    ``config_file`` defaults to ``$SLURM_FT_CONFIG`` when the command line names none.
    A value that cannot be used is reported with where it came from: the file and its key,
    the environment variable, or the option (``cli_names``: setting key -> option).
    """
    settings = Settings()
    path = config_file or env.get(CONFIG_ENV) or None
    if path:
        settings = _layer(settings, read_yaml(path), lambda key: f"config file {path}: {YAML_ROOT}.{key}")
    settings = _layer(settings, env_values(env), lambda key: f"environment variable {env_name(key)}")
    if cli:
        names = cli_names or {}
        settings = _layer(
            settings,
            {k: v for k, v in cli.items() if v is not None},
            lambda key: names.get(key, f"{YAML_ROOT}.{key}"),
        )
    return settings


def _layer(settings: Settings, values: Mapping[str, Any], source: Callable[[str], str]) -> Settings:
    """``apply`` one layer a key at a time, so that an error names the key's source."""
    for key, raw in values.items():
        if key not in KEY_TYPES:
            section = f"{YAML_ROOT}.{key.split('.', 1)[0]}." if "." in key else f"{YAML_ROOT}."
            near = did_you_mean(f"{YAML_ROOT}.{key}", [f"{YAML_ROOT}.{k}" for k in KEY_TYPES], section)
            raise ConfigError(f"{source(key)}: unknown setting{near}")
        try:
            settings = apply(settings, {key: raw})
        except ConfigError as exc:
            own, text, where = f"{YAML_ROOT}.{key}", str(exc), source(key)
            if where != own:
                text = (
                    f"{where}: {text[len(own) + 2 :]}"
                    if text.startswith(own + ": ")
                    else f"{text} (set by {where})"
                )
            raise ConfigError(text) from None
    return settings


def did_you_mean(word: str, known: Iterable[str], prefix: str = "") -> str:
    """`` (did you mean X?)`` for the nearest known spelling, or "" when none is near.
    Only what follows the shared ``prefix`` is compared (``SLURM_FT_HEALTH_COLOUR`` is not
    near ``SLURM_FT_HEALTH_SCONTROL`` for sharing a long start)."""
    import difflib  # only on this error path

    tails = {k[len(prefix) :]: k for k in known if k.startswith(prefix)}
    tail = word[len(prefix) :]
    longer = [t for t in tails if tail and t.startswith(tail)]  # an abbreviation
    close = longer if len(longer) == 1 else difflib.get_close_matches(tail, list(tails), n=1, cutoff=0.75)
    return f" (did you mean {tails[close[0]]}?)" if close else ""


def as_dict(settings: Settings) -> dict[str, Any]:
    return dataclasses.asdict(settings)


def describe_keys() -> list[tuple[str, str, str]]:
    """(yaml key, environment variable, default) for every setting; used for the README."""
    defaults = as_dict(Settings())
    rows = []
    for key in KEY_TYPES:
        value: Any = defaults
        for part in key.split("."):
            value = value[part]
        rows.append((f"{YAML_ROOT}.{key}", env_name(key), repr(value)))
    return rows


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
