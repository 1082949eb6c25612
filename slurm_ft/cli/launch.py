"""Front end of slurm-ft-launch: the one place that reads os.environ and sys.argv.

Everything that can be wrong with the input is found here, before any process starts or
any file is written: argparse errors, settings, the SLURM_* topology, the script, the
state dir, the applog prefix. Each is one line on stderr and exit 2. Only one input
error can surface later (a corrupt ledger) and it is reported the same way, still before
any worker starts. (Node 0's rendezvous ports all in use is not bad input: it is
retryable, exit 1.)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slurm_ft import config, privatefiles, statedir
from slurm_ft.cli.entry import collect_from_now_on
from slurm_ft.cli.usage import UsageError, UsageParser
from slurm_ft.exitcodes import ExitCode

if TYPE_CHECKING:
    from collections.abc import Callable

    from slurm_ft.compat.ftlauncher import Translation
    from slurm_ft.compat.torchrun import Request
    from slurm_ft.slurm import SlurmJob
    from slurm_ft.topology.plan import Plan

PROG = "slurm-ft-launch"
AddArgument = Callable[..., argparse.Action]  # ArgumentParser.add_argument


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(
        prog=PROG,
        description="Per-node launcher with in-job restarts coordinated across all nodes "
        "(run it under 'srun --ntasks-per-node=1').",
        allow_abbrev=False,
        epilog="torchrun's other flags and NVIDIA ft_launcher's --ft-* options (and --ft-cfg-path) "
        "are accepted too; the README's compatibility table says what each one does here.",
    )
    for group in (
        _launcher_options,
        _log_options,
        _progress_options,
        _health_options,
        _placement_options,
        _spare_options,
        _hang_options,
    ):
        group(p.add_argument)
    _torchrun_options(p)
    # what to run
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "-m", "--module", dest="module", action="store_true", help="run the target as 'python -m MODULE'"
    )
    mode.add_argument(
        "--no-python",
        "--no_python",
        dest="no_python",
        action="store_true",
        help="run the target as a plain command, not a Python script",
    )
    mode.add_argument(
        "--run-path",
        "--run_path",
        dest="run_path",
        action="store_true",
        help="torchrun's: run the script (here, as without the flag: one interpreter per worker)",
    )
    p.add_argument("target", metavar="SCRIPT", help="training script (or module, or command)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def _launcher_options(a: AddArgument) -> None:
    """The launcher itself: workers, restarts, timeouts, rendezvous, state."""
    a(
        "--nproc-per-node",
        "--nproc_per_node",
        dest="nproc_per_node",
        metavar="N|auto|gpu|cpu",
        help="workers on this node (default auto: GPUs from Slurm or NVML, else 1)",
    )
    a(
        "--max-restarts",
        "--max_restarts",
        dest="max_restarts",
        metavar="N",
        help="in-job restarts for the whole job, agreed by every node (default 3)",
    )
    a(
        "--monitor-interval",
        "--monitor_interval",
        dest="monitor_interval",
        metavar="S",
        help="fallback poll of the job while workers run; events wake the launcher at once (default 2)",
    )
    a(
        "--workers-stop-timeout",
        "--workers_stop_timeout",
        dest="workers_stop_timeout",
        metavar="S",
        help="after a failure: grace of a worker inside a section before SIGKILL (default 15)",
    )
    a(
        "--failure-stop-grace",
        dest="failure_stop_grace",
        metavar="S",
        help="after a failure: grace of the other workers before SIGKILL (default 0.2)",
    )
    a(
        "--term-timeout",
        "--term_timeout",
        dest="term_timeout",
        metavar="S",
        help="grace after forwarding a terminating signal before SIGKILL (default 25)",
    )
    a(
        "--join-timeout",
        dest="join_timeout",
        metavar="S",
        help="how long node 0 waits for every launcher to join a cycle (default 300)",
    )
    a(
        "--rdzv-port",
        dest="rdzv_port",
        metavar="PORT",
        help="port of node 0's rendezvous store (default derived from the job id)",
    )
    a(
        "--forward-signals",
        dest="forward_signals",
        metavar="LIST",
        help="signals forwarded to workers, comma list (default SIGTERM,SIGINT,SIGUSR1,SIGUSR2)",
    )
    a(
        "--state-dir",
        dest="state_dir",
        metavar="DIR",
        help="job state dir (default $SLURM_SUBMIT_DIR/.slurm_ft/<job>)",
    )
    a("--config", dest="config", metavar="FILE", help="YAML settings file (default $SLURM_FT_CONFIG)")
    a(
        "--prom-file",
        dest="prom_file",
        metavar="PATH",
        help="write Prometheus textfile metrics of this launcher here (atomically, at most once a second)",
    )
    a("--dry-run", action="store_true", help="print topology and worker commands, start nothing")


def _log_options(a: AddArgument) -> None:
    """Per-cycle application log, console echo, launcher log."""
    a(
        "--applog-prefix",
        dest="applog_prefix",
        metavar="/ABS/job.log",
        help="per-cycle application log: /abs/job.log -> /abs/job_cycle<N>.log",
    )
    a(
        "--applog-per-node",
        dest="applog_per_node",
        action="store_const",
        const=True,
        help="one log file per node and cycle (for file systems without atomic append)",
    )
    a(
        "-t",
        "--tee",
        dest="tee",
        nargs="?",
        const="",
        metavar="SPEC",
        help="no SPEC: also echo worker output to stdout; torchrun's SPEC (3, 0:1,1:2): those "
        "streams also into per-rank files under --log-dir",
    )
    a(
        "-r",
        "--redirects",
        dest="redirects",
        metavar="SPEC",
        help="torchrun's: these streams into per-rank files under --log-dir instead of the console",
    )
    a(
        "--log-dir",
        "--log_dir",
        dest="log_dir",
        metavar="DIR",
        help="root of the per-rank files: DIR/<run id>/attempt_<cycle>/<rank>/stdout.log, stderr.log "
        "(default <state dir>/logs)",
    )
    a(
        "--local-ranks-filter",
        "--local_ranks_filter",
        dest="local_ranks_filter",
        metavar="LIST",
        help="local ranks echoed by --tee (comma list)",
    )
    a("--launcher-log", dest="launcher_log", metavar="FILE", help="file for the launcher's own events")
    a(
        "--quiet",
        dest="quiet",
        action="store_const",
        const=True,
        help="launcher events to the launcher log only, not stderr",
    )


def _progress_options(a: AddArgument) -> None:
    """The no-progress guard."""
    a(
        "--checkpoint-iteration-file",
        dest="checkpoint_iteration_file",
        metavar="FILE",
        help="same as --progress-source iteration-file:FILE",
    )
    a(
        "--progress-source",
        dest="progress_source",
        metavar="KIND:PATH",
        help="where the no-progress guard reads progress: iteration-file:FILE, checkpoint-dir:DIR or "
        "file:FILE (none: the guard is off)",
    )
    a(
        "--progress-pattern",
        dest="progress_pattern",
        metavar="REGEX",
        help="checkpoint-dir entry names with one group, the step (replaces the built-in conventions)",
    )
    a("--max-no-progress-cycles", dest="max_no_progress_cycles", metavar="N")
    a("--min-progress-iterations", dest="min_progress_iterations", metavar="N")


def _health_options(a: AddArgument) -> None:
    """Health checks before each join."""
    a(
        "--health-checks",
        dest="health_checks",
        metavar="LIST|none",
        help="checks before each join: nic,storage,gpu or none",
    )
    a("--nics", dest="nics", metavar="LIST", help="NICs that must be up (comma list, globs)")
    a("--paths", dest="paths", metavar="LIST", help="paths that must be reachable (comma list)")
    a(
        "--nic-mode",
        dest="nic_mode",
        choices=("absolute", "transition"),
        help="NICs judged by change since the launcher started (transition, default) or as they are",
    )


def _placement_options(a: AddArgument) -> None:
    """CPU/NUMA binding, NIC affinity, NIC monitoring."""
    a(
        "--numa-binding",
        "--numa_binding",
        dest="numa_binding",
        metavar="none|node|socket|exclusive",
        help="bind each worker to the CPUs of its GPU's NUMA node, socket or an exclusive share",
    )
    a("--nic-affinity", dest="nic_affinity", action="store_const", const=True, help="NCCL_IB_HCA per worker")
    a(
        "--nic-monitor",
        dest="nic_monitor",
        action="store_const",
        const=True,
        help="watch NIC links in training",
    )
    a(
        "--nic-monitor-interval",
        dest="nic_monitor_interval",
        metavar="S",
        help="NIC sample period (default 5)",
    )
    a(
        "--nic-monitor-fatal",
        dest="nic_monitor_fatal",
        action="store_const",
        const=True,
        help="a NIC down fails the node",
    )


def _spare_options(a: AddArgument) -> None:
    """Spare nodes."""
    a(
        "--spare-nodes",
        dest="spare_nodes",
        metavar="K",
        help="of the job's nodes, K stand by and replace a lost, unhealthy or suspect node (default 0)",
    )
    a(
        "--segment",
        dest="segment",
        metavar="S",
        help="with spares, nodes are active or spare in groups of S consecutive hostlist entries",
    )
    a(
        "--suspect-after",
        dest="suspect_after",
        metavar="M",
        help="with spares, replace a node that hosted the first failure of M cycles in a row (default 2)",
    )


def _hang_options(a: AddArgument) -> None:
    """Hang detection (README "Hangs"); 0 turns a detector off."""
    a(
        "--hang-timeout",
        dest="hang_timeout",
        metavar="S",
        help="no worker of the job wrote for S s (default 1800)",
    )
    a(
        "--hang-iteration-timeout",
        dest="hang_iteration_timeout",
        metavar="S",
        help="checkpoint iteration did not advance for S s (default 0: off)",
    )
    a(
        "--rank-heartbeat-timeout",
        dest="rank_heartbeat_timeout",
        metavar="S",
        help="slurm_ft.worker.heartbeat()",
    )
    a(
        "--rank-initial-heartbeat-timeout",
        dest="rank_initial_heartbeat_timeout",
        metavar="S",
        help="first heartbeat after start",
    )
    a("--rank-section-timeouts", dest="rank_section_timeouts", metavar="NAME=S,...", help="per section")
    a(
        "--rank-out-of-section-timeout",
        dest="rank_out_of_section_timeout",
        metavar="S",
        help="between sections",
    )
    a(
        "--rank-termination-signal",
        dest="rank_termination_signal",
        metavar="SIG",
        help="first signal of a failure stop (default SIGTERM)",
    )


def _torchrun_options(p: argparse.ArgumentParser) -> None:
    """torchrun's topology, rendezvous and worker flags (slurm_ft/compat/torchrun.py)."""
    from slurm_ft.compat.torchrun import REFUSED

    a = p.add_argument
    g = p.add_argument_group("torchrun's flags (checked against Slurm; without Slurm they define the job)")
    g.add_argument("--nnodes", dest="nnodes", metavar="N|MIN:MAX", help="node count (checked against Slurm)")
    g.add_argument("--node-rank", "--node_rank", dest="node_rank", metavar="K", help="this node's rank")
    g.add_argument(
        "--master-addr", "--master_addr", dest="master_addr", metavar="HOST", help="node 0's address"
    )
    g.add_argument(
        "--master-port", "--master_port", dest="master_port", metavar="PORT", help="node 0's store port"
    )
    g.add_argument("--rdzv-endpoint", "--rdzv_endpoint", dest="rdzv_endpoint", metavar="HOST[:PORT]")
    g.add_argument(
        "--rdzv-id", "--rdzv_id", dest="rdzv_id", metavar="ID", help="accepted; the job id names the run"
    )
    g.add_argument("--rdzv-backend", "--rdzv_backend", dest="rdzv_backend", metavar="c10d|static")
    g.add_argument("--rdzv-conf", "--rdzv_conf", dest="rdzv_conf", metavar="K=V,...")
    g.add_argument("--standalone", dest="standalone", action="store_true", help="one node, no Slurm needed")
    g.add_argument("--local-addr", "--local_addr", dest="local_addr", metavar="HOST", help="this node's name")
    g.add_argument("--role", dest="role", metavar="NAME", help="ROLE_NAME of the workers (default 'default')")
    g.add_argument(
        "--start-method",
        "--start_method",
        dest="start_method",
        choices=("spawn", "fork", "forkserver"),
        help="accepted; every worker is a new process, as torchrun does for scripts",
    )
    g.add_argument(
        "--signals-to-handle",
        "--signals_to_handle",
        dest="forward_signals",
        metavar="LIST",
        help="same as --forward-signals",
    )
    g.add_argument(
        "--shutdown-timeout",
        "--shutdown_timeout",
        dest="shutdown_timeout",
        metavar="S",
        help="sets --workers-stop-timeout and --term-timeout",
    )
    for refused in REFUSED:
        if refused.switch:
            a(*refused.flags, dest=refused.dest, action="store_true", help=argparse.SUPPRESS)
        else:
            a(*refused.flags, dest=refused.dest, help=argparse.SUPPRESS)


