"""Front end of slurm-ft-progress: the no-progress guard for batch scripts and people.

    slurm-ft-progress status [--json]   the ledger as a table (or JSON), the streak, the verdict
    slurm-ft-progress check  [--json]   exit 0: another attempt may make progress; 93: it may not
    slurm-ft-progress reset  [--yes]    clear the streak after fixing the cause

Common options: --state-dir DIR, --config FILE, --max-no-progress-cycles K,
--min-progress-iterations M, --progress-source KIND:PATH (or its older spelling
--checkpoint-iteration-file PATH), --progress-pattern REGEX. Without them the policy is
the one the launcher recorded in the ledger, so a template's ``check`` judges exactly as
the launcher did; a value set on the command line, in SLURM_FT_PROGRESS_* or in the config
file overrides the recorded one.

Exit codes:
    0   status: shown; check: another attempt may run (also "no history"); reset: done, or
        nothing to reset
    1   reset: the operator answered no at the prompt; nothing changed
    2   bad input, one line on stderr: usage errors, invalid settings or SLURM_* variables,
        a corrupt or unreadable ledger, a state dir that is not a readable directory,
        `status`/`reset` with a state dir that does not exist, a standalone run (no
        SLURM_JOB_ID) whose default state dir ./.slurm_ft/standalone does not exist,
        `reset` without --yes when stdin is not a terminal
    93  check: no progress in the last K cycles; do not requeue

This is the only module of the command that reads os.environ.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slurm_ft import config, progress
from slurm_ft.cli.usage import UsageError, UsageParser, run_command, table_width
from slurm_ft.exitcodes import ExitCode
from slurm_ft.settingsyntax import SourceError

PROG = "slurm-ft-progress"
DECLINED = 1


def _add_common_options(p: argparse.ArgumentParser, *, before_command: bool) -> None:
    """The options every subcommand takes, on the command (before the subcommand: hidden,
    listed once with the subcommands) and on each subcommand (after it: no default, so it
    leaves a value given before the subcommand alone). Either order works, as people type it."""

    def add(flag: str, text: str, **kwargs: object) -> None:
        if before_command:
            p.add_argument(flag, help=argparse.SUPPRESS, **kwargs)  # type: ignore[arg-type]
        else:
            p.add_argument(flag, help=text, default=argparse.SUPPRESS, **kwargs)  # type: ignore[arg-type]

    add("--state-dir", "the job's state dir (default: found from SLURM_* and settings)")
    add("--config", "YAML settings file (default $SLURM_FT_CONFIG)")
    add("--max-no-progress-cycles", "stop after K cycles (<=0: off)", type=int, metavar="K")
    add("--min-progress-iterations", "progress needs >= M iterations", type=int, metavar="M")
    add("--checkpoint-iteration-file", "same as --progress-source iteration-file:PATH", metavar="PATH")
    add("--progress-source", "iteration-file:PATH, checkpoint-dir:DIR or file:PATH", metavar="KIND:PATH")
    add("--progress-pattern", "checkpoint-dir names, one group: the step", metavar="REGEX")


def build_parser() -> argparse.ArgumentParser:
    common = UsageParser(add_help=False)
    _add_common_options(common, before_command=False)
    parser = UsageParser(prog=PROG, description="Stop restart and requeue loops that make no progress.")
    _add_common_options(parser, before_command=True)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=UsageParser)
    status = sub.add_parser("status", parents=[common], help="show attempts, cycles, streak and verdict")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    check = sub.add_parser("check", parents=[common], help="exit 0 if another attempt may progress, else 93")
    check.add_argument("--json", action="store_true", help="machine-readable output")
    reset = sub.add_parser("reset", parents=[common], help="clear the no-progress streak")
    reset.add_argument(
        "--yes", action="store_true", help="do not ask (required when stdin is not a terminal)"
    )
    return parser


def _cli_settings(args: argparse.Namespace) -> dict[str, Any]:
    given = {
        "state_dir": args.state_dir,
        "progress.max_no_progress_cycles": args.max_no_progress_cycles,
        "progress.min_progress_iterations": args.min_progress_iterations,
        "progress.checkpoint_iteration_file": args.checkpoint_iteration_file,
        "progress.source": args.progress_source,
        "progress.pattern": args.progress_pattern,
    }
    return {k: v for k, v in given.items() if v is not None}


class _Context:
    """Everything a subcommand needs, resolved from the environment once."""

    def __init__(self, args: argparse.Namespace, env: dict[str, str], cwd: str) -> None:
        from slurm_ft import statedir
        from slurm_ft.slurm import SlurmEnvError, SlurmJob

        cli = _cli_settings(args)
        config_file = args.config or env.get(config.CONFIG_ENV) or None
        self.settings = config.load(env, config_file, cli)
        explicit = set(cli) | set(config.env_values(env))
        if config_file:
            explicit |= set(config.read_yaml(config_file))
        self.explicit = explicit
        try:
            job = SlurmJob.from_env(env)
        except SlurmEnvError as exc:
            raise UsageError(str(exc)) from None
        self.state = statedir.resolve(job, self.settings.state_dir, cwd)
        self.implicit_standalone = job.standalone and not self.settings.state_dir
        self.dir = self.state.path

    def dir_exists(self) -> bool:
        """False when absent; UsageError when present but not a readable directory."""
        try:
            if not self.dir.exists():
                return False
        except OSError as exc:
            raise UsageError(f"state dir {self.dir}: {exc.strerror or exc}") from None
        if not self.dir.is_dir():
            raise UsageError(f"state dir {self.dir} is not a directory")
        if not os.access(self.dir, os.R_OK | os.X_OK):
            raise UsageError(f"state dir {self.dir} is not readable")
        return True

    def require_dir(self) -> None:
        if self.dir_exists():
            return
        if self.implicit_standalone:
            raise UsageError(f"not inside a Slurm job and {self.dir} does not exist; pass --state-dir DIR")
        raise UsageError(f"state dir {self.dir} does not exist")

    def load(self) -> progress.Ledger | None:
        try:
            return progress.load_ledger(self.state.ledger)
        except progress.LedgerError as exc:
            raise UsageError(str(exc)) from None


def _verdict(ctx: _Context, ledger: progress.Ledger | None) -> tuple[progress.Ledger | None, Any, str | None]:
    """The ledger as the next attempt will judge it (an open cycle closed as interrupted)."""
    policy = progress.effective_policy(ctx.settings.progress, ledger, ctx.explicit)
    if ledger is None:
        return None, policy, None
    try:
        progress.configured_source(policy)
    except SourceError as exc:
        raise UsageError(f"ledger {ctx.state.ledger}: recorded progress source: {exc}") from None
    view = progress.provisional_view(ledger, policy, progress.read_for_verdict(ledger, policy))
    return view, policy, progress.stop_reason(view, policy)


def _allow_line(view: progress.Ledger | None, policy: config.ProgressSettings, where: Path) -> str:
    if view is None:
        return f"no history in {where}: another attempt may run"
    source = progress.configured_source(policy)
    if source is None:
        return f"{progress.GUARD_OFF}: another attempt may run"
    if policy.max_no_progress_cycles <= 0:
        return "progress tracking off (max no-progress cycles <= 0): another attempt may run"
    if not progress.judges(view, policy):
        return (
            f"progress source {source} has not existed at any cycle boundary: the guard has judged "
            "nothing; another attempt may run"
        )
    last = progress.last_iteration(view)
    at = f", iteration {last}" if last is not None else ""
    return f"another attempt may run: {view.streak} of {policy.max_no_progress_cycles} no-progress cycles{at}"


def _open_cycle(ledger: progress.Ledger | None, view: progress.Ledger | None) -> dict[str, Any] | None:
    """How an open cycle was judged: it may still be running, or its launcher was lost."""
    entry = ledger.open_cycle if ledger else None
    if entry is None or view is None:
        return None
    judged = view.cycles[-1] if view.open_cycle is None else None
    return {
        "cycle": entry.cycle,
        "iteration_now": judged.iteration_end if judged else None,
        "counts_as_progress": judged.progressed if judged else None,
    }


def _nodes(ctx: _Context) -> dict[str, Any] | None:
    """With spare nodes (records with ``active_nodes``): who holds the node ranks in the
    latest cycle, who stands by, every replacement of the job's cycles, and the lost and
    suspect nodes of the last outcome. None for a job without spares."""
    from slurm_ft import records

    latest: tuple[int, dict[str, Any]] | None = None
    replaced: list[str] = []
    for cycle in ctx.state.recorded_cycles():
        doc = records.read_json(ctx.state.cycle_record(cycle))
        if doc and doc.get("active_nodes"):
            latest = (cycle, doc)
            replaced += [f"cycle {cycle}: {r}" for r in doc.get("replacements") or []]
    if latest is None:
        return None
    outcome = records.read_json(ctx.state.outcome) or {}
    cycle, doc = latest
    return {
        "cycle": cycle,
        "active": doc["active_nodes"],
        "spare": doc.get("spare_nodes") or [],
        "replacements": replaced,
        "lost": outcome.get("lost_nodes") or [],
        "suspect": outcome.get("suspect_nodes") or [],
        "unhealthy": outcome.get("unhealthy_nodes") or [],
    }


def _print_nodes(nodes: dict[str, Any] | None) -> None:
    if nodes is None:
        return
    none = "none"
    print(
        f"nodes in cycle {nodes['cycle']}: active {', '.join(nodes['active'])}; "
        f"spare {', '.join(nodes['spare']) or none}"
    )
    for line in nodes["replacements"]:
        print(f"replaced in {line}")
    bad = [(k, nodes[k]) for k in ("lost", "suspect", "unhealthy") if nodes[k]]
    if bad:
        print("last attempt: " + "; ".join(f"{k} {', '.join(v)}" for k, v in bad))


def _summary(
    ctx: _Context,
    ledger: progress.Ledger | None,
    view: progress.Ledger | None,
    policy: config.ProgressSettings,
    reason: str | None,
) -> dict[str, Any]:
    """One object for `status --json` and `check --json`.

    ``cycles`` are as recorded (an open cycle stays open); ``streak``, ``verdict`` and
    ``reason`` are as judged, with ``open_cycle`` saying how an open cycle was counted.
    """
    cycles = []
    for entry in ledger.cycles if ledger else []:
        cycles.append(
            {
                "cycle": entry.cycle,
                "attempt": entry.attempt,
                "iteration_start": entry.iteration_start,
                "iteration_end": entry.iteration_end,
                # A cycle not judged (no source yet) made no known progress, not 0: the
                # report says unknown too.
                "progress": entry.progress if entry.progressed is not None else None,
                "progressed": entry.progressed,
                "outcome": entry.outcome,
                "open": entry.is_open,
                "warnings": entry.warnings,
            }
        )
    source = progress.configured_source(policy)
    return {
        "state_dir": str(ctx.dir),
        "ledger": str(ctx.state.ledger),
        "history": view is not None,
        "source_seen": bool(view and progress.judges(view, policy)),
        "policy": {
            "source": str(source) if source is not None else None,
            "pattern": source.pattern if source is not None else None,
            "max_no_progress_cycles": policy.max_no_progress_cycles,
            "min_progress_iterations": policy.min_progress_iterations,
        },
        "nodes": _nodes(ctx),
        "streak": view.streak if view else 0,
        "last_iteration": progress.last_iteration(view) if view else None,
        "verdict": "stop" if reason else "allow",
        "reason": reason,
        "attempts": sorted({c["attempt"] for c in cycles}),
        "cycles": cycles,
        "open_cycle": _open_cycle(ledger, view),
        "resets": [
            {"time": r.time, "streak_before": r.streak_before, "after_cycle": r.after_cycle, "note": r.note}
            for r in (view.resets if view else [])
        ],
        "stopped": (
            {"attempt": view.stopped.attempt, "cycle": view.stopped.cycle, "reason": view.stopped.reason}
            if view and view.stopped
            else None
        ),
    }


def cmd_check(ctx: _Context, as_json: bool) -> int:
    if ctx.implicit_standalone:
        ctx.require_dir()
    ctx.dir_exists()
    ledger = ctx.load()
    view, policy, reason = _verdict(ctx, ledger)
    if as_json:
        import json

        print(json.dumps(_summary(ctx, ledger, view, policy, reason), indent=2, sort_keys=True))
    elif reason:
        print(f"stop: {reason}; do not requeue")
    else:
        print(_allow_line(view, policy, ctx.dir))
    return int(ExitCode.NO_PROGRESS) if reason else int(ExitCode.SUCCESS)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def _print_table(summary: dict[str, Any], line: str) -> None:
    from rich.console import Console, JustifyMethod
    from rich.table import Table

    console = Console(highlight=False, soft_wrap=True, width=table_width(sys.stdout.isatty()))
    policy = summary["policy"]
    table = Table(title=f"slurm-ft progress: {summary['state_dir']}")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("attempt", "right"),
        ("cycle", "right"),
        ("iter start", "right"),
        ("iter end", "right"),
        ("progress", "right"),
        ("outcome", "left"),
        ("counts as", "left"),
    )
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    for c in summary["cycles"]:
        if c["open"]:
            counts = "open"
        elif c["progressed"] is None:
            counts = "not judged"
        elif c["progressed"]:
            counts = "progress"
        else:
            counts = "[red]no progress[/red]"
        if c["warnings"]:
            counts += " (!)"
        table.add_row(
            str(c["attempt"]),
            str(c["cycle"]),
            str(c["iteration_start"]),
            _cell(c["iteration_end"]),
            _cell(c["progress"]),
            _cell(c["outcome"]),
            counts,
        )
    console.print(table)
    for c in summary["cycles"]:
        for w in c["warnings"]:
            console.print(f"(!) cycle {c['cycle']}: {w}", markup=False)
    for r in summary["resets"]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r["time"]))
        note = f" ({r['note']})" if r["note"] else ""
        console.print(
            f"reset at {when} UTC after cycle {_cell(r['after_cycle'])}: "
            f"streak was {r['streak_before']}{note}",
            markup=False,
        )
    open_cycle = summary["open_cycle"]
    if open_cycle:
        if open_cycle["counts_as_progress"] is None:
            judged = "not judged"
        else:
            word = "progress" if open_cycle["counts_as_progress"] else "no progress"
            judged = f"judged as interrupted with {word} (iteration now {_cell(open_cycle['iteration_now'])})"
        console.print(
            f"cycle {open_cycle['cycle']} is open (still running, or its launcher was lost): {judged}",
            markup=False,
        )
    stopped = summary["stopped"]
    if stopped:
        console.print(
            f"stopped before cycle {stopped['cycle']} (attempt {stopped['attempt']}): {stopped['reason']}",
            markup=False,
        )
    if policy["source"] is None:
        console.print(f"source: none ({progress.GUARD_OFF})", markup=False)
    else:
        seen = "" if summary["source_seen"] else " (not existed at any cycle boundary: cycles not judged)"
        pattern = f", pattern {policy['pattern']}" if policy["pattern"] else ""
        console.print(f"source: {policy['source']}{pattern}{seen}", markup=False)
    if (policy["source"] or "").startswith("file:"):
        means = "the file was replaced"
    else:
        means = f">= {policy['min_progress_iterations']} iterations"
    console.print(
        f"streak: {summary['streak']} of {policy['max_no_progress_cycles']} no-progress cycles "
        f"(progress means {means})",
        markup=False,
    )
    console.print(f"verdict: {line}", markup=False)


def cmd_status(ctx: _Context, as_json: bool) -> int:
    ctx.require_dir()
    ledger = ctx.load()
    view, policy, reason = _verdict(ctx, ledger)
    summary = _summary(ctx, ledger, view, policy, reason)
    line = f"stop: {reason}" if reason else _allow_line(view, policy, ctx.dir)
    if as_json:
        import json

        print(json.dumps(summary, indent=2, sort_keys=True))
    elif view is None:
        print(line)
        _print_nodes(summary["nodes"])
    else:
        _print_table(summary, line)
        sys.stdout.flush()
        _print_nodes(summary["nodes"])
    return 0


def _confirm(question: str) -> bool:
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def cmd_reset(ctx: _Context, yes: bool, interactive: bool) -> int:
    ctx.require_dir()
    if not yes and not interactive:
        raise UsageError("reset changes the ledger: pass --yes (stdin is not a terminal)")
    path = ctx.state.ledger
    now = time.time()
    try:
        ledger = progress.load_ledger(path)
        corrupt: str | None = None
    except progress.LedgerError as exc:
        ledger, corrupt = None, str(exc)
    if ledger is None and corrupt is None:
        print(f"no history in {ctx.dir}: nothing to reset")
        return 0
    if corrupt is not None:
        question = f"The ledger {path} is corrupt. Set it aside and start a new one?"
    else:
        assert ledger is not None
        question = f"Reset the no-progress streak in {ctx.dir} (now {ledger.streak})?"
    if not yes and not _confirm(question):
        print("not reset; nothing changed")
        return DECLINED
    try:
        if corrupt is not None:
            aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}")
            os.replace(path, aside)
            fresh = progress.reset_streak(
                progress.Ledger(), now, note=f"replaced a corrupt ledger, kept as {aside.name}"
            )
            progress.save_ledger(path, fresh)
            print(f"set the corrupt ledger aside as {aside} and started a new one in {ctx.dir}")
            return 0
        assert ledger is not None
        progress.save_ledger(path, progress.reset_streak(ledger, now, note="slurm-ft-progress reset"))
    except OSError as exc:
        raise UsageError(f"cannot write ledger {path}: {exc.strerror or exc}") from None
    print(
        f"reset the no-progress streak in {ctx.dir} (was {ledger.streak}; {len(ledger.cycles)} cycles kept)"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(PROG, lambda: _run(argv))


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    ctx = _Context(args, dict(os.environ), os.getcwd())
    if args.command == "check":
        return cmd_check(ctx, args.json)
    if args.command == "status":
        return cmd_status(ctx, args.json)
    return cmd_reset(ctx, args.yes, sys.stdin.isatty())


if __name__ == "__main__":
    from slurm_ft.cli.entry import finish

    finish(main)
