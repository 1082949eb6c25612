"""Front end of slurm-ft-logs: read a job's cycle logs the way one debugs a 1,000-rank failure.

    slurm-ft-logs [JOBID | --state-dir DIR] [--cycle N] [--attempt A] [--rank LIST]
                  [--node NAME|HOSTLIST] [--grep REGEX] [--head N | --tail N] [--node-prefix]
                  [--collapse[=numbers]] [--failure] [-f] [--list] [--json]

The log files are found from the job's cycle records (``log_files``), never from guessed
paths; the state dir is found exactly as ``slurm-ft-report`` finds it. Exit codes: 0 shown
(also when nothing matched); 2 bad input, one line on stderr (usage, an unknown job, a
cycle that does not exist, a dir that is not a state dir, a cycle without a log file);
130 ^C.

This is the only module of the command that reads os.environ. No torch is imported.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from slurm_ft import logline
from slurm_ft.cli.report import find_state_dir
from slurm_ft.cli.usage import UsageError, UsageParser, run_command
from slurm_ft.exitcodes import ExitCode
from slurm_ft.logs import collapse, halves, select
from slurm_ft.logs.ranks import RankSetError, format_set
from slurm_ft.logs.ranks import parse as parse_ranks
from slurm_ft.logs.source import CycleLogs, Job, LogsError, open_job, ranks_on

PROG = "slurm-ft-logs"


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(
        prog=PROG,
        description="Read a job's cycle logs: select, merge, collapse and follow them; why a cycle failed.",
        allow_abbrev=False,
    )
    p.add_argument(
        "job",
        nargs="?",
        metavar="JOBID",
        help="job id: $SLURM_SUBMIT_DIR/.slurm_ft/JOBID, else the job's pointer",
    )
    p.add_argument("--state-dir", metavar="DIR", help="the job's state dir")
    p.add_argument("--config", metavar="FILE", help="YAML settings file (default $SLURM_FT_CONFIG)")
    p.add_argument("--cycle", type=_count, metavar="N", help="the cycle to read (default: the last)")
    p.add_argument(
        "--attempt", type=_count, metavar="A", help="the last cycle of attempt A (with --cycle: check it)"
    )
    p.add_argument("--rank", metavar="LIST", help="only these global ranks: 0,17,100-131")
    p.add_argument("--node", metavar="NAME|HOSTLIST", help="only the ranks of these nodes: node[01-04]")
    p.add_argument("--grep", metavar="REGEX", help="only lines whose text matches (Python regex, searched)")
    p.add_argument("--head", type=_count, metavar="N", help="the first N selected lines")
    p.add_argument(
        "--tail", type=_count, metavar="N", help="the last N selected lines (with -f: then follow)"
    )
    p.add_argument("--node-prefix", action="store_true", help="start every line with its node's name")
    p.add_argument(
        "--collapse",
        nargs="?",
        const="exact",
        choices=["exact", "numbers"],
        help="fold lines ranks printed alike into one, with their rank set and count; "
        "=numbers also folds lines that differ only in numbers, showing each number's spread",
    )
    p.add_argument(
        "--failure", action="store_true", help="why the cycle failed: the first failure and its evidence"
    )
    p.add_argument("-f", "--follow", action="store_true", help="follow the running job, cycle after cycle")
    p.add_argument("--list", action="store_true", help="the job's cycles and their log files")
    p.add_argument(
        "--json", action="store_true", help="machine-readable output (JSON lines for selected lines)"
    )
    return p


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return int(text)


def _check_combination(args: argparse.Namespace) -> None:
    if args.head is not None and args.tail is not None:
        raise UsageError("give --head or --tail, not both")
    modes = [n for n, on in (("--failure", args.failure), ("-f", args.follow), ("--list", args.list)) if on]
    if len(modes) > 1:
        raise UsageError(f"{' and '.join(modes)} cannot be combined")
    if args.collapse and (args.follow or args.failure or args.list):
        raise UsageError("--collapse reads a whole cycle; it cannot be combined with -f, --failure or --list")
    if args.follow and args.head is not None:
        raise UsageError("-f cannot be combined with --head")


# ---------------------------------------------------------------------- the job


def _job(args: argparse.Namespace, env: Mapping[str, str], cwd: str) -> Job:
    state = find_state_dir(args, env, cwd)
    if args.job is not None and not state.path.exists():
        raise UsageError(f"unknown job {args.job}: no state dir at {state.path}")
    try:
        if args.follow and args.cycle is None and args.attempt is None:
            from slurm_ft.logs.follow import first_cycle

            return first_cycle(state.path, _announce)
        return open_job(state.path)
    except LogsError as exc:
        raise UsageError(str(exc)) from None


def _announce(text: str) -> None:
    sys.stdout.flush()
    print(f"{PROG}: {text}", file=sys.stderr, flush=True)


def _selection(args: argparse.Namespace, logs: CycleLogs) -> tuple[select.Selection, set[str] | None]:
    ranks: frozenset[int] | None = None
    if args.rank is not None:
        try:
            ranks = parse_ranks(args.rank)
        except RankSetError as exc:
            raise UsageError(f"--rank: {exc}") from None
        outside = sorted(r for r in ranks if r >= logs.world_size)
        if outside:
            raise UsageError(
                f"--rank: {format_set(outside)} not in cycle {logs.cycle} (ranks 0-{logs.world_size - 1})"
            )
    nodes = None
    if args.node is not None:
        try:
            nodes, on_nodes = ranks_on(logs, args.node)
        except LogsError as exc:
            raise UsageError(str(exc)) from None
        ranks = on_nodes if ranks is None else ranks & on_nodes
    elif ranks is not None:
        # the nodes that held those ranks: over per-node files, only theirs are read
        held = {logs.node_of(r) for r in ranks}
        nodes = None if None in held else {n for n in held if n is not None}
    if args.grep is not None:
        try:
            re.compile(args.grep)
        except re.error as exc:
            raise UsageError(f"--grep: not a regular expression: {exc}") from None
    return select.Selection(ranks=ranks, pattern=args.grep), nodes


def _files(logs: CycleLogs, nodes: set[str] | None) -> tuple[list[Path], list[int]]:
    entries = logs.files_of(nodes)
    if not logs.files:
        raise UsageError(
            f"cycle {logs.cycle} has no log file (the launcher ran without --applog-prefix, "
            "or is older than the records that name them)"
        )
    paths, sizes = [], []
    for f in entries:
        try:
            sizes.append(os.path.getsize(f.path))
            paths.append(Path(f.path))
        except OSError as exc:
            print(f"{PROG}: cycle {logs.cycle}: {f.path}: {exc.strerror or exc}", file=sys.stderr)
    return paths, sizes


# ---------------------------------------------------------------------- output


class LineWriter:
    """Selected pieces -> stdout: as written, with node names, or as JSON lines."""

    def __init__(self, out: BinaryIO, *, node_prefix: bool, as_json: bool) -> None:
        self.out = out
        self.node_prefix = node_prefix
        self.as_json = as_json
        self._labels: dict[bytes, bytes] = {}
        self._logs: CycleLogs | None = None

    def _context(self, logs: CycleLogs) -> None:
        if self._logs is logs:
            return
        self._logs = logs
        self._labels = {}
        if self.node_prefix:
            names = {r: logs.node_of(r) or "?" for r in range(logs.world_size)}
            pad = max((len(n) for n in names.values()), default=1)
            for r, name in names.items():
                for mark in logline.MARKS:
                    self._labels[logline.rank_prefix(r, logs.width, mark)] = f"{name:<{pad}} ".encode()

    def write(self, logs: CycleLogs, pieces: Iterable[bytes]) -> None:
        self._context(logs)
        if self.as_json:
            self.out.writelines(self._json_lines(logs, pieces))
        elif self.node_prefix:
            p, labels = logs.prefix_length, self._labels
            self.out.writelines(
                labels.get(line[:p], b"? ") + line + b"\n" for line in select.lines_of(pieces)
            )
        else:
            self.out.writelines(pieces)

    @staticmethod
    def _json_lines(logs: CycleLogs, pieces: Iterable[bytes]) -> Iterator[bytes]:
        kinds = {b": ": "line", b"+ ": "continuation", b"! ": "note"}
        for line in select.lines_of(pieces):
            parts = logline.split_line(line)
            if parts is None:
                doc: dict[str, object] = {"cycle": logs.cycle, "rank": None, "node": None, "kind": "unknown"}
                doc["text"] = line.decode(errors="replace")
            else:
                rank, mark, text = parts
                doc = {
                    "cycle": logs.cycle,
                    "rank": rank,
                    "node": logs.node_of(rank),
                    "kind": kinds.get(mark, "line"),
                    "text": text.decode(errors="replace"),
                }
            yield (json.dumps(doc) + "\n").encode()


def _select(args: argparse.Namespace, logs: CycleLogs, out: BinaryIO) -> int:
    selection, nodes = _selection(args, logs)
    paths, sizes = _files(logs, nodes)
    if args.rank is None and nodes is not None and all(f.node is not None for f in logs.files_of(nodes)):
        # --node over per-node files: the files read hold those nodes' lines only
        selection = select.Selection(ranks=None, pattern=selection.pattern)
    filt = select.LineFilter(selection, logs.world_size)
    if args.collapse and args.head is None and args.tail is None:
        return _collapse(args, logs, filt, paths, sizes, out)
    batches: Iterable[list[bytes]] = (
        (filt.pieces(b) for b in select.merged_blocks(paths, sizes)) if paths else ()
    )
    if args.head is not None:
        batches = select.head(batches, args.head)
    if args.tail is not None:
        tail = select.Tail(args.tail)
        for batch in batches:
            tail.feed(batch)
        batches = [tail.result()]
    if args.collapse:
        return _collapse(args, logs, filt, paths, sizes, out, batches)
    writer = LineWriter(out, node_prefix=args.node_prefix, as_json=args.json)
    for batch in batches:
        if batch:
            writer.write(logs, batch)
    return int(ExitCode.SUCCESS)


def _collapse(
    args: argparse.Namespace,
    logs: CycleLogs,
    filt: select.LineFilter,
    paths: list[Path],
    sizes: list[int],
    out: BinaryIO,
    batches: Iterable[list[bytes]] | None = None,
) -> int:
    """``batches``: the lines to collapse when --head or --tail chose them; else the whole
    files, in two processes when they are big (:mod:`slurm_ft.logs.halves`)."""
    mode = collapse.Mode(args.collapse)
    # The count table makes containers by the hundred thousand and no reference cycles:
    # the collector's passes over them would only cost time (measured: about a quarter).
    gc.disable()

    def folder(hold_first: bool) -> collapse.Collapser:
        return collapse.Collapser(logs.world_size, mode, hold_first=hold_first)

    def show(windows: list[collapse.Window], sink: BinaryIO) -> None:
        for window in windows:
            if args.json:
                for g in window.groups():
                    sink.write((json.dumps({"cycle": logs.cycle, **g.to_json()}) + "\n").encode())
            else:
                sink.writelines(collapse.render(window, limit=collapse.MAX_DISTINCT))

    if batches is None and halves.worth_it(sum(sizes), halves.cores()):
        halves.collapse(paths, sizes, filt.pieces, folder, show, out)
        return int(ExitCode.SUCCESS)
    if batches is None:
        batches = (filt.pieces(b) for b in select.merged_blocks(paths, sizes)) if paths else ()
    halves.fold(folder(False), batches, show, out)
    return int(ExitCode.SUCCESS)


# ---------------------------------------------------------------------- --failure, --list, -f


def _failure(args: argparse.Namespace, job: Job, logs: CycleLogs) -> int:
    from slurm_ft.logs import failure

    failed = [c.cycle for c in job.cycles if c.first_failure is not None]
    view = failure.explain(logs, failed, keep=args.tail or 20)
    if args.json:
        print(json.dumps(view.to_json(), indent=2))
        return int(ExitCode.SUCCESS)
    from slurm_ft.logs.render import failure_text

    failure_text(view, sys.stdout, job_hint=_job_hint(args))
    return int(ExitCode.SUCCESS)


def _list(args: argparse.Namespace, job: Job) -> int:
    from slurm_ft.logs.render import cycles_json, cycles_table

    cycles = [c for c in job.cycles if args.attempt is None or c.attempt == args.attempt]
    if args.json:
        print(json.dumps(cycles_json(job, cycles), indent=2))
    else:
        cycles_table(job, cycles, sys.stdout)
    return int(ExitCode.SUCCESS)


def _job_hint(args: argparse.Namespace) -> str:
    if args.job is not None:
        return f"{PROG} {args.job}"
    if args.state_dir is not None:
        return f"{PROG} --state-dir {args.state_dir}"
    return PROG


def _follow(args: argparse.Namespace, logs: CycleLogs, out: BinaryIO) -> int:
    from slurm_ft.logs.follow import follow

    filters: dict[int, select.LineFilter] = {}
    writer = LineWriter(out, node_prefix=args.node_prefix, as_json=args.json)

    def emit(current: CycleLogs, blocks: list[bytes]) -> None:
        if current.cycle not in filters:
            filters.clear()
            selection, _ = _selection(args, current)
            filters[current.cycle] = select.LineFilter(selection, current.world_size)
        filt = filters[current.cycle]
        for block in blocks:
            pieces = filt.pieces(block)
            if pieces:
                writer.write(current, pieces)
        out.flush()

    if not logs.files:
        _files(logs, None)  # says why there is nothing to follow
    if args.tail is not None:
        _select(args, logs, out)
        out.flush()
    try:
        return follow(logs, emit, _announce, from_end=args.tail is not None)
    except LogsError as exc:
        raise UsageError(str(exc)) from None


def _main(argv: Sequence[str] | None, env: Mapping[str, str], cwd: str) -> int:
    args = build_parser().parse_args(argv)
    _check_combination(args)
    job = _job(args, env, cwd)
    if args.list:
        return _list(args, job)
    try:
        logs = job.cycle(args.cycle, args.attempt)
    except LogsError as exc:
        raise UsageError(str(exc)) from None
    if args.failure:
        return _failure(args, job, logs)
    out = sys.stdout.buffer
    if args.follow:
        return _follow(args, logs, out)
    try:
        return _select(args, logs, out)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            raise
        raise UsageError(f"cannot read cycle {logs.cycle}'s log: {exc.strerror or exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(PROG, lambda: _main(argv, dict(os.environ), os.getcwd()))


if __name__ == "__main__":
    from slurm_ft.cli.entry import finish

    finish(main)
