"""python -m benchmarks.scale_files: the files a job's launchers write per cycle (issue 45).

By hand, not in CI. For each N: real launchers of one simulated job (one process per
node, one worker each: ``scripts/examples/echo_worker.py``), run once with one cycle and
once with the worker of rank 0 failing in restart 0 (two cycles); what the second cycle
added is the files per cycle. Counted under the state dir and the job's log dir (the
directories' files, and the directories that gained a file), so the growth in N shows
which writes every node makes per cycle. All launchers share this machine.

Usage: python -m benchmarks.scale_files [--sizes 2,4,8] [--out PATH]
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks import cmdline, launchers, proc
from benchmarks.harness import Context

REPO = Path(__file__).resolve().parents[1]
ECHO = REPO / "scripts" / "examples" / "echo_worker.py"


def _files(root: Path) -> Counter[str]:
    """Files per directory under ``root`` (directories relative to it)."""
    out: Counter[str] = Counter()
    for dirpath, _, names in os.walk(root):
        out[os.path.relpath(dirpath, root)] += len(names)
    return out


def one_job(ctx: Context, n: int, cycles: int, where: Path) -> Counter[str]:
    (where / "out").mkdir(parents=True)
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
    cmds = [([*cmd[:-1], "--health-checks", "none", cmd[-1], *script_args], env) for cmd, env in nodes]
    launchers.run_agents(ctx, cmds, where / "launchers.log", timeout=300)
    return _files(where / "state")


def main(argv: list[str] | None = None) -> int:
    p = cmdline.Parser(prog="python -m benchmarks.scale_files", description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=cmdline.sizes, default="2,4,8")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="slurm-ft-files-") as tmp:
        ctx = Context(False, Path(tmp), os.urandom(8).hex(), Path(sys.executable).parent)
        for n in args.sizes:
            one = one_job(ctx, n, 1, Path(tmp) / f"n{n}-c1")
            two = one_job(ctx, n, 2, Path(tmp) / f"n{n}-c2")
            grown = {d: two[d] - one.get(d, 0) for d in two if two[d] != one.get(d, 0)}
            row = {"n": n, "files_one_cycle": sum(one.values()), "files_per_cycle": sum(grown.values())}
            row["dirs_written_per_cycle"] = grown
            rows.append(row)
            print(
                f"N={n:3d} state dir files after one cycle {row['files_one_cycle']:4d}, "
                f"per further cycle {row['files_per_cycle']:3d} in {sorted(grown)}",
                flush=True,
            )
    command = "python -m benchmarks.scale_files " + " ".join(argv if argv is not None else sys.argv[1:])
    doc = {"command": command, "when": datetime.datetime.now(datetime.UTC).isoformat(), "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
