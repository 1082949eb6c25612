"""NVIDIA ft_launcher's ``--ft-*`` options and YAML ``fault_tolerance:`` section -> settings.

Each option ft_launcher documents is in :data:`FT_OPTIONS` with what it does here: an
alias of a slurm-ft setting, a hang setting (``hang.*``, in effect once the settings
have those keys), accepted without effect because it asks for nothing slurm-ft does
not do anyway, or not supported (one line, exit 2). An ``--ft-*`` option not in the
table is not supported either. An unsupported option set to an "off" value
(``none``, ``false``, ``0``) asks for nothing and is accepted.

Spellings: ft_launcher accepts ``--ft-rank-heartbeat-timeout``,
``--ft-rank_heartbeat_timeout``, ``--ft_rank_heartbeat_timeout`` and the older
``--ft-param-rank_heartbeat_timeout``; all of them are the same option here.
Precedence as in ft_launcher: the YAML file, then the ``--ft-*`` options.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_ft.compat.errors import CompatError

YAML_SECTION = "fault_tolerance"
OFF_VALUES = ("", "none", "null", "false", "0", "no", "off")


class Kind(enum.Enum):
    ALIAS = "alias"  # sets slurm-ft settings
    HANG = "hang"  # sets hang.* settings (the rank monitor)
    CONFIG = "config"  # --ft-cfg-path
    NO_EFFECT = "no effect"  # accepted: asks for what happens anyway
    LATER = "not supported yet"
    UNSUPPORTED = "not supported"


Value = str | int | float | bool | dict[str, Any] | None


@dataclass
class Translation:
    """Settings overrides (dotted keys) plus health-check edits, from --ft-* and YAML."""

    overrides: dict[str, Any] = field(default_factory=dict)
    checks_on: set[str] = field(default_factory=set)
    checks_off: set[str] = field(default_factory=set)
    config_file: str | None = None
    notes: list[str] = field(default_factory=list)


Apply = Callable[[str, Value, Translation], None]


@dataclass(frozen=True)
class FtOption:
    """One of ft_launcher's ``--ft-*`` options and what it becomes here."""

    name: str  # canonical: "rank-heartbeat-timeout" (the option is --ft-<name>)
    kind: Kind
    meaning: str  # what it does here, for the README table and messages
    yaml: bool = True  # also a key of the YAML section (with underscores)
    apply: Apply | None = None
    takes_value: bool = True

    @property
    def flag(self) -> str:
        return f"--ft-{self.name}"

    @property
    def yaml_key(self) -> str:
        return self.name.replace("-", "_")


def canonical(option: str) -> str:
    """``--ft_param-rank_heartbeat_timeout`` -> ``rank-heartbeat-timeout``."""
    name = option.lstrip("-").replace("_", "-")
    name = name[3:] if name.startswith("ft-") else name
    return name[6:] if name.startswith("param-") else name


# -- value converters (messages name the option as written) ---------------------------


def _text(what: str, v: Value) -> str:
    if isinstance(v, dict | bool) or v is None:
        raise CompatError(f"{what}: expected a value, got {v!r}")
    return str(v).strip()


def _number(what: str, v: Value) -> float:
    try:
        return float(_text(what, v))
    except ValueError:
        raise CompatError(f"{what}: expected a number of seconds, got {v!r}") from None


def _opt_number(what: str, v: Value) -> float | None:
    if v is None or (isinstance(v, str) and v.strip().lower() in ("", "none", "null")):
        return None
    return _number(what, v)


def _integer(what: str, v: Value) -> int:
    text = _text(what, v)
    if not re.fullmatch(r"-?[0-9]+", text):
        raise CompatError(f"{what}: expected an integer, got {v!r}")
    return int(text)


def _boolean(what: str, v: Value) -> bool:
    if isinstance(v, bool):
        return v
    text = _text(what, v).lower()
    if text in ("1", "true", "yes"):
        return True
    if text in ("0", "false", "no"):
        return False
    raise CompatError(f"{what}: expected true or false, got {v!r}")