def takes_value_table(parser: argparse.ArgumentParser) -> dict[str, bool]:
    """Every option string -> whether it consumes the next token (for compat.argv.split)."""
    out: dict[str, bool] = {}
    for action in parser._actions:  # argparse has no public list of its actions
        for opt in action.option_strings:
            out[opt] = action.nargs != 0
    return out


CLI_KEYS: dict[str, str] = {
    "nproc_per_node": "launch.nproc_per_node",
    "max_restarts": "launch.max_restarts",
    "monitor_interval": "launch.monitor_interval",
    "workers_stop_timeout": "launch.workers_stop_timeout",
    "failure_stop_grace": "launch.failure_stop_grace",
    "term_timeout": "launch.term_timeout",
    "join_timeout": "launch.join_timeout",
    "rdzv_port": "launch.rdzv_port",
    "forward_signals": "launch.forward_signals",
    "state_dir": "state_dir",
    "prom_file": "launch.prom_file",
    "applog_prefix": "applog.prefix",
    "applog_per_node": "applog.per_node",
    "tee": "applog.tee",
    "local_ranks_filter": "applog.local_ranks_filter",
    "launcher_log": "applog.launcher_log",
    "quiet": "applog.quiet",
    "log_dir": "applog.log_dir",
    "redirects": "applog.redirects",
    "role": "launch.role",
    "checkpoint_iteration_file": "progress.checkpoint_iteration_file",
    "progress_source": "progress.source",
    "progress_pattern": "progress.pattern",
    "max_no_progress_cycles": "progress.max_no_progress_cycles",
    "min_progress_iterations": "progress.min_progress_iterations",
    "nics": "health.nics",
    "paths": "health.paths",
    "nic_mode": "launch.nic_mode",
    "numa_binding": "launch.numa_binding",
    "nic_affinity": "launch.nic_affinity",
    "nic_monitor": "health.nic_monitor",
    "nic_monitor_interval": "health.nic_monitor_interval",
    "nic_monitor_fatal": "health.nic_monitor_fatal",
    "spare_nodes": "launch.spare_nodes",
    "segment": "launch.segment",
    "suspect_after": "launch.suspect_after",
    "hang_timeout": "hang.timeout",
    "hang_iteration_timeout": "hang.iteration_timeout",
    "rank_heartbeat_timeout": "hang.rank_heartbeat_timeout",
    "rank_initial_heartbeat_timeout": "hang.rank_initial_heartbeat_timeout",
    "rank_section_timeouts": "hang.rank_section_timeouts",
    "rank_out_of_section_timeout": "hang.rank_out_of_section_timeout",
    "rank_termination_signal": "hang.rank_termination_signal",
}


