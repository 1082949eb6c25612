"""slurm-ft-launch in the reference: its synopsis and exit codes (its options' meanings
are :data:`slurm_ft.cli.launchdocs.MEANING`, its settings its own option table's)."""

from __future__ import annotations

from slurm_ft.cli.refdocs.command import Command

COMMAND = Command(
    "slurm-ft-launch",
    "launchoptions",
    "per-node launcher with in-job restarts coordinated across all nodes",
    (
        "[options] SCRIPT [args...]",
        "[options] -m|--module MODULE [args...]",
        "[options] --no-python CMD [args...]",
    ),
    (
        ("0", "every worker on every node finished"),
        (
            "1",
            "restart budget spent, a launcher was lost (and no spare was left to replace it) or "
            "left (the outcome's `lost_nodes`), node 0 was lost, or every rendezvous port of "
            "the job was in use",
        ),
        (
            "2",
            "bad input: usage, settings, `SLURM_*` topology, missing script, unwritable state "
            "dir; one line on stderr, nothing started",
        ),
        ("93", "the no-progress guard stopped the job (every launcher)"),
        (
            "94",
            "a node failed its health check before a join or while its workers trained "
            "(`--health-check-interval`; without a spare to take its place), or its workers "
            "outlived SIGKILL "
            "(`launch.kill_timeout`), or its state dir stopped answering ([a file system that "
            "stops answering](../guides/nfs-lustre.md#a-file-system-that-stops-answering)): "
            "**every** launcher "
            "of the attempt exits 94 without waiting for the join timeout, and the outcome "
            "record lists the node(s) in `unhealthy_nodes`",
        ),
        ("128+N", "this launcher received signal N (forwarded to the workers)"),
    ),
)
