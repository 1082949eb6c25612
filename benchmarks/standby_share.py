"""The standbys' CPU share after a restart (issue #46): time from a rank's death to the
``BENCH_STEPS``-th step (20) of every rank of the next cycle, one node x 2 gloo DDP
workers whose steps take real CPU, on a machine with few cores.

The next cycle's standbys start as soon as its workers have printed a line (the
launcher's gate), so they import torch (1-1.5 s of CPU each) while the restarted workers
step. Three contenders take turns, run by run: this checkout (standbys import at
autogroup nice 19, restored before they say they are ready); ``--baseline DIR``, a tree of
the same code before that change (``git archive <commit> slurm_ft | tar -x -C DIR``), put
first on ``PYTHONPATH``; and ``none``, this checkout with no standbys started in the second
cycle (``--max-restarts 1``: no cycle follows), the steps undisturbed. The figures are
seconds and the ratios of the medians to ``none``'s; on a shared machine, compare ratios
from one run only.

    python -m benchmarks.standby_share --baseline DIR [--this DIR] [--runs N]
"""

from __future__ import annotations

import statistics
import uuid
from pathlib import Path

from benchmarks import cmdline, launchers, proc
from benchmarks.harness import WORKERS, Context, context, interleave
from benchmarks.workers import stamps

SCRIPT = WORKERS / "steps_ddp.py"
NPROC = 2
VICTIM = 1


def once(ctx: Context, baseline: Path | None, *, standbys_after: bool = True) -> float:
    directory = ctx.scratch("stamps")
    submit = ctx.scratch("submit")
    log = submit / "launcher.log"
    extra = {
        "BENCH_STAMPS": str(directory),
        "BENCH_VICTIM_RANK": str(VICTIM),
        "BENCH_READY_LOGS": str(log),
        "BENCH_READY_COUNT": str(NPROC),
        "SLURM_FT_APPLOG_LAUNCHER_LOG": str(log),
    }
    cmds = launchers.ours_nodes(
        ctx,
        SCRIPT,
        nnodes=1,
        nproc=NPROC,
        submit=submit,
        port=proc.free_port(),
        job_id=str(uuid.uuid4().int % 10**8),
        extra=extra,
        max_restarts=2 if standbys_after else 1,  # with 2 the second cycle starts standbys too
    )
    for _, env in cmds:
        if baseline is not None:
            env["PYTHONPATH"] = f"{baseline}:{env.get('PYTHONPATH', '')}".rstrip(":")
    launchers.run_agents(ctx, cmds, directory.parent / f"{directory.name}.log", timeout=300)
    found = stamps.read_all(directory)
    deaths = [v for k, v in found.items() if k.startswith("death-c0-")]
    done = [found.get(f"steps-c1-r{r}") for r in range(NPROC)]
    if len(deaths) != 1 or None in done:
        raise proc.BenchError(f"expected 1 death and every rank's steps in cycle 1, got {sorted(found)}")
    if "started warm" not in log.read_text():
        raise proc.BenchError("the second cycle did not start warm")
    return max(d for d in done if d is not None) - deaths[0]


def main() -> int:
    parser = cmdline.Parser(prog="python -m benchmarks.standby_share", description=__doc__)
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument(
        "--this",
        type=Path,
        help="this code as a tree too (git archive HEAD slurm_ft), for a like-for-like start",
    )
    parser.add_argument("--runs", type=cmdline.positive_int, default=5)
    args = parser.parse_args()
    for given in (args.baseline, args.this):
        if given is not None and not (given / "slurm_ft" / "__init__.py").is_file():
            parser.error(f"{given}: no slurm_ft package here (give a tree of the code to compare)")
    this = args.this.resolve() if args.this else None
    with context(False) as ctx:
        contest = interleave(
            {
                "lowered": lambda: once(ctx, this),
                "baseline": lambda: once(ctx, args.baseline.resolve()),
                "none": lambda: once(ctx, this, standbys_after=False),
            },
            runs=args.runs,
            warmup=1,
        )
    for name in ("lowered", "baseline", "none"):
        values = contest.samples.get(name) or []
        print(f"{name:>9}: " + " ".join(f"{v:.2f}" for v in values), contest.errors.get(name, ""))
    medians = {k: statistics.median(v) for k, v in contest.samples.items() if v}
    print("medians: " + ", ".join(f"{k} {v:.2f} s" for k, v in medians.items()))
    if "none" in medians:
        print(
            ", ".join(
                f"{k}/none {medians[k] / medians['none']:.3f}"
                for k in ("lowered", "baseline")
                if k in medians
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