def _cli_values(ns: argparse.Namespace) -> dict[str, Any]:
    out = {key: getattr(ns, attr) for attr, key in CLI_KEYS.items() if getattr(ns, attr) is not None}
    if ns.tee is not None:
        del out["applog.tee"]
        if ns.tee == "":
            out["applog.tee"] = True
        else:
            out["applog.tee_streams"] = ns.tee
    if ns.shutdown_timeout is not None:
        out.setdefault("launch.workers_stop_timeout", ns.shutdown_timeout)
        out.setdefault("launch.term_timeout", ns.shutdown_timeout)
    if ns.health_checks is not None:
        text = ns.health_checks.strip().lower()
        out["health.checks"] = [] if text == "none" else ns.health_checks
    return out


def _active_nodes(num_nodes: int, launch: config.LaunchSettings) -> int:
    """The node count that runs workers (the world size's), after the spares."""
    spare, seg = launch.spare_nodes, launch.segment
    if spare >= num_nodes:
        raise UsageError(
            f"--spare-nodes {spare}: the job has only {num_nodes} node(s); at least one must be active"
        )
    if num_nodes % seg or (num_nodes - spare) % seg:
        raise UsageError(
            f"--segment {seg}: the job's {num_nodes} node(s) and its {num_nodes - spare} active node(s) "
            "must both be whole segments"
        )
    return num_nodes - spare