def _is_off(v: Value) -> bool:
    if v is None or v is False:
        return True
    if isinstance(v, dict):
        return not v
    return str(v).strip().lower() in OFF_VALUES


# -- appliers ------------------------------------------------------------------------


def _set(key: str, convert: Callable[[str, Value], Any] = _text) -> Apply:
    def apply(what: str, v: Value, t: Translation) -> None:
        t.overrides[key] = convert(what, v)

    return apply


def _no_progress_cycles(what: str, v: Value, t: Translation) -> None:
    # ft_launcher: 0 or -1 disables the progress guard; here 0 does.
    t.overrides["progress.max_no_progress_cycles"] = max(0, _integer(what, v))


def _tolerance_mb(what: str, v: Value, t: Translation) -> None:
    t.overrides["launch.gpu_release_tolerance_mib"] = round(_number(what, v))


def _nic_check(what: str, v: Value, t: Translation) -> None:
    if _boolean(what, v):
        t.checks_on.add("nic")
        t.checks_off.discard("nic")
        # ft_launcher fails a port that went from ACTIVE to not ACTIVE: the transition mode.
        t.overrides["health.nic_mode"] = "transition"
    else:
        t.checks_off.add("nic")
        t.checks_on.discard("nic")


def _storage_paths(what: str, v: Value, t: Translation) -> None:
    paths = [p.strip() for p in _text(what, v).split(",") if p.strip()]
    bad = [p for p in paths if not p.startswith("/")]
    if bad:
        raise CompatError(f"{what}: paths must be absolute, got {bad[0]!r}")
    t.overrides["health.paths"] = paths
    if paths:
        t.checks_on.add("storage")
        t.checks_off.discard("storage")


def _dist_storage(what: str, v: Value, t: Translation) -> None:
    on = _boolean(what, v)
    t.overrides["health.discover_mounts"] = on
    if on:
        t.checks_on.add("storage")
        t.checks_off.discard("storage")


def _base_logfile(what: str, v: Value, t: Translation) -> None:
    path = _text(what, v)
    t.overrides["applog.launcher_log"] = path
    t.overrides["applog.prefix"] = path


def _health_interval(what: str, v: Value, t: Translation) -> None:
    # ft_launcher's off values (none, 0) are slurm-ft's 0: checks before each join only.
    seconds = 0.0 if _is_off(v) else _number(what, v)
    if seconds < 0:
        raise CompatError(f"{what}: expected a number of seconds >= 0, got {v!r}")
    t.overrides["health.check_interval"] = seconds


def _restart_policy(what: str, v: Value, t: Translation) -> None:
    if _text(what, v) != "any-failed":
        raise CompatError(
            f"{what} {v}: not supported; every failure anywhere restarts all workers (any-failed)"
        )


def _log_server(what: str, v: Value, t: Translation) -> None:
    if _boolean(what, v):
        raise CompatError(
            f"{what} {v}: not supported; each node appends to the cycle log itself "
            "(--applog-per-node for file systems without atomic append)"
        )


def _section_timeouts(what: str, v: Value, t: Translation) -> None:
    """``setup:600,step:180`` (or a YAML mapping) -> hang's text form ``setup=600,step=180``;
    a section without a timeout (none) is not monitored, so it is left out."""
    pairs: list[tuple[str, Value]]
    if isinstance(v, dict):
        pairs = list(v.items())
    else:
        pairs = []
        for item in (p.strip() for p in _text(what, v).split(",")):
            if not item:
                continue
            name, sep, seconds_text = item.partition(":")
            if not sep or not name.strip():
                raise CompatError(f"{what} {v!r}: expected NAME:SECONDS pairs separated by commas")
            pairs.append((name.strip(), seconds_text))
    parts = []
    for name, value in pairs:
        seconds = _opt_number(f"{what} {name}", value)
        if seconds is not None:
            parts.append(f"{name}={seconds:g}")
    t.overrides["hang.rank_section_timeouts"] = ",".join(parts)


