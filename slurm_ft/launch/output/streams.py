"""Where each worker's stdout and stderr go: torchrun's ``--redirects``/``--tee`` rules (pure).

torchrun writes the streams it is told to (``--redirects`` or ``--tee``) into per-rank
files, and shows on the console every stream that is not redirected. slurm-ft keeps its
per-cycle log on top of that, unchanged: every line of every worker, prefixed. A worker
gets two pipes (stdout and stderr apart) only when one of its streams has a per-rank
file; otherwise it keeps one pipe for both (the per-cycle log then keeps the order of a
rank's stdout and stderr lines exactly, which two pipes cannot).

Per-rank files: ``<log_dir>/<run_id>/attempt_<N>/<rank>/stdout.log`` and ``stderr.log``,
with ``N`` the global cycle number (never reused, also across requeues) and ``rank`` the
global rank (so nodes sharing a log dir never collide; torchrun numbers by local rank
under a random per-launcher directory instead). The files hold the raw bytes, no prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from slurm_ft.config import AppLogSettings
from slurm_ft.settingsyntax import Std, StdSpec, parse_std


@dataclass(frozen=True)
class Route:
    """One stream of one worker. ``pipe`` False: the worker inherits the launcher's fd."""

    pipe: bool
    cycle_log: bool
    rank_file: bool
    echo: bool  # copy to the launcher's console (its stdout for stdout, stderr for stderr)


@dataclass(frozen=True)
class WorkerOutput:
    """How one worker's output is captured. ``split`` False: one pipe carries both
    streams (``out`` describes it, ``err`` equals ``out``)."""

    split: bool
    out: Route
    err: Route

    @property
    def any_pipe(self) -> bool:
        return self.out.pipe or self.err.pipe


@dataclass(frozen=True)
class OutputRules:
    """The applog settings that decide routes, already parsed."""

    cycle_log: bool  # applog.prefix is set
    tee: bool  # applog.tee: echo the per-cycle lines (all streams) on the console
    tee_local_ranks: frozenset[int] | None  # applog.local_ranks_filter
    redirects: StdSpec = field(default_factory=StdSpec)
    tee_streams: StdSpec = field(default_factory=StdSpec)

    @property
    def rank_files(self) -> bool:
        return self.redirects.any or self.tee_streams.any


def rules_for(applog: AppLogSettings) -> OutputRules:
    """The routing rules of the ``applog`` settings (already validated by config)."""
    return OutputRules(
        cycle_log=applog.prefix is not None,
        tee=applog.tee,
        tee_local_ranks=frozenset(applog.local_ranks_filter)
        if applog.local_ranks_filter is not None
        else None,
        redirects=parse_std(applog.redirects),
        tee_streams=parse_std(applog.tee_streams),
    )


def plan(rules: OutputRules, local_rank: int) -> WorkerOutput:
    """torchrun's console rule (a stream shows unless redirected; ``--tee`` shows it and
    files it), with slurm-ft's per-cycle log and ``applog.tee`` echo on top."""
    shown = rules.tee_local_ranks is None or local_rank in rules.tee_local_ranks
    redirected, teed = rules.redirects.of(local_rank), rules.tee_streams.of(local_rank)
    # Without a cycle log or the echo, a stream that needs no file is inherited: the
    # launcher does not touch it (its console, unfiltered, as before).
    captured = rules.cycle_log or rules.tee
    if not rules.rank_files:
        merged = Route(pipe=captured, cycle_log=rules.cycle_log, rank_file=False, echo=rules.tee and shown)
        return WorkerOutput(split=False, out=merged, err=merged)

    def route(std: Std) -> Route:
        to_file = bool((redirected | teed) & std)
        if redirected & std:
            console = False
        elif teed & std:
            console = shown
        else:
            console = rules.tee and shown
        pipe = captured or to_file
        return Route(pipe=pipe, cycle_log=rules.cycle_log, rank_file=to_file, echo=console and pipe)

    return WorkerOutput(split=True, out=route(Std.OUT), err=route(Std.ERR))


def rank_dir(log_dir: str | Path, run_id: str, cycle: int, rank: int) -> Path:
    """torchrun's layout, numbered by global rank and global cycle (see module docstring)."""
    if cycle < 0 or rank < 0:
        raise ValueError(f"cycle and rank must be >= 0, got {cycle}, {rank}")
    return Path(log_dir) / run_id / f"attempt_{cycle}" / str(rank)


STDOUT_FILE = "stdout.log"
STDERR_FILE = "stderr.log"


def rank_file_path(route: Route, name: str, rank_dir: Path | None) -> Path | None:
    """Where ``route`` copies its stream (``name`` in the worker's :func:`rank_dir`); None:
    it has no per-rank file."""
    if not route.rank_file:
        return None
    if rank_dir is None:
        raise ValueError("a per-rank file is routed but no rank_dir was given")
    return rank_dir / name
