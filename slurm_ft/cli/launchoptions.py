"""slurm-ft-launch's command line: the option table, its parser, and the reading of one
command line into settings overrides (no environment, no topology).

The options are data (:data:`GROUPS`): each one says its spellings, what it takes and the
setting it lands in, so the parser, the settings layer and any generated documentation
read the same table. torchrun's flags are parsed by :mod:`slurm_ft.compat.torchrun` and
NVIDIA ft_launcher's ``--ft-*`` options by :mod:`slurm_ft.compat.ftlauncher` (loaded only
when one is given).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from slurm_ft.cli.usage import UsageError, UsageParser

if TYPE_CHECKING:
    from slurm_ft.compat.ftlauncher import Translation
    from slurm_ft.compat.torchrun import Request

PROG = "slurm-ft-launch"


# What an option takes from the command line:
#   value     --opt VALUE
#   switch    --opt: the setting is true; absent, the lower layers decide
#   flag      --opt: true, else false (not a setting)
#   optional  --opt [VALUE]: without the value, ""
Takes = Literal["value", "switch", "flag", "optional"]


# The table's records are NamedTuples, not dataclasses: they are defined on every launch's
# start, where two frozen dataclasses cost ~9 M instructions (2% of a trivial launch) and
# these ~4 M.
class Option(NamedTuple):
    flags: tuple[str, ...]
    dest: str
    help: str | None = None
    metavar: str | None = None
    setting: str | None = None  # the settings key it sets (command-line layer); None: read apart
    takes: Takes = "value"
    choices: tuple[str, ...] | None = None
    # The default as the README shows it (markdown), where the setting's value is not what
    # a user sees (derived at run time); None: from the setting (:func:`shown_default`).
    default: str | None = None


class OptionGroup(NamedTuple):
    title: str
    options: tuple[Option, ...]
    section: bool = False  # a section of its own in --help (else among "options")
    exclusive: bool = False  # at most one of the options


def _opt(
    *flags: str,
    dest: str,
    help: str | None = None,
    metavar: str | None = None,
    setting: str | None = None,
    takes: Takes = "value",
    choices: tuple[str, ...] | None = None,
    default: str | None = None,
) -> Option:
    return Option(flags, dest, help, metavar, setting, takes, choices, default)


LAUNCHER = OptionGroup(
    "the launcher itself: workers, restarts, timeouts, rendezvous, state",
    (
        _opt(
            "--nproc-per-node",
            "--nproc_per_node",
            dest="nproc_per_node",
            metavar="N|auto|gpu|cpu",
            help="workers on this node: N, auto (GPUs from Slurm or NVML, else 1), gpu, cpu",
            setting="launch.nproc_per_node",
        ),
        _opt(
            "--max-restarts",
            "--max_restarts",
            dest="max_restarts",
            metavar="N",
            help="in-job restarts for the whole job, agreed by every node",
            setting="launch.max_restarts",
        ),
        _opt(
            "--monitor-interval",
            "--monitor_interval",
            dest="monitor_interval",
            metavar="S",
            help="fallback poll of the job while workers run; events wake the launcher at once",
            setting="launch.monitor_interval",
        ),
        _opt(
            "--workers-stop-timeout",
            "--workers_stop_timeout",
            dest="workers_stop_timeout",
            metavar="S",
            help="after a failure: grace of a worker inside a section or still writing before SIGKILL",
            setting="launch.workers_stop_timeout",
        ),
        _opt(
            "--failure-stop-grace",
            dest="failure_stop_grace",
            metavar="S",
            help="after a failure: grace of the other (idle) workers before SIGKILL",
            setting="launch.failure_stop_grace",
        ),
        _opt(
            "--term-timeout",
            "--term_timeout",
            dest="term_timeout",
            metavar="S",
            help="grace after forwarding a terminating signal before SIGKILL (Ctrl-C twice: at once)",
            setting="launch.term_timeout",
        ),
        _opt(
            "--join-timeout",
            dest="join_timeout",
            metavar="S",
            help="how long node 0 waits for every launcher to join a cycle",
            setting="launch.join_timeout",
        ),
        _opt(
            "--rdzv-port",
            dest="rdzv_port",
            metavar="PORT",
            help="port of node 0's rendezvous store",
            setting="launch.rdzv_port",
            default="from the job id",
        ),
        _opt(
            "--forward-signals",
            dest="forward_signals",
            metavar="LIST",
            help="signals forwarded to workers, comma list",
            setting="launch.forward_signals",
        ),
        _opt(
            "--state-dir",
            dest="state_dir",
            metavar="DIR",
            help="job state dir: ledger, cycle records, outcome",
            setting="state_dir",
            default="`$SLURM_SUBMIT_DIR/.slurm_ft/<job id>`",
        ),
        _opt(
            "--config", dest="config", metavar="FILE", help="YAML settings file", default="`$SLURM_FT_CONFIG`"
        ),
        _opt(
            "--prom-file",
            dest="prom_file",
            metavar="PATH",
            help="write Prometheus textfile metrics of this launcher here "
            "(atomically, at most once a second)",
            setting="launch.prom_file",
        ),
        _opt(
            "--dry-run",
            dest="dry_run",
            takes="flag",
            help="print topology and worker commands, start nothing",
        ),
        _opt(
            "--allow-outside-step",
            dest="allow_outside_step",
            takes="switch",
            help="start even outside a job step (an salloc shell, a batch script without srun): "
            "you know this node is the one (else refused: run it with srun)",
            setting="launch.allow_outside_step",
        ),
        _opt(
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
        _opt(
            "--applog-prefix",
            dest="applog_prefix",
            metavar="/ABS/job.log",
            help="per-cycle application log: /abs/job.log -> /abs/job_cycle<N>.log",
            setting="applog.prefix",
        ),
        _opt(
            "--applog-per-node",
            dest="applog_per_node",
            takes="switch",
            help="one log file per node and cycle (for file systems without atomic append)",
            setting="applog.per_node",
        ),
        _opt(
            "-t",
            "--tee",
            dest="tee",
            takes="optional",
            metavar="SPEC",
            help="no SPEC: also echo worker output to stdout; torchrun's SPEC (3, 0:1,1:2): those "
            "streams also into per-rank files under --log-dir",
            default="off, `0`",
        ),
        _opt(
            "-r",
            "--redirects",
            dest="redirects",
            metavar="SPEC",
            help="torchrun's: these streams into per-rank files under --log-dir instead of the console",
            setting="applog.redirects",
        ),
        _opt(
            "--log-dir",
            "--log_dir",
            dest="log_dir",
            metavar="DIR",
            help="root of the per-rank files: DIR/<run id>/attempt_<cycle>/<rank>/stdout.log, stderr.log",
            setting="applog.log_dir",
            default="`<state dir>/logs`",
        ),
        _opt(
            "--local-ranks-filter",
            "--local_ranks_filter",
            dest="local_ranks_filter",
            metavar="LIST",
            help="local ranks echoed by --tee (comma list)",
            setting="applog.local_ranks_filter",
            default="all",
        ),
        _opt(
            "--launcher-log",
            dest="launcher_log",
            metavar="FILE",
            help="file for the launcher's own events",
            setting="applog.launcher_log",
        ),
        _opt(
            "--quiet",
            dest="quiet",
            takes="switch",
            help="launcher events to the launcher log only, not stderr",
            setting="applog.quiet",
        ),
    ),
)

PROGRESS = OptionGroup(
    "the no-progress guard",
    (
        _opt(
            "--checkpoint-iteration-file",
            dest="checkpoint_iteration_file",
            metavar="FILE",
            help="same as --progress-source iteration-file:FILE",
            setting="progress.checkpoint_iteration_file",
        ),
        _opt(
            "--progress-source",
            dest="progress_source",
            metavar="KIND:PATH",
            help="where the no-progress guard reads progress: iteration-file:FILE, checkpoint-dir:DIR or "
            "file:FILE (none: the guard is off)",
            setting="progress.source",
        ),
        _opt(
            "--progress-pattern",
            dest="progress_pattern",
            metavar="REGEX",
            help="checkpoint-dir entry names with one group, the step (replaces the built-in conventions)",
            setting="progress.pattern",
        ),
        _opt(
            "--max-no-progress-cycles",
            dest="max_no_progress_cycles",
            metavar="N",
            help="stop (exit 93) after N cycles in a row without progress; 0: never",
            setting="progress.max_no_progress_cycles",
        ),
        _opt(
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
        _opt(
            "--health-checks",
            dest="health_checks",
            metavar="LIST|none",
            help="checks before each join: a subset of nic,storage,gpu, or none",
            default="`nic,storage,gpu`",
        ),
        _opt(
            "--health-check-interval",
            dest="health_check_interval",
            metavar="S",
            help="while workers train, the gpu and storage checks again every S s; a failure ends "
            "the cycle and the node is unhealthy; 0: off",
            setting="health.check_interval",
        ),
        _opt(
            "--nics",
            dest="nics",
            metavar="LIST",
            help="NICs that must be up (comma list, globs)",
            setting="health.nics",
            default="all",
        ),
        _opt(
            "--paths",
            dest="paths",
            metavar="LIST",
            help="paths that must be reachable (comma list)",
            setting="health.paths",
        ),
        _opt(
            "--nic-mode",
            dest="nic_mode",
            choices=("absolute", "transition"),
            help="transition: a port judged by its change since the launcher started; absolute: as it is",
            setting="launch.nic_mode",
        ),
    ),
)

PLACEMENT = OptionGroup(
    "CPU/NUMA binding, NIC affinity, NIC monitoring",
    (
        _opt(
            "--numa-binding",
            "--numa_binding",
            dest="numa_binding",
            metavar="none|node|socket|exclusive",
            help="bind each worker to the CPUs of its GPU's NUMA node, socket or an exclusive share",
            setting="launch.numa_binding",
        ),
        _opt(
            "--nic-affinity",
            dest="nic_affinity",
            takes="switch",
            help="NCCL_IB_HCA per worker",
            setting="launch.nic_affinity",
        ),
        _opt(
            "--nic-monitor",
            dest="nic_monitor",
            takes="switch",
            help="watch NIC links in training",
            setting="health.nic_monitor",
        ),
        _opt(
            "--nic-monitor-interval",
            dest="nic_monitor_interval",
            metavar="S",
            help="seconds between two NIC samples",
            setting="health.nic_monitor_interval",
        ),
        _opt(
            "--nic-monitor-fatal",
            dest="nic_monitor_fatal",
            takes="switch",
            help="a NIC down fails the node",
            setting="health.nic_monitor_fatal",
        ),
    ),
)

SPARES = OptionGroup(
    "spare nodes",
    (
        _opt(
            "--spare-nodes",
            dest="spare_nodes",
            metavar="K",
            help="of the job's nodes, K stand by and replace a lost, unhealthy or suspect node",
            setting="launch.spare_nodes",
        ),
        _opt(
            "--segment",
            dest="segment",
            metavar="S",
            help="with spares, nodes are active or spare in groups of S consecutive hostlist entries",
            setting="launch.segment",
        ),
        _opt(
            "--suspect-after",
            dest="suspect_after",
            metavar="M",
            help="with spares, replace a node that hosted the first failure of M cycles in a row",
            setting="launch.suspect_after",
        ),
    ),
)

SNAPSHOTS = OptionGroup(
    'in-memory snapshots (README "Snapshots")',
    (
        _opt(
            "--snapshot-memory",
            dest="snapshot_memory",
            metavar="SIZE|auto",
            help="shared memory this node's workers may fill with snapshots (16G, 512M); "
            "auto: from the node's memory and /dev/shm; 0: no snapshots",
            setting="launch.snapshot_memory",
        ),
        _opt(
            "--snapshot-persist-dir",
            dest="snapshot_persist_dir",
            metavar="DIR",
            help="on a preemption, a last cycle or the job's end, the launchers write the newest "
            "snapshot here (each rank's snapshot file, copied); the requeued attempt restores from it",
            setting="launch.snapshot_persist_dir",
        ),
        _opt(
            "--snapshot-persist-hook",
            dest="snapshot_persist_hook",
            metavar="MODULE:FUNCTION",
            help="persist through the trainer's own function instead (called by the launcher with "
            "each rank's snapshot)",
            setting="launch.snapshot_persist_hook",
        ),
        _opt(
            "--snapshot-persist-timeout",
            dest="snapshot_persist_timeout",
            metavar="S",
            help="the longest persisting may take (a dead mount never holds the allocation)",
            setting="launch.snapshot_persist_timeout",
        ),
        _opt(
            "--snapshot-replicas",
            dest="snapshot_replicas",
            metavar="N",
            help="copies of each node's shard snapshots kept in another node's memory (0 or 1): "
            "a lost node's shards survive",
            setting="launch.snapshot_replicas",
        ),
    ),
)

HANG = OptionGroup(
    'hang detection (README "Hangs"); 0 turns a detector off',
    (
        _opt(
            "--hang-timeout",
            dest="hang_timeout",
            metavar="S",
            help="a hang: no worker of the whole job wrote (or heart-beat) for S s",
            setting="hang.timeout",
        ),
        _opt(
            "--hang-iteration-timeout",
            dest="hang_iteration_timeout",
            metavar="S",
            help="a hang: the checkpoint iteration did not advance for S s",
            setting="hang.iteration_timeout",
        ),
        _opt(
            "--hang-safety-factor",
            dest="hang_safety_factor",
            metavar="F",
            help="learned timeouts: a hang at F x the longest gap between the job's signs of life "
            "(within --hang-learned-floor and --hang-timeout); 0: fixed --hang-timeout",
            setting="hang.safety_factor",
        ),
        _opt(
            "--hang-learned-floor",
            dest="hang_learned_floor",
            metavar="S",
            help="learned timeouts are never below S s",
            setting="hang.learned_floor",
        ),
        _opt(
            "--hang-initial-timeout",
            dest="hang_initial_timeout",
            metavar="S",
            help="each cycle's warm-up (start-up, checkpoint load, compilation), judged by "
            "--hang-timeout only and teaching the learned timeouts nothing: its first S s, or "
            "less: until the cycle's first progress (a progress source), or until F x the job's "
            "start-up that the ledger knows",
            setting="hang.initial_timeout",
        ),
        _opt(
            "--rank-heartbeat-timeout",
            dest="rank_heartbeat_timeout",
            metavar="S",
            help="a hang: a rank did not call slurm_ft.worker.heartbeat() for S s",
            setting="hang.rank_heartbeat_timeout",
        ),
        _opt(
            "--rank-initial-heartbeat-timeout",
            dest="rank_initial_heartbeat_timeout",
            metavar="S",
            help="a hang: a rank's first heartbeat did not come within S s of its start",
            setting="hang.rank_initial_heartbeat_timeout",
        ),
        _opt(
            "--rank-section-timeouts",
            dest="rank_section_timeouts",
            metavar="NAME=S,...",
            help="a hang: a rank stayed in section NAME (slurm_ft.worker.section) longer than S s",
            setting="hang.rank_section_timeouts",
        ),
        _opt(
            "--rank-out-of-section-timeout",
            dest="rank_out_of_section_timeout",
            metavar="S",
            help="a hang: a rank that used sections stayed outside every section for S s",
            setting="hang.rank_out_of_section_timeout",
        ),
        _opt(
            "--rank-termination-signal",
            dest="rank_termination_signal",
            metavar="SIG",
            help="first signal to the workers of a failure stop",
            setting="hang.rank_termination_signal",
        ),
    ),
)

TORCHRUN = OptionGroup(
    "torchrun's flags (checked against Slurm; without Slurm they define the job)",
    (
        _opt("--nnodes", dest="nnodes", metavar="N|MIN:MAX", help="node count (checked against Slurm)"),
        _opt("--node-rank", "--node_rank", dest="node_rank", metavar="K", help="this node's rank"),
        _opt("--master-addr", "--master_addr", dest="master_addr", metavar="HOST", help="node 0's address"),
        _opt(
            "--master-port", "--master_port", dest="master_port", metavar="PORT", help="node 0's store port"
        ),
        _opt(
            "--rdzv-endpoint",
            "--rdzv_endpoint",
            dest="rdzv_endpoint",
            metavar="HOST[:PORT]",
            help="node 0's address and store port",
        ),
        _opt(
            "--rdzv-id", "--rdzv_id", dest="rdzv_id", metavar="ID", help="accepted; the job id names the run"
        ),
        _opt(
            "--rdzv-backend",
            "--rdzv_backend",
            dest="rdzv_backend",
            metavar="c10d|static",
            help="accepted; one rendezvous here",
        ),
        _opt(
            "--rdzv-conf",
            "--rdzv_conf",
            dest="rdzv_conf",
            metavar="K=V,...",
            help="join_timeout=S is --join-timeout; the rest accepted",
        ),
        _opt("--standalone", dest="standalone", takes="flag", help="one node, no Slurm needed"),
        _opt("--local-addr", "--local_addr", dest="local_addr", metavar="HOST", help="this node's name"),
        _opt(
            "--role",
            dest="role",
            metavar="NAME",
            help="ROLE_NAME of the workers",
            setting="launch.role",
        ),
        _opt(
            "--start-method",
            "--start_method",
            dest="start_method",
            choices=("spawn", "fork", "forkserver"),
            help="accepted; every worker is a new process, as torchrun does for scripts",
        ),
        _opt(
            "--signals-to-handle",
            "--signals_to_handle",
            dest="forward_signals",
            metavar="LIST",
            help="same as --forward-signals",
            setting="launch.forward_signals",
        ),
        _opt(
            "--shutdown-timeout",
            "--shutdown_timeout",
            dest="shutdown_timeout",
            metavar="S",
            help="sets --workers-stop-timeout and --term-timeout",
        ),
    ),
    section=True,
)

WHAT_TO_RUN = OptionGroup(
    "what to run",
    (
        _opt("-m", "--module", dest="module", takes="flag", help="run the target as 'python -m MODULE'"),
        _opt(
            "--no-python",
            "--no_python",
            dest="no_python",
            takes="flag",
            help="run the target as a plain command, not a Python script",
        ),
        _opt(
            "--run-path",
            "--run_path",
            dest="run_path",
            takes="flag",
            help="torchrun's: run the script (here, as without the flag: one interpreter per worker)",
        ),
    ),
    exclusive=True,
)

# In --help order: the launcher's own groups, torchrun's section, what to run.
GROUPS: tuple[OptionGroup, ...] = (
    LAUNCHER,
    LOG,
    PROGRESS,
    HEALTH,
    PLACEMENT,
    SPARES,
    SNAPSHOTS,
    HANG,
    TORCHRUN,
    WHAT_TO_RUN,
)

# option dest -> settings key (command-line layer); tee, shutdown_timeout and health_checks
# are read apart (see settings_overrides)
SETTING_OF: dict[str, str] = {o.dest: o.setting for g in GROUPS for o in g.options if o.setting}


def option_names() -> dict[str, str]:
    """Settings key -> the option that sets it (``--max-restarts``), for error messages
    that name where a bad value came from."""
    names = {
        o.setting: next(f for f in o.flags if f.startswith("--"))
        for g in GROUPS
        for o in g.options
        if o.setting
    }
    names.update({"applog.tee": "--tee", "applog.tee_streams": "--tee", "health.checks": "--health-checks"})
    return names


AddArgument = Callable[..., argparse.Action]  # a parser's or a group's add_argument


def shown_default(option: Option, defaults: Mapping[str, object]) -> str | None:
    """An option's default as the README shows it (markdown), from the settings' defaults
    (``defaults``: dotted key -> value) unless the option says otherwise; None: it has
    none to show (a flag, or a torchrun flag read apart). ``--help`` shows the same."""
    if option.default is not None:
        return option.default
    if option.setting is None:
        return None
    value = defaults[option.setting]
    if value is None or value == []:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        shown = f"`{value:g}`"
        return f"{shown} (off)" if value == 0 and option.setting.startswith("hang.") else shown
    if isinstance(value, list):
        return f"`{','.join(map(str, value))}`"
    return f"`{value}`"


def setting_defaults() -> dict[str, object]:
    """Dotted settings key -> its default value (read off one default ``Settings``, no
    deep copy: this runs at every launch's start)."""
    from slurm_ft import config

    settings = config.Settings()
    out: dict[str, object] = {}
    for key in config.KEY_TYPES:
        section, _, name = key.rpartition(".")
        out[key] = getattr(getattr(settings, section) if section else settings, name)
    return out


def _help(option: Option, defaults: Mapping[str, object]) -> str | None:
    shown = shown_default(option, defaults)
    if option.help is None or shown is None:
        return option.help
    plain = shown.replace("`", "").replace(" (off)", ": off")
    return f"{option.help} (default {plain})".replace("%", "%%")


def _add(add: AddArgument, option: Option, defaults: Mapping[str, object]) -> None:
    text = _help(option, defaults)
    if option.takes == "flag":
        add(*option.flags, dest=option.dest, help=text, action="store_true")
    elif option.takes == "switch":
        add(*option.flags, dest=option.dest, help=text, action="store_const", const=True)
    elif option.takes == "optional":
        add(*option.flags, dest=option.dest, help=text, metavar=option.metavar, nargs="?", const="")
    else:
        add(*option.flags, dest=option.dest, help=text, metavar=option.metavar, choices=option.choices)


def build_parser() -> argparse.ArgumentParser:
    from slurm_ft.compat.torchrun import REFUSED

    p = UsageParser(
        prog=PROG,
        usage="%(prog)s [options] SCRIPT [args...] | -m MODULE [args...] | --no-python CMD [args...]",
        description="Per-node launcher with in-job restarts coordinated across all nodes "
        "(run it under 'srun --ntasks-per-node=1').",
        allow_abbrev=False,
        epilog="torchrun's other flags and NVIDIA ft_launcher's --ft-* options (and --ft-cfg-path) "
        "are accepted too; the compatibility table of the docs (reference/compat) says what each "
        "one does here.",
    )
    defaults = setting_defaults()
    for group in GROUPS:
        if group.exclusive:
            # torchrun's refused flags first: hidden, they only need to be recognised
            for refused in REFUSED:
                action = "store_true" if refused.switch else "store"
                p.add_argument(*refused.flags, dest=refused.dest, action=action, help=argparse.SUPPRESS)
        # Every group a section of --help, as the README groups them (~60 options).
        section = p.add_argument_group(group.title)
        add: AddArgument = section.add_argument
        if group.exclusive:
            add = section.add_mutually_exclusive_group().add_argument
        for option in group.options:
            _add(add, option, defaults)
    p.add_argument("target", metavar="SCRIPT", help="training script (or module, or command)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def takes_value_table(parser: argparse.ArgumentParser) -> dict[str, bool]:
    """Every option string -> whether it consumes the next token (for compat.argv.split)."""
    out: dict[str, bool] = {}
    for action in parser._actions:  # argparse has no public list of its actions
        for opt in action.option_strings:
            out[opt] = action.nargs != 0
    return out


def settings_overrides(ns: argparse.Namespace) -> dict[str, object]:
    """The command-line layer of the settings: only the options actually given."""
    out: dict[str, object] = {
        key: getattr(ns, dest) for dest, key in SETTING_OF.items() if getattr(ns, dest) is not None
    }
    if ns.tee == "":  # --tee alone: echo to the console
        out["applog.tee"] = True
    elif ns.tee is not None:  # torchrun's --tee SPEC
        out["applog.tee_streams"] = ns.tee
    if ns.shutdown_timeout is not None:
        out.setdefault("launch.workers_stop_timeout", ns.shutdown_timeout)
        out.setdefault("launch.term_timeout", ns.shutdown_timeout)
    if ns.health_checks is not None:
        text = ns.health_checks.strip().lower()
        out["health.checks"] = [] if text == "none" else ns.health_checks
    return out


@dataclass
class Interpreted:
    """The command line read: argparse's namespace, torchrun's request, ft_launcher's
    translation (None: no ``--ft-*`` option) and the settings overrides they make
    (command-line layer)."""

    ns: argparse.Namespace
    request: Request
    ft: Translation | None
    cli: dict[str, object]


def interpret(args: list[str], read_yaml: Callable[[str], object] | None = None) -> Interpreted:
    """Parse ``args`` (no environment, no topology): every flag either lands in ``cli``
    or the request, or raises UsageError/CompatError. ``read_yaml(path)`` loads the
    ``--ft-cfg-path`` file (default: yaml.safe_load of it)."""
    from slurm_ft.compat import argv as compat_argv
    from slurm_ft.compat import torchrun

    parser = build_parser()
    split = compat_argv.split(args, takes_value_table(parser))
    ns = parser.parse_args(split.launcher)
    for refused in torchrun.REFUSED:
        refused.check(getattr(ns, refused.dest))
    request = torchrun.parse(
        torchrun.TorchrunFlags(
            nnodes=ns.nnodes,
            node_rank=ns.node_rank,
            master_addr=ns.master_addr,
            master_port=ns.master_port,
            rdzv_endpoint=ns.rdzv_endpoint,
            rdzv_id=ns.rdzv_id,
            rdzv_backend=ns.rdzv_backend,
            rdzv_conf=ns.rdzv_conf,
            standalone=ns.standalone,
            local_addr=ns.local_addr,
        )
    )
    ft = _translate_ft(split.ft, read_yaml) if split.ft else None
    cli: dict[str, object] = {**(ft.overrides if ft else {}), **request.overrides, **settings_overrides(ns)}
    return Interpreted(ns, request, ft, cli)


def _translate_ft(
    options: list[tuple[str, str | None]], read_yaml: Callable[[str], object] | None
) -> Translation:
    from slurm_ft.compat import ftlauncher

    section: Mapping[str, object] | None = None
    cfg_path = ftlauncher.config_path(options)
    if cfg_path is not None:
        doc = (read_yaml or _read_ft_yaml)(cfg_path)
        section = ftlauncher.find_section(doc)
        if section is None:
            raise UsageError(f"--ft-cfg-path {cfg_path}: no '{ftlauncher.YAML_SECTION}:' section in the file")
    return ftlauncher.translate(options, section, source=f"{cfg_path}: fault_tolerance")


def _read_ft_yaml(path: str) -> object:
    import yaml

    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"--ft-cfg-path {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError:
        raise UsageError(f"--ft-cfg-path {path}: not valid YAML") from None