def _hang(key: str, convert: Callable[[str, Value], Any] = _opt_number) -> Apply:
    return _set(key, convert)


def _signal(what: str, v: Value) -> str:
    text = _text(what, v)
    return text if not text.isdigit() else str(int(text))


def _config(what: str, v: Value, t: Translation) -> None:
    t.config_file = _text(what, v)


def _ignore(what: str, v: Value, t: Translation) -> None:
    return None


def _off_only(what: str, v: Value, t: Translation) -> None:
    """Options whose 'on' value asks for a feature slurm-ft does not have."""
    if not _is_off(v):
        raise CompatError(f"{what}: not supported by slurm-ft-launch")


_UNSUPPORTED: tuple[tuple[str, str], ...] = (
    ("workload-check-interval", "rank monitor poll interval; hang detection has its own"),
    ("node-health-check-endpoint", "no external node health service"),
    ("log-level", "launcher events are always logged"),
    ("restart-check-interval", "no layered in-process restart"),
    ("pci-topo-file", "no GPU/NIC topology file"),
    ("link-down-path-template", "NIC state is read from sysfs (health.sysfs_root)"),
    ("link-state-path-template", "NIC state is read from sysfs (health.sysfs_root)"),
    ("skip-section-response", "no rank monitor IPC"),
    ("rdzv-impl", "slurm-ft has one rendezvous"),
    ("gpu-memory-poll-interval", "fixed poll interval"),
    ("check-remaining-processes", "leftover worker processes are always killed"),
    (
        "numa-bind-strict",
        "`--numa-binding node` binds each worker's CPUs and makes its memory prefer its GPU's "
        "NUMA node; a strict memory binding (membind) is not offered",
    ),
    ("install-exception-hook", "use torch's @record for tracebacks"),
    ("num-warmup-iterations", "no iteration-based monitoring"),
    ("progress-update-interval", "progress is read from the checkpoint iteration file"),
    ("cycle-info-dir", "cycle records are in the state dir (SLURM_FT_CYCLE_INFO)"),
    ("cycle-info-job-id", "cycle records are in the state dir"),
    ("segment-health-check-dir", "no segment health artifacts"),
    ("attribution-endpoint", "no attribution service"),
    ("attribution-startup-timeout", "no attribution service"),
    ("attribution-stop-action", "no attribution service"),
    ("attribution-llm-api-key-file", "no attribution service"),
    ("attribution-llm-base-url", "no attribution service"),
    ("attribution-llm-model", "no attribution service"),
    ("attribution-analysis-backend", "no attribution service"),
    ("attribution-compute-timeout", "no attribution service"),
    ("attribution-log-level", "no attribution service"),
    ("attribution-export-url", "no attribution service"),
    ("attrsvc-host", "no attribution service"),
    ("attrsvc-port", "no attribution service"),
    ("log-server-port", "no gRPC log server"),
    ("log-aggregator-count", "no gRPC log server"),
    ("log-leaf-max-queue-chunks", "no gRPC log server"),
    ("log-server-log-prefix", "no gRPC log server"),
    ("log-server-graceful-shutdown-timeout", "no gRPC log server"),
)

