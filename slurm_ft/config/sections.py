"""The settings as data: one dataclass per section, every field with its default.

This module evaluates its annotations when the classes are made (no ``from __future__
import annotations``): the coercion (:mod:`slurm_ft.config.coerce`) reads the field types
at every start, and string annotations would have ``typing.get_type_hints`` compile each
of them again (some 70 small compilations, a few ms of every command's start).
"""

from dataclasses import dataclass, field
from typing import Literal

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
