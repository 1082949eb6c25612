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

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from slurm_ft.config import AppLogSettings


class Std(enum.IntFlag):
    """torchrun's stream selector: 0 none, 1 stdout, 2 stderr, 3 both."""

    NONE = 0
    OUT = 1
    ERR = 2
    ALL = 3


_SPEC_RE = re.compile(r"[0-3]|[0-9]+:[0-3](,[0-9]+:[0-3])*")


class StdSpecError(ValueError):
    pass


@dataclass(frozen=True)
class StdSpec:
    """``3`` (every local rank) or ``0:1,1:2`` (per local rank, the rest none)."""

    default: Std = Std.NONE
    per_rank: Mapping[int, Std] | None = None

    def of(self, local_rank: int) -> Std:
        if self.per_rank is None:
            return self.default
        return self.per_rank.get(local_rank, Std.NONE)

    @property
    def any(self) -> bool:
        if self.per_rank is None:
            return self.default != Std.NONE
        return any(v != Std.NONE for v in self.per_rank.values())


def looks_like_spec(text: str) -> bool:
    return _SPEC_RE.fullmatch(text) is not None


def parse_std(text: str, what: str = "--redirects") -> StdSpec:
    text = text.strip()
    if not looks_like_spec(text):
        raise StdSpecError(
            f"{what} {text!r}: expected 0-3 (0 none, 1 stdout, 2 stderr, 3 both) "
            "or LOCAL_RANK:0-3 pairs such as 0:1,1:2"
        )
    if ":" not in text:
        return StdSpec(Std(int(text)))
    per_rank: dict[int, Std] = {}
    for item in text.split(","):
        rank_s, value = item.split(":")
        rank = int(rank_s)
        if rank in per_rank:
            raise StdSpecError(f"{what} {text!r}: local rank {rank} is given twice")
        per_rank[rank] = Std(int(value))
    return StdSpec(Std.NONE, per_rank)


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
    redirects: StdSpec = StdSpec()
    tee_streams: StdSpec = StdSpec()

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
        route = Route(pipe=captured, cycle_log=rules.cycle_log, rank_file=False, echo=rules.tee and shown)
        return WorkerOutput(split=False, out=route, err=route)

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
