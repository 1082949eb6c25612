"""Figure 1: launch overhead. A trivial script on 2 workers, launcher start to exit.

Both launchers run the same torch-free worker, so the difference is what each launcher
does itself (its imports, its rendezvous, spawning, waiting, tearing down). The physical
reference, interleaved with both, is ``python -c pass``: one interpreter start (the
workers' two starts overlap with each other). Goal (issue 19): 0.12 s.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks import instructions, launchers, proc
from benchmarks.harness import PYTHON_PASS, WORKERS, Context, interleave, python_pass
from benchmarks.stats import Row, Target

FIGURE = 1
SCRIPT = WORKERS / "trivial.py"
NPROC = 2
GOAL_S = 0.12


def _check(name: str, finished: proc.Finished, stamps_dir: Path) -> float:
    if finished.returncode != 0:
        raise proc.BenchError(f"{name} exited {finished.returncode}")
    ran = sorted(p.name for p in stamps_dir.iterdir())
    if ran != [f"ran-r{r}" for r in range(NPROC)]:
        raise proc.BenchError(f"{name}: workers that ran: {ran}")
    return finished.wall_s


def run(ctx: Context) -> list[Row]:
    def torchrun_once() -> float:
        stamps_dir = ctx.scratch("ran")
        cmd = launchers.torchrun_standalone(ctx, NPROC, SCRIPT)
        env = ctx.env(BENCH_STAMPS=str(stamps_dir))
        return _check("torchrun", proc.run(cmd, env, timeout=120), stamps_dir)

    def ours_once() -> float:
        stamps_dir = ctx.scratch("ran")
        env = launchers.ours_env(
            ctx, nproc=NPROC, state_dir=ctx.scratch("state"), extra={"BENCH_STAMPS": str(stamps_dir)}
        )
        return _check("slurm-ft-launch", proc.run(launchers.ours(ctx, SCRIPT), env, timeout=120), stamps_dir)

    contest = interleave(
        {"ours": ours_once, "torchrun": torchrun_once, "reference": lambda: python_pass(ctx)},
        runs=ctx.runs(15, 2),  # a 0.1 s figure on a VM whose speed drifts: the median needs the runs
        warmup=ctx.runs(1, 0),
    )
    counted_dir = ctx.scratch("instructions")
    counted = instructions.row(
        FIGURE,
        "  instructions of the launcher process, the same launch (callgrind; workers not counted)",
        launchers.ours(ctx, SCRIPT),
        [ctx.python, "-c", "pass"],
        launchers.ours_env(
            ctx, nproc=NPROC, state_dir=ctx.scratch("state"), extra={"BENCH_STAMPS": str(counted_dir)}
        ),
        counted_dir,
        note="does not drift with the machine",
    )
    return [
        Row(
            FIGURE,
            "launch overhead: trivial script, 2 workers, start to exit",
            "s",
            contest.summary("ours"),
            contest.summary("torchrun"),
            [Target("max", GOAL_S), Target("ratio_max", 1.05)],
            note="standalone, one node",
            error=contest.error("ours", "torchrun", "reference"),
            reference=contest.summary("reference"),
            reference_label=PYTHON_PASS,
        ),
        counted,
    ]
