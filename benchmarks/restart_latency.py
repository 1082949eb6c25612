"""Figure 2: restart latency. 2 simulated nodes x 2 workers; one worker dies.

Latency is the time from the worker's own death stamp (written just before
``os._exit(1)``) to the start stamp of the last worker of the next cycle, both
``time.time()`` on this one machine. Each worker takes its start stamp at its first
statement, so the figure includes the interpreter start-up of the new workers; that
start-up, which no launcher can avoid, is measured on its own and shown on its own row.

torchrun: two agents, c10d rendezvous on one TCPStore, ``--max-restarts=1``.
slurm-ft: two launchers, each with the SLURM_* environment of one node of a 2-node step.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from benchmarks import launchers, proc
from benchmarks.harness import WORKERS, Context, interleave, repeat
from benchmarks.stats import Row, Target, summarize
from benchmarks.workers import stamps

FIGURE = 2
SCRIPT = WORKERS / "restart_worker.py"
PROBE = WORKERS / "startup_probe.py"
NNODES, NPROC = 2, 2
VICTIM = 3  # node 1, local rank 1: the failure has to cross nodes to reach node 0
TIMEOUT = 180.0
LIGHTNING_TERM_S = 2.0


def latency(directory: Path) -> float:
    found = stamps.read_all(directory)
    deaths = [v for k, v in found.items() if k.startswith("death-c0-")]
    restarted = [v for k, v in found.items() if k.startswith("start-c1-")]
    if len(deaths) != 1 or len(restarted) != NNODES * NPROC:
        raise proc.BenchError(f"expected 1 death and {NNODES * NPROC} next-cycle starts, got {sorted(found)}")
    return max(restarted) - deaths[0]


def torchrun_once(ctx: Context, term_delay: float = 0.0) -> float:
    directory = ctx.scratch("stamps")
    port, run_id = proc.free_port(), uuid.uuid4().hex[:8]
    env = ctx.env(
        BENCH_STAMPS=str(directory), BENCH_VICTIM_RANK=str(VICTIM), BENCH_TERM_DELAY_S=f"{term_delay:g}"
    )
    cmds = [
        (
            launchers.torchrun_c10d(
                ctx,
                nnodes=NNODES,
                nproc=NPROC,
                port=port,
                is_host=node == 0,
                run_id=run_id,
                max_restarts=1,
                script=SCRIPT,
            ),
            env,
        )
        for node in range(NNODES)
    ]
    launchers.run_agents(ctx, cmds, directory.parent / f"{directory.name}.log")
    return latency(directory)


def ours_once(ctx: Context, term_delay: float = 0.0) -> float:
    directory = ctx.scratch("stamps")
    submit = ctx.scratch("submit")
    port, job_id = proc.free_port(), str(uuid.uuid4().int % 10**8)
    cmds = launchers.ours_nodes(
        ctx,
        SCRIPT,
        nnodes=NNODES,
        nproc=NPROC,
        submit=submit,
        port=port,
        job_id=job_id,
        extra={
            "BENCH_STAMPS": str(directory),
            "BENCH_VICTIM_RANK": str(VICTIM),
            "BENCH_TERM_DELAY_S": f"{term_delay:g}",
        },
    )
    launchers.run_agents(ctx, cmds, directory.parent / f"{directory.name}.log")
    return latency(directory)


def startup_once(ctx: Context) -> float:
    directory = ctx.scratch("probe")
    finished = proc.run([ctx.python, str(PROBE)], ctx.env(BENCH_STAMPS=str(directory)), timeout=30)
    if finished.returncode != 0:
        raise proc.BenchError(f"start-up probe exited {finished.returncode}")
    (value,) = stamps.read_all(directory).values()
    return value - finished.started


def run(ctx: Context) -> list[Row]:
    contest = interleave(
        {"ours": lambda: ours_once(ctx), "torchrun": lambda: torchrun_once(ctx)},
        runs=ctx.runs(3, 1),
        warmup=ctx.runs(1, 0),
    )
    slow = interleave(
        {
            "ours": lambda: ours_once(ctx, LIGHTNING_TERM_S),
            "torchrun": lambda: torchrun_once(ctx, LIGHTNING_TERM_S),
        },
        runs=ctx.runs(3, 1),
        warmup=0,
    )
    startup = repeat(lambda: startup_once(ctx), runs=ctx.runs(7, 3), warmup=1)
    return [
        Row(
            FIGURE,
            "restart latency: worker death to last next-cycle worker started (2 nodes x 2)",
            "s",
            contest.summary("ours"),
            contest.summary("torchrun"),
            [Target("max", 0.5, strict=True), Target("ratio_max", 0.3)],
            note="includes the new workers' interpreter start-up (next row)",
            error=contest.error("ours", "torchrun"),
        ),
        Row(
            FIGURE,
            f"restart latency, workers that take {LIGHTNING_TERM_S:g} s to exit on SIGTERM (as Lightning)",
            "s",
            slow.summary("ours"),
            slow.summary("torchrun"),
            [Target("max", 0.5, strict=True)],
            note="the other ranks get --failure-stop-grace (0.2 s), then SIGKILL",
            error=slow.error("ours", "torchrun"),
        ),
        Row(
            FIGURE,
            "  of which worker interpreter start-up (spawn to first statement, no launcher)",
            "s",
            summarize(startup),
            None,
            note="property of the worker, same under both launchers",
        ),
    ]
