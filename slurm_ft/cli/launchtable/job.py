"""The launcher's own options: the job, its restarts and its store, and its logs."""

from __future__ import annotations

from slurm_ft.cli.launchtable.records import OptionGroup, opt

LAUNCHER = OptionGroup(
    "the launcher itself: workers, restarts, timeouts, rendezvous, state",
    (
        opt(
            "--nproc-per-node",
            "--nproc_per_node",
            dest="nproc_per_node",
            metavar="N|auto|gpu|cpu",
            help="workers on this node: N, auto (GPUs from Slurm or NVML, else 1), gpu, cpu",
            setting="launch.nproc_per_node",
        ),
        opt(
            "--max-restarts",
            "--max_restarts",
            dest="max_restarts",
            metavar="N",
            help="in-job restarts for the whole job, agreed by every node",
            setting="launch.max_restarts",
        ),
        opt(
            "--monitor-interval",
            "--monitor_interval",
            dest="monitor_interval",
            metavar="S",
            help="fallback poll of the job while workers run; events wake the launcher at once",
            setting="launch.monitor_interval",
        ),
        opt(
            "--workers-stop-timeout",
            "--workers_stop_timeout",
            dest="workers_stop_timeout",
            metavar="S",
            help="after a failure: grace of a worker inside a section or still writing before SIGKILL",
            setting="launch.workers_stop_timeout",
        ),
        opt(
            "--failure-stop-grace",
            dest="failure_stop_grace",
            metavar="S",
            help="after a failure: grace of the other (idle) workers before SIGKILL",
            setting="launch.failure_stop_grace",
        ),
        opt(
            "--term-timeout",
            "--term_timeout",
            dest="term_timeout",
            metavar="S",
            help="grace after forwarding a terminating signal before SIGKILL (Ctrl-C twice: at once)",
            setting="launch.term_timeout",
        ),
        opt(
            "--join-timeout",
            dest="join_timeout",
            metavar="S",
            help="how long node 0 waits for every launcher to join a cycle",
            setting="launch.join_timeout",
        ),
        opt(
            "--rdzv-port",
            dest="rdzv_port",
            metavar="PORT",
            help="port of node 0's rendezvous store",
            setting="launch.rdzv_port",
            default="from the job id",
        ),
        opt(
            "--forward-signals",
            dest="forward_signals",
            metavar="LIST",
            help="signals forwarded to workers, comma list",
            setting="launch.forward_signals",
        ),
        opt(
            "--state-dir",
            dest="state_dir",
            metavar="DIR",
            help="job state dir: ledger, cycle records, outcome",
            setting="state_dir",
            default="`$SLURM_SUBMIT_DIR/.slurm_ft/<job id>`",
        ),
        opt(
            "--config", dest="config", metavar="FILE", help="YAML settings file", default="`$SLURM_FT_CONFIG`"
        ),
        opt(
            "--prom-file",
            dest="prom_file",
            metavar="PATH",
            help="write Prometheus textfile metrics of this launcher here "
            "(atomically, at most once a second)",
            setting="launch.prom_file",
        ),
        opt(
            "--dry-run",
            dest="dry_run",
            takes="flag",
            help="print topology and worker commands, start nothing",
        ),
        opt(
            "--allow-outside-step",
            dest="allow_outside_step",
            takes="switch",
            help="start even outside a job step (an salloc shell, a batch script without srun): "
            "you know this node is the one (else refused: run it with srun)",
            setting="launch.allow_outside_step",
        ),
        opt(
            "--preload",
            dest="preload",
            metavar="auto|none|MODULES",
            help="standby workers import MODULES (comma-separated) while a cycle trains, so the next "
            "cycle starts warm; auto: the installed packages the script imports; none: no standbys",
            setting="launch.preload",
        ),
    ),
)

LOG = OptionGroup(
    "per-cycle application log, console echo, launcher log",
    (
        opt(
            "--applog-prefix",
            dest="applog_prefix",
            metavar="/ABS/job.log",
            help="per-cycle application log: /abs/job.log -> /abs/job_cycle<N>.log",
            setting="applog.prefix",
        ),
        opt(
            "--applog-per-node",
            dest="applog_per_node",
            takes="switch",
            help="one log file per node and cycle (for file systems without atomic append)",
            setting="applog.per_node",
        ),
        opt(
            "-t",
            "--tee",
            dest="tee",
            takes="optional",
            metavar="SPEC",
            help="no SPEC: also echo worker output to stdout; torchrun's SPEC (3, 0:1,1:2): those "
            "streams also into per-rank files under --log-dir",
            default="off, `0`",
        ),
        opt(
            "-r",
            "--redirects",
            dest="redirects",
            metavar="SPEC",
            help="torchrun's: these streams into per-rank files under --log-dir instead of the console",
            setting="applog.redirects",
        ),
        opt(
            "--log-dir",
            "--log_dir",
            dest="log_dir",
            metavar="DIR",
            help="root of the per-rank files: DIR/<run id>/attempt_<cycle>/<rank>/stdout.log, stderr.log",
            setting="applog.log_dir",
            default="`<state dir>/logs`",
        ),
        opt(
            "--local-ranks-filter",
            "--local_ranks_filter",
            dest="local_ranks_filter",
            metavar="LIST",
            help="local ranks echoed by --tee (comma list)",
            setting="applog.local_ranks_filter",
            default="all",
        ),
        opt(
            "--launcher-log",
            dest="launcher_log",
            metavar="FILE",
            help="file for the launcher's own events",
            setting="applog.launcher_log",
        ),
        opt(
            "--quiet",
            dest="quiet",
            takes="switch",
            help="launcher events to the launcher log only, not stderr",
            setting="applog.quiet",
        ),
    ),
)