def _health_enabled(checks: Sequence[str]) -> bool:
    return bool([c for c in checks if c.strip().lower() != "none"])


def _entry(ns: argparse.Namespace, env: Mapping[str, str], cwd: str) -> Any:
    from slurm_ft.launch.workers.layout import Entry

    args = tuple(ns.args)
    if ns.module:
        return Entry("module", ns.target, args)
    if ns.no_python:
        target = ns.target
        if "/" in target:
            path = Path(cwd, target)
            if not path.is_file() or not os.access(path, os.X_OK):
                raise UsageError(f"command not found or not executable: {target}")
        elif privatefiles.find_program(target, env.get("PATH")) is None:
            raise UsageError(f"command not found on PATH: {target}")
        return Entry("command", target, args)
    if not Path(cwd, ns.target).is_file():
        raise UsageError(f"training script not found: {ns.target}")
    return Entry("script", ns.target, args)


def _check_state_dir(path: Path) -> None:
    """Writable, or exit 2 now: finding out after a training cycle would lose it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = privatefiles.create_file(path, ".probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"state dir {path} is not writable: {exc.strerror or exc}") from None


def _dry_run(cfg: Any, out: Any, placement: Plan | None, secret_note: str) -> None:
    from slurm_ft.launch import cyclecount
    from slurm_ft.launch.workers import process as wk

    job, topo = cfg.job, cfg.topo
    cycle = cyclecount.read_next_cycle(cfg.state)  # what node 0 would publish now
    w = out.write
    w(f"{PROG} dry run: nothing is started\n")
    w(
        f"job: {job.job_key} attempt {job.attempt}; node {job.node_name} is node {job.node_rank} "
        f"of {job.num_nodes} ({', '.join(job.hosts)})\n"
    )
    if job.num_nodes == 1:
        w(f"rendezvous: in-process store (single node, no port); run id {cfg.run_id}\n")
    else:
        port, *others = cfg.rdzv_ports
        w(f"rendezvous: TCPStore on {topo.master_addr}:{port}, hosted by node 0; run id {cfg.run_id}\n")
        if others:
            w(f"rendezvous ports if {port} is in use: {', '.join(map(str, others))}\n")
        w(f"rendezvous authentication: {secret_note}\n")
    spare = job.node_rank >= topo.num_nodes
    first, last = topo.ranks.start, topo.ranks.stop - 1
    where = (
        "no ranks here until it replaces an active node" if spare else f"ranks {first}-{last} on this node"
    )
    w(f"workers: {topo.nproc_per_node} per node, world size {topo.world_size}, {where}\n")
    launch = cfg.settings.launch
    if launch.spare_nodes:
        role = "a spare" if spare else f"node rank {job.node_rank}"
        w(
            f"spares: {launch.spare_nodes} of {job.num_nodes} node(s) stand by (segment {launch.segment}, "
            f"suspect after {launch.suspect_after}); this node starts as {role}\n"
        )
    w(
        f"restarts: max {launch.max_restarts} for the whole job; "
        f"stop timeout {launch.workers_stop_timeout}s, term timeout {launch.term_timeout}s, "
        f"join timeout {launch.join_timeout}s\n"
    )
    w(f"state dir: {cfg.state.path}\n")
    a = cfg.settings.applog
    if a.log_dir:
        w(
            f"per-rank files: {a.log_dir}/{cfg.run_id}/attempt_<cycle>/<rank>/stdout.log, stderr.log "
            f"(redirects {a.redirects}, tee {a.tee_streams})\n"
        )
    checks = ", ".join(cfg.settings.health.checks) if cfg.health_checks else "none"
    w(f"health checks before each join: {checks}\n")
    health = cfg.settings.health
    if health.nic_monitor:
        what = ", ".join(health.nics) or "all RDMA ports"
        effect = "fails the node" if health.nic_monitor_fatal else "is reported"
        every = f"{health.nic_monitor_interval:g}s"
        w(f"NIC monitor: {what} every {every} while training; a port going down {effect}\n")
    if placement is not None:
        nic_aff = "on" if placement.nic_affinity else "off"
        w(f"placement: numa binding {placement.mode.value}, NIC affinity {nic_aff}\n")
        for warning in placement.warnings:
            w(f"placement warning: {warning}\n")
    cyc = wk.CycleEnv(
        master_port="<chosen by node 0 each cycle>",
        restart_count=0,
        max_restarts=launch.max_restarts,
        run_id=cfg.run_id,
        cycle=cycle,
        cycle_info=str(cfg.state.cycle_record(cycle)),
    )
    argv = cfg.entry.argv(cfg.python)
    for local in range(0 if spare else topo.nproc_per_node):
        rank = topo.global_rank(local)
        env = wk.worker_env({}, topo, local, cyc, str(cfg.state.error_file(cycle, rank)))
        w(f"worker local_rank {local} rank {rank}:\n")
        if placement is not None:
            env.update(placement.ranks[local].nic_env(cfg.base_env))
            w(f"  placement: {placement.ranks[local].describe()}\n")
        w(f"  cwd: {cfg.cwd}\n")
        for key in sorted(env):
            w(f"  {key}={env[key]}\n")
        w(f"  command: {shlex.join(argv)}\n")
    w("(MASTER_PORT, the cycle number and the restart count change every cycle)\n")


def main(argv: list[str] | None = None) -> int:
    """``argv`` None: the command line of this process (see :mod:`slurm_ft.cli.entry`
    for how the console script starts and ends it)."""
    env = dict(os.environ)
    args = sys.argv[1:] if argv is None else argv
    try:
        return _main(args, env)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    except config.ConfigError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)


@dataclasses.dataclass
class Interpreted:
    """The command line read: argparse's namespace, torchrun's request, ft_launcher's
    translation (None: no ``--ft-*`` option) and the settings overrides they make
    (command-line layer)."""

    ns: argparse.Namespace
    request: Request
    ft: Translation | None
    cli: dict[str, Any]


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
    cli = {**(ft.overrides if ft else {}), **request.overrides, **_cli_values(ns)}
    return Interpreted(ns, request, ft, cli)


def _translate_ft(
    options: list[tuple[str, str | None]], read_yaml: Callable[[str], object] | None
) -> Translation:
    from slurm_ft.compat import ftlauncher

    section = None
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


def _addresses(host: str) -> set[str]:
    import socket

    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        return set()


def same_host(a: str, b: str) -> bool:
    """Whether two names or addresses mean the same machine: equal, sharing an address, or
    both loopback (node 0 is this very machine, e.g. a test cluster on one host)."""
    import ipaddress

    if a == b:
        return True
    left, right = _addresses(a), _addresses(b)
    if left & right:
        return True
    both = left | right
    return bool(left) and bool(right) and all(ipaddress.ip_address(x.split("%")[0]).is_loopback for x in both)


def _topology(it: Interpreted, env: Mapping[str, str]) -> SlurmJob:
    """The SlurmJob: Slurm's, checked against torchrun's flags; without Slurm, the flags'."""
    from slurm_ft.compat import torchrun
    from slurm_ft.slurm import SlurmEnvError, SlurmJob

    if "SLURM_JOB_ID" not in env:
        return torchrun.job_without_slurm(it.request)
    try:
        job = SlurmJob.from_env(env)
    except SlurmEnvError as exc:
        raise UsageError(str(exc)) from None
    torchrun.check_slurm(it.request, job, same_host)
    return job


