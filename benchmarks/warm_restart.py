"""Figure 10: time to first step after a failure (issue 27: warm restarts).

2 simulated nodes x 2 workers of a real gloo DDP trainer that imports torch, initialises its
process group, loads its checkpoint and runs a step (``workers/warm_ddp.py``). One rank dies
once the cycle is under way; the figure is the time from its death stamp to the last rank of
the next cycle finishing its first step. Three contenders in the same run, interleaved:
slurm-ft with standby workers (the default), slurm-ft with ``--preload none`` (every worker
cold), and torchrun (two agents, c10d, ``--max-restarts=3``: its agents count restarts each on
their own, and a next cycle that fails to connect is restarted again, which it pays for).

The goal is relative to what no launcher can remove: the trainer's own process-group init
and checkpoint load (stamped by the trainer, the slowest rank's), shown on their own row;
``overhead`` is the first figure minus that.

    python -m benchmarks.warm_restart [--runs N]
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from benchmarks import cmdline, launchers, proc, table
from benchmarks.harness import WORKERS, Context, context, interleave
from benchmarks.stats import Row, Target, summarize
from benchmarks.workers import stamps

FIGURE = 10
SCRIPT = WORKERS / "warm_ddp.py"
NNODES, NPROC = 2, 2
VICTIM = 3  # node 1, local rank 1
SAMPLES: dict[str, list[float]] = {"ours-warm": [], "ours-cold": [], "torchrun": [], "rss": []}
RSS = re.compile(r"standby for local rank \d+ ready in [\d.]+ s \(.*, RSS (\d+) MiB\)")


def measure(directory: Path, key: str) -> float:
    """Death to the last rank's first step of the cycle that finished (a launcher whose
    next cycle fails too and is restarted again pays for that); the trainer's own part is
    kept aside."""
    found = stamps.read_all(directory)
    deaths = [v for k, v in found.items() if k.startswith("death-c0-")]
    last = {
        r: max(
            (int(k.split("-")[1][1:]) for k in found if k.startswith("step-c") and k.endswith(f"-r{r}")),
            default=0,
        )
        for r in range(NNODES * NPROC)
    }
    if len(deaths) != 1 or not all(last.values()):
        raise proc.BenchError(f"expected 1 death and a next-cycle step of every rank, got {sorted(found)}")
    own = max(found[f"pg-c{c}-r{r}"] + found[f"load-c{c}-r{r}"] for r, c in last.items())
    SAMPLES[key].append(own)
    return max(found[f"step-c{c}-r{r}"] for r, c in last.items()) - deaths[0]


def ours_once(ctx: Context, warm: bool) -> float:
    directory = ctx.scratch("stamps")
    submit = ctx.scratch("submit")
    port, job_id = proc.free_port(), str(uuid.uuid4().int % 10**8)
    logs = [submit / f"launcher-{node}.log" for node in range(NNODES)]
    extra = {"BENCH_STAMPS": str(directory), "BENCH_VICTIM_RANK": str(VICTIM), "BENCH_CKPT": str(submit)}
    if warm:
        extra.update(BENCH_READY_LOGS=",".join(map(str, logs)), BENCH_READY_COUNT=str(NPROC))
    else:
        extra["SLURM_FT_LAUNCH_PRELOAD"] = "none"
    cmds = launchers.ours_nodes(
        ctx, SCRIPT, nnodes=NNODES, nproc=NPROC, submit=submit, port=port, job_id=job_id, extra=extra
    )
    for (_, env), log in zip(cmds, logs, strict=True):
        env["SLURM_FT_APPLOG_LAUNCHER_LOG"] = str(log)
    launchers.run_agents(ctx, cmds, directory.parent / f"{directory.name}.log", timeout=300)
    for log in logs if warm else ():
        SAMPLES["rss"].extend(float(m.group(1)) for m in RSS.finditer(log.read_text()))
    return measure(directory, "ours-warm" if warm else "ours-cold")


def torchrun_once(ctx: Context) -> float:
    directory = ctx.scratch("stamps")
    port, run_id = proc.free_port(), uuid.uuid4().hex[:8]
    env = ctx.env(
        BENCH_STAMPS=str(directory), BENCH_VICTIM_RANK=str(VICTIM), BENCH_CKPT=str(ctx.scratch("ckpt"))
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
                max_restarts=3,
                script=SCRIPT,
            ),
            env,
        )
        for node in range(NNODES)
    ]
    launchers.run_agents(ctx, cmds, directory.parent / f"{directory.name}.log", timeout=300)
    return measure(directory, "torchrun")


def run(ctx: Context, runs: int | None = None) -> list[Row]:
    for samples in SAMPLES.values():
        samples.clear()
    contest = interleave(
        {
            "warm": lambda: ours_once(ctx, True),
            "cold": lambda: ours_once(ctx, False),
            "torchrun": lambda: torchrun_once(ctx),
        },
        runs=runs or ctx.runs(3, 1),
        warmup=0,
    )
    warm, cold = contest.summary("warm"), contest.summary("cold")
    own = summarize(SAMPLES["ours-warm"]) if SAMPLES["ours-warm"] else None
    overhead = (
        summarize([a - b for a, b in zip(warm.samples, SAMPLES["ours-warm"], strict=True)])
        if warm is not None and own is not None
        else None
    )
    return [
        Row(
            FIGURE,
            "time to first step after a failure, standby workers (2 nodes x 2, gloo DDP, imports torch)",
            "s",
            warm,
            contest.summary("torchrun"),
            [Target("ratio_max", 0.2)],
            note="rank death to the last rank's first step of the next cycle",
            error=contest.error("warm", "torchrun"),
        ),
        Row(
            FIGURE,
            "  the same, every worker cold (--preload none)",
            "s",
            cold,
            contest.summary("torchrun"),
            note="what the standbys save: interpreter start-up and import torch",
            error=contest.error("cold", "torchrun"),
        ),
        Row(
            FIGURE,
            "  of which the trainer's own process-group init and checkpoint load (standbys)",
            "s",
            own,
            None,
            note="slowest rank; property of the trainer, no launcher can remove it",
        ),
        Row(
            FIGURE,
            "  standby run minus the trainer's own part",
            "s",
            overhead,
            None,
            [Target("max", 0.5)],
        ),
        Row(
            FIGURE,
            "  resident memory of one standby (torch and what DDP imports on first use)",
            "MiB",
            summarize(SAMPLES["rss"]) if SAMPLES["rss"] else None,
            None,
            note="from the launcher log's ready line; CPU while waiting: none (test_standby_workers)",
        ),
    ]


def main() -> int:
    parser = cmdline.Parser(prog="python -m benchmarks.warm_restart", description=__doc__)
    parser.add_argument("--runs", type=cmdline.positive_int, default=3)
    args = parser.parse_args()
    with context(False) as ctx:
        rows = run(ctx, args.runs)
    table.print_rich({"rows": [r.to_json() for r in rows], "date": "", "machine": {}})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