FT_OPTIONS: tuple[FtOption, ...] = (
    FtOption("cfg-path", Kind.CONFIG, "reads the YAML file's `fault_tolerance:` section", False, _config),
    FtOption("per-cycle-applog-prefix", Kind.ALIAS, "`--applog-prefix`", True, _set("applog.prefix")),
    FtOption("nvrx-logfile", Kind.ALIAS, "`--launcher-log`", True, _set("applog.launcher_log")),
    FtOption("base-logfile", Kind.ALIAS, "`--launcher-log` and `--applog-prefix`", True, _base_logfile),
    FtOption(
        "checkpoint-iteration-file",
        Kind.ALIAS,
        "`--checkpoint-iteration-file`",
        True,
        _set("progress.checkpoint_iteration_file"),
    ),
    FtOption(
        "max-no-progress-cycles",
        Kind.ALIAS,
        "`--max-no-progress-cycles` (0 or -1: off)",
        True,
        _no_progress_cycles,
    ),
    FtOption(
        "max-no-progress-restarts",
        Kind.ALIAS,
        "`--max-no-progress-cycles` (older name)",
        True,
        _no_progress_cycles,
    ),
    FtOption(
        "min-progress-iterations",
        Kind.ALIAS,
        "`--min-progress-iterations`",
        True,
        _set("progress.min_progress_iterations", _integer),
    ),
    FtOption(
        "gpu-memory-reclaim-timeout",
        Kind.ALIAS,
        "`slurm_ft.launch.gpu_release_timeout`",
        True,
        _set("launch.gpu_release_timeout", _number),
    ),
    FtOption(
        "gpu-memory-tolerance-mb",
        Kind.ALIAS,
        "`slurm_ft.launch.gpu_release_tolerance_mib`",
        True,
        _tolerance_mb,
    ),
    FtOption(
        "enable-nic-healthcheck",
        Kind.ALIAS,
        "true: the `nic` health check in transition mode; false: without it",
        True,
        _nic_check,
    ),
    FtOption(
        "enable-nic-monitor",
        Kind.ALIAS,
        "`--nic-monitor` (NIC links watched while workers run)",
        True,
        _set("health.nic_monitor", _boolean),
    ),
    FtOption(
        "node-health-check-interval",
        Kind.ALIAS,
        "`--health-check-interval` (the `gpu` and `storage` checks every S s while workers train;"
        " 0 or none: off)",
        True,
        _health_interval,
    ),
    FtOption(
        "storage-health-check-path",
        Kind.ALIAS,
        "`--paths` (and the `storage` health check)",
        False,
        _storage_paths,
    ),
    FtOption(
        "storage-healthcheck-path",
        Kind.ALIAS,
        "`--paths` (and the `storage` health check)",
        True,
        _storage_paths,
    ),
    FtOption(
        "enable-dist-storage-healthcheck",
        Kind.ALIAS,
        "true: the `storage` health check with mount discovery; false: no mount discovery",
        True,
        _dist_storage,
    ),
    FtOption(
        "safety-factor",
        Kind.HANG,
        "`slurm_ft.hang.safety_factor` (learned hang timeouts: F x the longest gap seen; default 7)",
        True,
        _hang("hang.safety_factor"),
    ),
    FtOption(
        "rank-heartbeat-timeout",
        Kind.HANG,
        "`slurm_ft.hang.rank_heartbeat_timeout`",
        True,
        _hang("hang.rank_heartbeat_timeout"),
    ),
    FtOption(
        "initial-rank-heartbeat-timeout",
        Kind.HANG,
        "`slurm_ft.hang.rank_initial_heartbeat_timeout`",
        True,
        _hang("hang.rank_initial_heartbeat_timeout"),
    ),
    FtOption(
        "rank-section-timeouts",
        Kind.HANG,
        "`slurm_ft.hang.rank_section_timeouts` (`name:S,...` becomes `name=S,...`)",
        True,
        _section_timeouts,
    ),
    FtOption(
        "rank-out-of-section-timeout",
        Kind.HANG,
        "`slurm_ft.hang.rank_out_of_section_timeout`",
        True,
        _hang("hang.rank_out_of_section_timeout"),
    ),
    FtOption(
        "rank-termination-signal",
        Kind.HANG,
        "`slurm_ft.hang.rank_termination_signal`",
        True,
        _hang("hang.rank_termination_signal", _signal),
    ),
    FtOption(
        "segment",
        Kind.ALIAS,
        "`--segment` (with `--spare-nodes K`: nodes are active or spare in whole segments)",
        True,
        _set("launch.segment", _integer),
    ),
    FtOption(
        "restart-policy",
        Kind.NO_EFFECT,
        "`any-failed` is what happens; `min-healthy` is refused",
        True,
        _restart_policy,
    ),
    FtOption(
        "enable-log-server",
        Kind.NO_EFFECT,
        "false is what happens; true is refused (see `--applog-per-node`)",
        False,
        _log_server,
    ),
    FtOption(
        "ignore-missing-cfg",
        Kind.NO_EFFECT,
        "defaults apply without a config file anyway",
        False,
        _ignore,
        takes_value=False,
    ),
    *(FtOption(name, Kind.UNSUPPORTED, why, True, _off_only) for name, why in _UNSUPPORTED),
)

