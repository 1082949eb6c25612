"""NVIDIA ft_launcher's option table: each option it documents (:data:`FT_OPTIONS`) with
what it does here (an alias of a slurm-ft setting, a hang setting, accepted without
effect, or not supported) and its applier (:mod:`slurm_ft.compat.ftvalues`). The docs'
compatibility table (:mod:`slurm_ft.compat.table`) and the translation
(:mod:`slurm_ft.compat.ftlauncher`) read it."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from slurm_ft.compat.ftvalues import (
    Apply,
    base_logfile,
    boolean,
    config_file,
    dist_storage,
    hang_setting,
    health_interval,
    ignore,
    integer,
    log_server,
    nic_check,
    no_progress_cycles,
    number,
    off_only,
    restart_policy,
    section_timeouts,
    sets,
    signal_value,
    storage_paths,
    tolerance_mb,
)


class Kind(enum.Enum):
    ALIAS = "alias"  # sets slurm-ft settings
    HANG = "hang"  # sets hang.* settings (the rank monitor)
    CONFIG = "config"  # --ft-cfg-path
    NO_EFFECT = "no effect"  # accepted: asks for what happens anyway
    LATER = "not supported yet"
    UNSUPPORTED = "not supported"


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


UNSUPPORTED: tuple[tuple[str, str], ...] = (
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
    FtOption("cfg-path", Kind.CONFIG, "reads the YAML file's `fault_tolerance:` section", False, config_file),
    FtOption("per-cycle-applog-prefix", Kind.ALIAS, "`--applog-prefix`", True, sets("applog.prefix")),
    FtOption("nvrx-logfile", Kind.ALIAS, "`--launcher-log`", True, sets("applog.launcher_log")),
    FtOption("base-logfile", Kind.ALIAS, "`--launcher-log` and `--applog-prefix`", True, base_logfile),
    FtOption(
        "checkpoint-iteration-file",
        Kind.ALIAS,
        "`--checkpoint-iteration-file`",
        True,
        sets("progress.checkpoint_iteration_file"),
    ),
    FtOption(
        "max-no-progress-cycles",
        Kind.ALIAS,
        "`--max-no-progress-cycles` (0 or -1: off)",
        True,
        no_progress_cycles,
    ),
    FtOption(
        "max-no-progress-restarts",
        Kind.ALIAS,
        "`--max-no-progress-cycles` (older name)",
        True,
        no_progress_cycles,
    ),
    FtOption(
        "min-progress-iterations",
        Kind.ALIAS,
        "`--min-progress-iterations`",
        True,
        sets("progress.min_progress_iterations", integer),
    ),
    FtOption(
        "gpu-memory-reclaim-timeout",
        Kind.ALIAS,
        "`slurm_ft.launch.gpu_release_timeout`",
        True,
        sets("launch.gpu_release_timeout", number),
    ),
    FtOption(
        "gpu-memory-tolerance-mb",
        Kind.ALIAS,
        "`slurm_ft.launch.gpu_release_tolerance_mib`",
        True,
        tolerance_mb,
    ),
    FtOption(
        "enable-nic-healthcheck",
        Kind.ALIAS,
        "true: the `nic` health check in transition mode; false: without it",
        True,
        nic_check,
    ),
    FtOption(
        "enable-nic-monitor",
        Kind.ALIAS,
        "`--nic-monitor` (NIC links watched while workers run)",
        True,
        sets("health.nic_monitor", boolean),
    ),
    FtOption(
        "node-health-check-interval",
        Kind.ALIAS,
        "`--health-check-interval` (the `gpu` and `storage` checks every S s while workers train;"
        " 0 or none: off)",
        True,
        health_interval,
    ),
    FtOption(
        "storage-health-check-path",
        Kind.ALIAS,
        "`--paths` (and the `storage` health check)",
        False,
        storage_paths,
    ),
    FtOption(
        "storage-healthcheck-path",
        Kind.ALIAS,
        "`--paths` (and the `storage` health check)",
        True,
        storage_paths,
    ),
    FtOption(
        "enable-dist-storage-healthcheck",
        Kind.ALIAS,
        "true: the `storage` health check with mount discovery; false: no mount discovery",
        True,
        dist_storage,
    ),
    FtOption(
        "safety-factor",
        Kind.HANG,
        "`slurm_ft.hang.safety_factor` (learned hang timeouts: F x the longest gap seen; default 7)",
        True,
        hang_setting("hang.safety_factor"),
    ),
    FtOption(
        "rank-heartbeat-timeout",
        Kind.HANG,
        "`slurm_ft.hang.rank_heartbeat_timeout`",
        True,
        hang_setting("hang.rank_heartbeat_timeout"),
    ),
    FtOption(
        "initial-rank-heartbeat-timeout",
        Kind.HANG,
        "`slurm_ft.hang.rank_initial_heartbeat_timeout`",
        True,
        hang_setting("hang.rank_initial_heartbeat_timeout"),
    ),
    FtOption(
        "rank-section-timeouts",
        Kind.HANG,
        "`slurm_ft.hang.rank_section_timeouts` (`name:S,...` becomes `name=S,...`)",
        True,
        section_timeouts,
    ),
    FtOption(
        "rank-out-of-section-timeout",
        Kind.HANG,
        "`slurm_ft.hang.rank_out_of_section_timeout`",
        True,
        hang_setting("hang.rank_out_of_section_timeout"),
    ),
    FtOption(
        "rank-termination-signal",
        Kind.HANG,
        "`slurm_ft.hang.rank_termination_signal`",
        True,
        hang_setting("hang.rank_termination_signal", signal_value),
    ),
    FtOption(
        "segment",
        Kind.ALIAS,
        "`--segment` (with `--spare-nodes K`: nodes are active or spare in whole segments)",
        True,
        sets("launch.segment", integer),
    ),
    FtOption(
        "restart-policy",
        Kind.NO_EFFECT,
        "`any-failed` is what happens; `min-healthy` is refused",
        True,
        restart_policy,
    ),
    FtOption(
        "enable-log-server",
        Kind.NO_EFFECT,
        "false is what happens; true is refused (see `--applog-per-node`)",
        False,
        log_server,
    ),
    FtOption(
        "ignore-missing-cfg",
        Kind.NO_EFFECT,
        "defaults apply without a config file anyway",
        False,
        ignore,
        takes_value=False,
    ),
    *(FtOption(name, Kind.UNSUPPORTED, why, True, off_only) for name, why in UNSUPPORTED),
)

BY_NAME: dict[str, FtOption] = {o.name: o for o in FT_OPTIONS}
BY_YAML: dict[str, FtOption] = {o.yaml_key: o for o in FT_OPTIONS if o.yaml}
