"""Front end of slurm-ft-healthcheck: standalone, in batch scripts, and as HealthCheckProgram.

Slurm starts HealthCheckProgram without arguments and with only ``SLURMD_NODENAME`` in
the environment, so settings can also come from a system file (``DEFAULT_CONFIG``) and
nothing here relies on ``PATH``. This is the only module of the command that reads
``os.environ`` and ``sys.argv``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from slurm_ft import config
from slurm_ft.cli.usage import UsageError, UsageParser
from slurm_ft.exitcodes import ExitCode
from slurm_ft.health import CHECK_NAMES, Report, Status, run_checks, validate
from slurm_ft.slurm import SlurmEnvError, SlurmJob

if TYPE_CHECKING:
    from slurm_ft.health.drain import Action

PROG = "slurm-ft-healthcheck"
DEFAULT_CONFIG = "/etc/slurm-ft/healthcheck.yaml"

# argparse dest -> settings key; only options the user gave reach config.load.
_SETTING_OPTIONS: dict[str, str] = {
    "checks": "health.checks",
    "deadline": "health.deadline",
    "nics": "health.nics",
    "nic_mode": "health.nic_mode",
    "sysfs_root": "health.sysfs_root",
    "proc_root": "health.proc_root",
    "paths": "health.paths",
    "write_probe": "health.write_probe",
    "discover_mounts": "health.discover_mounts",
    "gpus": "health.gpus",
    "gpu_foreign_memory_tolerance_mib": "health.gpu_foreign_memory_tolerance_mib",
    "drain": "health.drain",
    "scontrol": "health.scontrol",
}


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(
        prog=PROG,
        description="Node health check: NIC link state, storage paths and mounts, GPUs; bounded in time.",
        epilog="Exit codes: 0 healthy, 94 unhealthy, 2 bad input.",
    )
    p.add_argument(
        "--config", metavar="FILE", help=f"YAML settings (default $SLURM_FT_CONFIG, else {DEFAULT_CONFIG})"
    )
    p.add_argument(
        "--health-checks",
        "--checks",
        dest="checks",
        metavar="LIST",
        help=f"comma-separated subset of {','.join(CHECK_NAMES)} (default all; the launcher's "
        "option of the same name)",
    )
    p.add_argument("--deadline", metavar="SECONDS", help="overall time limit for all checks (default 10)")
    p.add_argument(
        "--nics", metavar="LIST", help="NIC names or globs (mlx5_*,ib0,eth*); default all RDMA devices"
    )
    p.add_argument(
        "--nic-mode",
        choices=("absolute", "transition"),
        help="how NIC state is judged (default absolute: a selected port not up fails; this check has "
        "no earlier look to compare with, unlike the launcher, whose default is transition)",
    )
    p.add_argument("--sysfs-root", metavar="DIR", help="sysfs root (default /sys)")
    p.add_argument("--proc-root", metavar="DIR", help="procfs root (default /proc)")
    p.add_argument("--paths", metavar="LIST", help="absolute paths that must be readable; %%n = node name")
    p.add_argument(
        "--write-probe", action="store_const", const=True, help="also create, fsync, remove a file"
    )
    mounts = p.add_mutually_exclusive_group()
    mounts.add_argument(
        "--discover-mounts",
        dest="discover_mounts",
        action="store_const",
        const=True,
        help="probe Lustre/NFS/GPFS/BeeGFS mounts (default)",
    )
    mounts.add_argument(
        "--no-discover-mounts",
        dest="discover_mounts",
        action="store_const",
        const=False,
        help="do not probe discovered mounts",
    )
    p.add_argument("--gpus", metavar="N", help="GPUs expected (default: setting, else SLURM_GPUS_ON_NODE)")
    p.add_argument(
        "--gpu-foreign-memory-tolerance-mib",
        metavar="MIB",
        help="GPU memory other processes may hold (default 1024)",
    )
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="one JSON object with every result")
    out.add_argument("--quiet", action="store_true", help="print only what failed (nothing when healthy)")
    p.add_argument("--prom-file", metavar="PATH", help="write node-exporter textfile metrics (atomically)")
    p.add_argument(
        "--drain",
        action="store_const",
        const=True,
        help="drain this node when unhealthy; resume our own drain when healthy",
    )
    p.add_argument(
        "--resume", action="store_true", help="resume this node when healthy, if slurm-ft drained it"
    )
    p.add_argument(
        "--node", metavar="NAME", help="Slurm node name (default $SLURMD_NODENAME, else host name)"
    )
    p.add_argument("--scontrol", metavar="PATH", help="absolute path of scontrol")
    return p


def _cli_values(args: argparse.Namespace) -> dict[str, Any]:
    return {
        key: getattr(args, dest) for dest, key in _SETTING_OPTIONS.items() if getattr(args, dest) is not None
    }


def _config_file(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    if args.config:
        return str(args.config)
    if env.get(config.CONFIG_ENV):
        return None  # config.load reads it
    return DEFAULT_CONFIG if os.path.exists(DEFAULT_CONFIG) else None


def format_line(status: Status, name: str, detail: str) -> str:
    return f"{status.value.upper()} {name}: {detail}"


def summary_line(report: Report) -> str:
    if report.healthy and not report.checked:
        skipped = report.count(Status.SKIP)
        return f"node {report.node_name}: nothing checked ({skipped} skipped), so not known to be healthy"
    if report.healthy:
        return f"node {report.node_name}: healthy"
    return f"node {report.node_name}: unhealthy, {report.count(Status.FAIL)} failed"


def print_plain(report: Report, stream: TextIO, *, quiet: bool) -> None:
    for r in report.results:
        if not quiet or r.status is Status.FAIL:
            print(format_line(r.status, r.name, r.detail), file=stream)
    if not quiet:
        print(summary_line(report), file=stream)


def print_table(report: Report) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    style = {Status.PASS: "green", Status.WARN: "yellow", Status.FAIL: "bold red", Status.SKIP: "dim"}
    table = Table(title=f"slurm-ft health: {report.node_name}")
    table.add_column("status")
    table.add_column("check")
    table.add_column("detail")
    table.add_column("time", justify="right")
    for r in report.results:
        # Text, not markup: paths and NVML messages may contain '[' and must print as-is.
        table.add_row(
            Text(r.status.value.upper(), style=style[r.status]),
            Text(r.name),
            Text(r.detail),
            Text(f"{r.duration_s * 1000:.0f} ms"),
        )
    console = Console(highlight=False)
    console.print(table)
    summary = Text(summary_line(report), style="green" if report.healthy else "bold red")
    console.print(summary + Text(f" ({report.duration_s:.2f} s)"))


def _seconds_since_start() -> float:
    """Age of this process, so the deadline also covers interpreter start-up and imports."""
    try:
        raw = Path("/proc/self/stat").read_text()
        start_ticks = int(raw[raw.rfind(")") + 2 :].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def _error(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return int(ExitCode.BAD_INPUT)


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    env = dict(os.environ if env is None else env)
    try:
        settings = config.load(env, _config_file(args, env), _cli_values(args))
        validate(settings.health)
        job = SlurmJob.from_env(env, hostname=env.get("SLURMD_NODENAME"))
    except (config.ConfigError, SlurmEnvError) as exc:
        return _error(str(exc))
    hs = settings.health
    node = args.node or job.node_name
    expected = hs.gpus if hs.gpus is not None else job.gpus_on_node

    report = run_checks(
        hs, node_name=node, expected_gpus=expected, started_at=time.monotonic() - _seconds_since_start()
    )

    action: Action | None = None
    drain_error: str | None = None
    if hs.drain or args.resume:
        from slurm_ft.health import drain as slurm_drain  # only when asked: keeps start-up short

        try:
            scontrol = slurm_drain.find_scontrol(hs.scontrol)
            action = slurm_drain.apply(report, drain=hs.drain, resume=args.resume, scontrol=scontrol, env=env)
        except slurm_drain.DrainError as exc:
            drain_error = str(exc)

    if args.json:
        import json  # only for --json: keeps start-up short

        doc = report.to_json()
        if action is not None:
            doc["slurm_action"] = {"kind": action.kind, "why": action.why, "reason": action.reason}
        if drain_error is not None:
            doc["slurm_error"] = drain_error
        print(json.dumps(doc, sort_keys=True))
    elif args.quiet or not sys.stdout.isatty():
        print_plain(report, sys.stdout, quiet=args.quiet)
    else:
        print_table(report)
    if action is not None and action.kind != "none":
        print(f"{PROG}: {action.why}", file=sys.stderr)
    if drain_error is not None:
        print(f"{PROG}: drain/resume failed: {drain_error}", file=sys.stderr)

    if args.prom_file:
        from slurm_ft import atomicfile
        from slurm_ft.health import prom

        try:
            atomicfile.write_bytes(args.prom_file, prom.render(report).encode())
        except OSError as exc:
            print(f"{PROG}: cannot write {args.prom_file}: {exc.strerror or exc}", file=sys.stderr)
    sys.stdout.flush()
    return int(ExitCode.SUCCESS if report.healthy else ExitCode.UNHEALTHY)


if __name__ == "__main__":
    from slurm_ft.cli.entry import finish

    finish(main)
