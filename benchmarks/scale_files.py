"""python -m benchmarks.scale_files: the files and directory entries a job's launchers
make per cycle, per directory (issue 45).

By hand, not in CI. For each N: real launchers of one simulated job (one process per
node, one worker each: ``scripts/examples/echo_worker.py``, per-node cycle logs:
``--applog-per-node``), run once with one cycle and once with the worker of rank 0
failing in restart 0 (two cycles); what the second job made beyond the first is what a
cycle makes. Counted under the state dir and the job's log dir by inotify
(``benchmarks.dirwatch``): each directory's entries created, renamed in, removed and
renamed out (an atomic write is a create and a rename in), grouped by directory pattern
(``nodes/<node>``, ``processes/cycle<N>``): how many directories a cycle touches and the
most entries one directory takes per cycle, the figure that a shared file system's
directory lock serialises. Also the files left (the count this benchmark gave before).
All launchers share this machine.

Usage: python -m benchmarks.scale_files [--sizes 2,4,8] [--out PATH]
"""

from __future__ import annotations

import datetime
import json
import os
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks import cmdline, launchers, proc
from benchmarks.dirwatch import DirWatch
from benchmarks.harness import Context

REPO = Path(__file__).resolve().parents[1]
ECHO = REPO / "scripts" / "examples" / "echo_worker.py"


def _files(root: Path) -> Counter[str]:
    """Files per directory under ``root`` (directories relative to it)."""
    out: Counter[str] = Counter()
    for dirpath, _, names in os.walk(root):
        out[os.path.relpath(dirpath, root)] += len(names)
    return out


def pattern(directory: str) -> str:
    """``state/nodes/127.0.1.3`` -> ``state/nodes/<node>``, ``cycle12`` -> ``cycle<N>``,
    ``job_node3`` -> ``job_node<K>``: one row per kind of directory."""
    directory = re.sub(r"(?<=nodes/)[^/]+", "<node>", directory)
    return re.sub(r"_node\d+", "_node<K>", re.sub(r"cycle\d+", "cycle<N>", directory))


def one_job(ctx: Context, n: int, cycles: int, where: Path) -> tuple[Counter[str], dict[str, Counter[str]]]:
    """Files per directory left under the state dir, and each directory's entry changes
    under the state dir and the log dir (``state/...``, ``logs/...``)."""
    (where / "out").mkdir(parents=True)
    (where / "logs").mkdir()
    crash = ["--crash-rank", "0", "--crash-restart", "0"] if cycles > 1 else []
    script_args = ["--out", str(where / "out"), *crash]
    nodes = launchers.ours_nodes(
        ctx,
        ECHO,
        nnodes=n,
        nproc=1,
        submit=where,
        port=proc.free_port(),
        job_id=f"77{n}{cycles}",
        extra={},
        max_restarts=1,
    )
    logs = ["--applog-prefix", str(where / "logs" / "job.log"), "--applog-per-node"]
    cmds = [([*cmd[:-1], "--health-checks", "none", *logs, cmd[-1], *script_args], env) for cmd, env in nodes]
    with DirWatch(where) as watch:
        launchers.run_agents(ctx, cmds, where / "launchers.log", timeout=300)
    if watch.overflowed:
        raise SystemExit("inotify's queue overflowed: the counts are short")
    entries = {d: c for d, c in watch.counts.items() if d.split("/")[0] in ("state", "logs")}
    return _files(where / "state"), entries


def per_cycle(one: dict[str, Counter[str]], two: dict[str, Counter[str]]) -> dict[str, dict[str, int]]:
    """By directory pattern: the directories a cycle touched, its entry changes in all of
    them, and the most in one directory."""
    out: dict[str, dict[str, int]] = {}
    for directory in sorted(set(one) | set(two)):
        grown = Counter(two.get(directory, Counter()))
        grown.subtract(one.get(directory, Counter()))
        total = sum(v for v in grown.values() if v > 0)
        if total <= 0:
            continue
        row = out.setdefault(pattern(directory), {"directories": 0, "entries": 0, "most_in_one": 0})
        row["directories"] += 1
        row["entries"] += total
        row["most_in_one"] = max(row["most_in_one"], total)
        for kind in ("created", "renamed in", "removed", "renamed out"):
            if grown[kind] > 0:
                row[kind] = row.get(kind, 0) + grown[kind]
    return out


def main(argv: list[str] | None = None) -> int:
    p = cmdline.Parser(prog="python -m benchmarks.scale_files", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=cmdline.sizes, default="2,4,8")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="slurm-ft-files-") as tmp:
        ctx = Context(False, Path(tmp), os.urandom(8).hex(), Path(sys.executable).parent)
        for n in args.sizes:
            one, one_entries = one_job(ctx, n, 1, Path(tmp) / f"n{n}-c1")
            two, two_entries = one_job(ctx, n, 2, Path(tmp) / f"n{n}-c2")
            grown = {d: two[d] - one.get(d, 0) for d in two if two[d] != one.get(d, 0)}
            row: dict[str, object] = {"n": n, "files_one_cycle": sum(one.values())}
            row["files_per_cycle"] = sum(grown.values())
            row["dirs_written_per_cycle"] = grown
            row["entries_per_cycle"] = by_pattern = per_cycle(one_entries, two_entries)
            rows.append(row)
            print(
                f"N={n:3d} state dir files after one cycle {row['files_one_cycle']:4d}, "
                f"per further cycle {row['files_per_cycle']:3d} in {sorted(grown)}",
                flush=True,
            )
            for name, counts in sorted(by_pattern.items()):
                kinds = ", ".join(
                    f"{k} {v}" for k, v in counts.items() if k not in ("directories", "entries")
                )
                print(
                    f"      per cycle: {name:28s} {counts['directories']:3d} dir(s), "
                    f"{counts['entries']:4d} entries ({kinds})",
                    flush=True,
                )
    command = "python -m benchmarks.scale_files " + " ".join(argv if argv is not None else sys.argv[1:])
    doc = {"command": command, "when": datetime.datetime.now(datetime.UTC).isoformat(), "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
