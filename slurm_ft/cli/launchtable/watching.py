"""What the launcher watches: the progress source, the health checks, hangs."""

from __future__ import annotations

from slurm_ft.cli.launchtable.records import OptionGroup, opt

PROGRESS = OptionGroup(
    "the no-progress guard",
    (
        opt(
            "--checkpoint-iteration-file",
            dest="checkpoint_iteration_file",
            metavar="FILE",
            help="same as --progress-source iteration-file:FILE",
            setting="progress.checkpoint_iteration_file",
        ),
        opt(
            "--progress-source",
            dest="progress_source",
            metavar="KIND:PATH",
            help="where the no-progress guard reads progress: iteration-file:FILE, checkpoint-dir:DIR or "
            "file:FILE (none: the guard is off)",
            setting="progress.source",
        ),
        opt(
            "--progress-pattern",
            dest="progress_pattern",
            metavar="REGEX",
            help="checkpoint-dir entry names with one group, the step (replaces the built-in conventions)",
            setting="progress.pattern",
        ),
        opt(
            "--max-no-progress-cycles",
            dest="max_no_progress_cycles",
            metavar="N",
            help="stop (exit 93) after N cycles in a row without progress; 0: never",
            setting="progress.max_no_progress_cycles",
        ),
        opt(
            "--min-progress-iterations",
            dest="min_progress_iterations",
            metavar="N",
            help="how far the iteration must move for a cycle to count as progress",
            setting="progress.min_progress_iterations",
        ),
    ),
)

HEALTH = OptionGroup(
    "health checks before each join and while training",
    (
        opt(
            "--health-checks",
            dest="health_checks",
            metavar="LIST|none",
            help="checks before each join: a subset of nic,storage,gpu, or none",
            default="`nic,storage,gpu`",
        ),
        opt(
            "--health-check-interval",
            dest="health_check_interval",
            metavar="S",
            help="while workers train, the gpu and storage checks again every S s; a failure ends "
            "the cycle and the node is unhealthy; 0: off",
            setting="health.check_interval",
        ),
        opt(
            "--nics",
            dest="nics",
            metavar="LIST",
            help="NICs that must be up (comma list, globs)",
            setting="health.nics",
            default="all",
        ),
        opt(
            "--paths",
            dest="paths",
            metavar="LIST",
            help="paths that must be reachable (comma list)",
            setting="health.paths",
        ),
        opt(
            "--nic-mode",
            dest="nic_mode",
            choices=("absolute", "transition"),
            help="transition: a port judged by its change since the launcher started; absolute: as it is",
            setting="launch.nic_mode",
        ),
    ),
)

HANG = OptionGroup(
    'hang detection (README "Hangs"); 0 turns a detector off',
    (
        opt(
            "--hang-timeout",
            dest="hang_timeout",
            metavar="S",
            help="a hang: no worker of the whole job wrote (or heart-beat) for S s",
            setting="hang.timeout",
        ),
        opt(
            "--hang-iteration-timeout",
            dest="hang_iteration_timeout",
            metavar="S",
            help="a hang: the checkpoint iteration did not advance for S s",
            setting="hang.iteration_timeout",
        ),
        opt(
            "--hang-safety-factor",
            dest="hang_safety_factor",
            metavar="F",
            help="learned timeouts: a hang at F x the longest gap between the job's signs of life "
            "(within --hang-learned-floor and --hang-timeout); 0: fixed --hang-timeout",
            setting="hang.safety_factor",
        ),
        opt(
            "--hang-learned-floor",
            dest="hang_learned_floor",
            metavar="S",
            help="learned timeouts are never below S s",
            setting="hang.learned_floor",
        ),
        opt(
            "--hang-initial-timeout",
            dest="hang_initial_timeout",
            metavar="S",
            help="each cycle's warm-up (start-up, checkpoint load, compilation), judged by "
            "--hang-timeout only and teaching the learned timeouts nothing: its first S s, or "
            "less: until the cycle's first progress (a progress source), or until F x the job's "
            "start-up that the ledger knows",
            setting="hang.initial_timeout",
        ),
        opt(
            "--rank-heartbeat-timeout",
            dest="rank_heartbeat_timeout",
            metavar="S",
            help="a hang: a rank did not call slurm_ft.worker.heartbeat() for S s",
            setting="hang.rank_heartbeat_timeout",
        ),
        opt(
            "--rank-initial-heartbeat-timeout",
            dest="rank_initial_heartbeat_timeout",
            metavar="S",
            help="a hang: a rank's first heartbeat did not come within S s of its start",
            setting="hang.rank_initial_heartbeat_timeout",
        ),
        opt(
            "--rank-section-timeouts",
            dest="rank_section_timeouts",
            metavar="NAME=S,...",
            help="a hang: a rank stayed in section NAME (slurm_ft.worker.section) longer than S s",
            setting="hang.rank_section_timeouts",
        ),
        opt(
            "--rank-out-of-section-timeout",
            dest="rank_out_of_section_timeout",
            metavar="S",
            help="a hang: a rank that used sections stayed outside every section for S s",
            setting="hang.rank_out_of_section_timeout",
        ),
        opt(
            "--rank-termination-signal",
            dest="rank_termination_signal",
            metavar="SIG",
            help="first signal to the workers of a failure stop",
            setting="hang.rank_termination_signal",
        ),
    ),
)