def _settings_for(it: Interpreted, env: Mapping[str, str], job: SlurmJob) -> config.Settings:
    from slurm_ft.compat import torchrun

    settings = config.load(env, it.ns.config, it.cli)
    extra: dict[str, Any] = {}
    if it.ft is not None and (it.ft.checks_on or it.ft.checks_off) and it.ns.health_checks is None:
        from slurm_ft.compat import ftlauncher

        extra["health.checks"] = ftlauncher.merge_checks(settings.health.checks, it.ft)
    port = torchrun.store_port(it.request, job)
    if port is not None:
        if it.ns.rdzv_port is not None and int(it.ns.rdzv_port) != port:
            raise UsageError(
                f"--rdzv-port {it.ns.rdzv_port} contradicts {it.request.port_flag or '--master-port'} {port}"
            )
        extra["launch.rdzv_port"] = port
    return config.apply(settings, extra) if extra else settings


def _log_dir(settings: config.Settings, state_path: Path, cwd: str) -> config.Settings:
    """Per-rank files wanted: an absolute log dir (default <state dir>/logs)."""
    from slurm_ft.launch.output import streams

    a = settings.applog
    if not streams.rules_for(a).rank_files:
        return settings
    root = Path(cwd, a.log_dir) if a.log_dir else state_path / "logs"
    return config.apply(settings, {"applog.log_dir": str(root)})