BY_NAME: dict[str, FtOption] = {o.name: o for o in FT_OPTIONS}
BY_YAML: dict[str, FtOption] = {o.yaml_key: o for o in FT_OPTIONS if o.yaml}


def takes_value(option: str) -> bool:
    known = BY_NAME.get(canonical(option))
    return known.takes_value if known is not None else True


def _apply(opt: FtOption, what: str, value: Value, t: Translation) -> None:
    if opt.kind is Kind.LATER and not _is_off(value):
        raise CompatError(f"{what}: not supported yet ({opt.meaning})")
    if opt.kind is Kind.UNSUPPORTED and not _is_off(value):
        raise CompatError(f"{what}: not supported by slurm-ft-launch ({opt.meaning})")
    if opt.apply is not None:
        opt.apply(what, value, t)


def find_section(doc: Any) -> dict[str, Any] | None:
    """The ``fault_tolerance`` mapping, at the top or nested in any mapping (as ft_launcher
    looks for it); breadth first, so the shallowest wins."""
    queue = [doc]
    while queue:
        node = queue.pop(0)
        if isinstance(node, dict):
            section = node.get(YAML_SECTION)
            if isinstance(section, dict):
                return section
            queue.extend(v for v in node.values() if isinstance(v, dict))
    return None


def translate(
    options: Sequence[tuple[str, str | None]],
    yaml_section: Mapping[str, Any] | None,
    source: str = "fault_tolerance",
) -> Translation:
    """``options``: (option as written, value) in command-line order; ``yaml_section``:
    the ``fault_tolerance`` mapping of ``--ft-cfg-path``, applied first."""
    t = Translation()
    for key, value in (yaml_section or {}).items():
        opt = BY_YAML.get(str(key))
        what = f"{source}.{key}"
        if opt is None:
            raise CompatError(f"{what}: not an ft_launcher setting slurm-ft-launch knows")
        _apply(opt, what, value, t)
    for written, value in options:
        opt = BY_NAME.get(canonical(written))
        if opt is None:
            raise CompatError(
                f"{written}: not supported by slurm-ft-launch (no such ft_launcher option here)"
            )
        if opt.kind is Kind.CONFIG:
            continue
        if opt.takes_value and value is None:
            raise CompatError(f"{written}: expected a value")
        _apply(opt, written, value, t)
    return t


def config_path(options: Sequence[tuple[str, str | None]]) -> str | None:
    """The last ``--ft-cfg-path`` given, if any."""
    paths = [v for w, v in options if canonical(w) == "cfg-path"]
    if paths and paths[-1] is None:
        raise CompatError("--ft-cfg-path: expected a file")
    return paths[-1] if paths else None


def merge_checks(checks: Sequence[str], t: Translation) -> list[str]:
    """``health.checks`` after the ft options' edits (order kept, additions at the end)."""
    kept = [c for c in checks if c not in t.checks_off]
    return kept + sorted(c for c in t.checks_on if c not in kept)
