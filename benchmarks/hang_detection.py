"""Figure 7: hang detection. Detection latency on 2 simulated nodes x 2 workers (from the
moment the whole job went silent to the last worker stopped, minus the configured
timeout: what detection, stack collection and the stop add), and the cost of the
trainer-side calls of ``slurm_ft.worker``."""

from __future__ import annotations

import subprocess
import uuid

from benchmarks import launchers, proc
from benchmarks.harness import WORKERS, Context, repeat
from benchmarks.stats import Row, Target, summarize
from benchmarks.workers import stamps

FIGURE = 7
SCRIPT = WORKERS / "hang_worker.py"
NNODES, NPROC = 2, 2
HANG_TIMEOUT = 2.0
TIMEOUT = 120.0
CALLS = 200_000

API_COST = r"""
import os, sys, time
from slurm_ft import worker
assert worker._slot is not None, "no slot"
n = int(sys.argv[1])
for name, call in (("heartbeat", worker.heartbeat),):
    best = None
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            call()
        per = (time.perf_counter() - t) / n
        best = per if best is None else min(best, per)
    print(name, best)
best = None
for _ in range(5):
    t = time.perf_counter()
    for _ in range(n):
        with worker.section("step"):
            pass
    per = (time.perf_counter() - t) / n
    best = per if best is None else min(best, per)
print("section", best)
"""


def latency_once(ctx: Context) -> float:
    directory = ctx.scratch("stamps")
    submit = ctx.scratch("submit")
    port, job_id = proc.free_port(), str(uuid.uuid4().int % 10**8)
    log = directory.parent / f"{directory.name}.log"
    nodes = launchers.ours_nodes(
        ctx,
        SCRIPT,
        nnodes=NNODES,
        nproc=NPROC,
        submit=submit,
        port=port,
        job_id=job_id,
        extra={
            "SLURM_FT_HANG_TIMEOUT": str(HANG_TIMEOUT),
            "SLURM_FT_HEALTH_CHECKS": "none",
            "BENCH_STAMPS": str(directory),
        },
    )
    launchers.run_agents(ctx, nodes, log, TIMEOUT)
    found = stamps.read_all(directory)
    silent = [v for k, v in found.items() if k.startswith("silent-")]
    stopped = [v for k, v in found.items() if k.startswith("stopped-")]
    if len(silent) != NNODES * NPROC or len(stopped) != NNODES * NPROC:
        raise proc.BenchError(f"expected every rank to go silent and be stopped, got {sorted(found)}")
    return max(stopped) - max(silent) - HANG_TIMEOUT


def api_cost(ctx: Context) -> dict[str, float]:
    slot = ctx.scratch("slot") / "rank0.slot"
    from slurm_ft import worker

    worker.new_slot(str(slot))
    env = ctx.env(SLURM_FT_WORKER_MONITOR=str(slot))
    done = subprocess.run(
        [ctx.python, "-c", API_COST, str(ctx.runs(CALLS, CALLS // 10))],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise proc.BenchError(f"API cost probe failed: {done.stderr.strip()[-300:]}")
    return {name: float(value) * 1e6 for name, value in (line.split() for line in done.stdout.splitlines())}


def run(ctx: Context) -> list[Row]:
    latency = repeat(lambda: latency_once(ctx), runs=ctx.runs(3, 1), warmup=0)
    costs = [api_cost(ctx) for _ in range(ctx.runs(3, 1))]
    return [
        Row(
            FIGURE,
            f"hang detection: job silent to workers stopped, minus the timeout ({NNODES} nodes x {NPROC})",
            "s",
            summarize(latency),
            None,
            [Target("max", 1.0, strict=True)],
            note="includes asking every worker for its stacks before the stop",
        ),
        Row(
            FIGURE,
            "  slurm_ft.worker.heartbeat() per call",
            "us",
            summarize([c["heartbeat"] for c in costs]),
            None,
            [Target("max", 2.0, strict=True)],
        ),
        Row(
            FIGURE,
            "  with slurm_ft.worker.section(name): (enter + exit) per use",
            "us",
            summarize([c["section"] for c in costs]),
            None,
            [Target("max", 2.0)],
        ),
    ]