def _main(args: list[str], env: dict[str, str]) -> int:
    from slurm_ft import health
    from slurm_ft.compat.errors import CompatError
    from slurm_ft.launch.rendezvous import jobsecret
    from slurm_ft.launch.workers import process as wk
    from slurm_ft.launch.workers.layout import Topology
    from slurm_ft.settingsyntax import parse_port_range, parse_signals
    from slurm_ft.slurm import rdzv_ports

    if not args:
        raise UsageError("no training script given; usage: slurm-ft-launch [options] SCRIPT [args]")
    cwd = os.getcwd()
    try:
        it = interpret(args)
        job = _topology(it, env)
        settings = _settings_for(it, env, job)
    except CompatError as exc:
        raise UsageError(str(exc)) from None
    ns = it.ns
    if it.request.notes:
        print(f"{PROG}: note: {'; '.join(it.request.notes)}", file=sys.stderr)
    health_on = _health_enabled(settings.health.checks)
    if health_on:
        health.validate(settings.health)
    try:
        sigs = tuple(int(s) for s in parse_signals(settings.launch.forward_signals))
    except ValueError as exc:
        raise UsageError(f"{config.YAML_ROOT}.launch.forward_signals: {exc}") from None
    from slurm_ft.launch import agent as agent_mod
    from slurm_ft.launch.hostprobe import nvml_gpu_count

    try:
        nproc = wk.resolve_nproc(
            settings.launch.nproc_per_node,
            slurm_gpus=job.gpus_on_node,
            gpu_count=nvml_gpu_count,
            cpu_count=os.cpu_count(),
        )
    except wk.NprocError as exc:
        raise UsageError(str(exc)) from None
    entry = _entry(ns, env, cwd)
    state = statedir.resolve(job, settings.state_dir, cwd)
    settings = _log_dir(settings, state.path, cwd)
    port_range = parse_port_range(settings.launch.rdzv_port_range)
    try:
        ports = rdzv_ports(job, port_range, settings.launch.rdzv_port)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if job.num_nodes == 1:
        ports = ()  # a single node keeps its store in process (no port, no torch import)
    active = _active_nodes(job.num_nodes, settings.launch)
    topo = Topology(job.node_rank, active, nproc, job.master_addr, settings.launch.role)
    cfg = agent_mod.AgentConfig(
        job=job,
        settings=settings,
        entry=entry,
        topo=topo,
        state=state,
        rdzv_ports=ports,
        base_env=jobsecret.without_secret(env),  # workers never see the job secret
        python=sys.executable,
        cwd=cwd,
        health_checks=health_on,
        run_id=agent_mod.run_id_for(job),
        signals=sigs,
    )
    from slurm_ft.topology import node_plan

    cfg = dataclasses.replace(cfg, placement=node_plan(settings, nproc, env.get("CUDA_VISIBLE_DEVICES")))
    if ns.dry_run:
        secret_note = (
            f"job secret from {jobsecret.SECRET_ENV} (not shown)"
            if env.get(jobsecret.SECRET_ENV)
            else f"job secret from {state.path / jobsecret.SECRET_FILE} (made at start if missing)"
        )
        _dry_run(cfg, sys.stdout, cfg.placement, secret_note)
        sys.stdout.flush()
        return 0
    helper = wk.pdeathsig_helper(privatefiles.find_program("setpriv", env.get("PATH")))
    cfg = dataclasses.replace(cfg, spawn_helper=helper, step_killer=_step_killer(job, env))
    _check_state_dir(state.path)
    if job.num_nodes > 1:
        cfg = dataclasses.replace(cfg, auth=jobsecret.resolve(env.get(jobsecret.SECRET_ENV), state))
    return _launch(cfg)


