"""slurm-ft-healthcheck in the reference: its synopsis and exit codes, the settings its
options set and their fuller meanings."""

from __future__ import annotations

from slurm_ft.cli.refdocs.command import Command

COMMAND = Command(
    "slurm-ft-healthcheck",
    "healthcheck",
    "node health check: NIC link state, storage paths and mounts, GPUs, in bounded time",
    ("[options]",),
    (
        ("0", "healthy: no check failed (warnings and skips allowed)"),
        ("94", "unhealthy: at least one check failed"),
        (
            "2",
            "bad input: a relative path, an unknown check name, a bad glob, an unreadable or "
            "invalid config, invalid `SLURM_*` variables; one line on stderr",
        ),
    ),
)

# The setting each option sets (a unit test checks these against the command's code).
SETTINGS: dict[str, str] = {
    "--health-checks": "health.checks",
    "--deadline": "health.deadline",
    "--nics": "health.nics",
    "--nic-mode": "health.nic_mode",
    "--sysfs-root": "health.sysfs_root",
    "--proc-root": "health.proc_root",
    "--paths": "health.paths",
    "--write-probe": "health.write_probe",
    "--discover-mounts": "health.discover_mounts",
    "--no-discover-mounts": "health.discover_mounts",
    "--gpus": "health.gpus",
    "--gpu-foreign-memory-tolerance-mib": "health.gpu_foreign_memory_tolerance_mib",
    "--drain": "health.drain",
    "--scontrol": "health.scontrol",
}

# A fuller meaning than the one-line --help, where a reader needs it (markdown).
DETAILS: dict[str, str] = {
    "--health-checks": (
        "subset of `nic,storage,gpu` (default all three); the same option name as the "
        "launcher's (`--checks` is the older spelling)"
    ),
    "--deadline": "overall time limit in seconds, counted from the command's start (default 10)",
    "--nics": "NIC names and globs (`mlx5_*`, `ib0`, `eth*`, `mlx5_[0-3]`); default: all RDMA devices",
    "--nic-mode": (
        "`absolute` (default: a standalone check has no earlier look to compare a port "
        "with) or `transition` (compared with the launcher's start-time snapshot; the "
        "launcher's default)"
    ),
    "--sysfs-root": "where sysfs is read (default `/sys`; tests point it at a fixture tree)",
    "--proc-root": "where procfs is read (default `/proc`)",
    "--paths": "absolute paths that must answer; `%n` is replaced by the Slurm node name",
    "--write-probe": "also create, fsync and remove a file in each path",
    "--discover-mounts": "probe the network mounts found in mountinfo (default on)",
    "--no-discover-mounts": "do not probe discovered mounts",
    "--gpus": "GPUs expected (default: the setting, else `SLURM_GPUS_ON_NODE`)",
    "--gpu-foreign-memory-tolerance-mib": "GPU memory other processes may hold (default 1024)",
    "--json": (
        "one JSON object: `node`, `healthy`, `duration_s`, `first_failure`, `counts`, "
        "`results[]` (`name`, `status`, `detail`, `duration_s`, `data`)"
    ),
    "--quiet": (
        "print only the `FAIL` lines (nothing when healthy); as for the launcher, `--quiet` "
        "keeps only what went wrong on the console"
    ),
    "--prom-file": "write node-exporter textfile metrics, atomically",
    "--drain": "drain this node when unhealthy; resume it on a healthy pass if slurm-ft drained it",
    "--resume": "on a healthy pass, resume this node if slurm-ft drained it",
    "--node": "Slurm node name (default `$SLURMD_NODENAME`, else the short host name)",
    "--scontrol": (
        "absolute path of scontrol (default: the first of /usr/bin, /usr/local/bin, /opt/slurm/bin)"
    ),
    "--config": (
        "YAML settings (default `$SLURM_FT_CONFIG`, else `/etc/slurm-ft/healthcheck.yaml` if it exists)"
    ),
}