def _step_killer(job: Any, env: Mapping[str, str]) -> tuple[str, ...]:
    """``scancel --signal=KILL JOB.STEP``: SIGKILL to every process of this step on every
    node (a frozen launcher and its workers too); () outside a multi-node Slurm step."""
    if job.num_nodes < 2 or job.job_id is None or job.step_id is None:
        return ()
    scancel = privatefiles.find_program("scancel", env.get("PATH")) or "scancel"
    return (scancel, "--signal=KILL", f"{job.job_id}.{job.step_id}")


def _launch(cfg: Any) -> int:
    from slurm_ft.launch import agent as agent_mod
    from slurm_ft.launch.output.eventlog import EventLog

    # torch's C++ warnings (connection retries, a vanished peer) would bury our own lines;
    # set for this process only: the workers get the environment captured above.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    s = cfg.settings.applog
    events = EventLog(Path(s.launcher_log) if s.launcher_log else None, cfg.job.node_name, quiet=s.quiet)
    collect_from_now_on()  # the cycles' garbage is the collector's again
    try:
        ending = agent_mod.run(cfg, events)
    except agent_mod.BadInput as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    except KeyboardInterrupt:
        return 128 + int(signal.SIGINT)
    except Exception as exc:  # outside the cycle (setting up or tearing down the agent)
        import traceback  # only on this path: keeps every start short

        _internal_error(cfg, f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc)))
        return int(ExitCode.WORKERS_FAILED)
    finally:
        events.close()
    if ending.internal_error is not None:
        _internal_error(cfg, ending.internal_error, ending.traceback or "")
    return ending.exit_code


def _internal_error(cfg: Any, error: str, details: str) -> None:
    """One line for people; the traceback only into the launcher-log file, if any."""
    from slurm_ft.launch.output.eventlog import EventLog

    log = cfg.settings.applog.launcher_log
    if log:
        file_only = EventLog(Path(log), cfg.job.node_name, quiet=True)
        file_only.event(f"launcher failed: {details}")
        file_only.close()
    print(f"{PROG}: internal error: {error}", file=sys.stderr)


if __name__ == "__main__":
    from slurm_ft.cli.entry import finish

    finish(main)
