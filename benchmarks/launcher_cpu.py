"""Figure 6: launcher CPU while 2 workers train (gloo DDP, torch imported).

Only the launcher process itself is counted (its threads' run time from
/proc/<pid>/task/*/schedstat, nanosecond resolution; not its children), over the steady
training window that rank 0 marks with stamps, so start-up (imports, rendezvous, health
check) and shutdown are outside it. The window is cut into slices (10 s; with --quick
1 s slices of 4 s, slurm-ft only); each slice is one sample of percent-of-one-core.
slurm-ft runs with its per-cycle applog (it reads every worker line); torchrun with its
defaults (workers write to the inherited stdout, the agent never touches it).

Both launchers run at the same time, each with its own 2 workers: a launcher's CPU is
its own polling and bookkeeping, which the other job does not change, and measuring
side by side halves the wall time of the figure. The physical reference is zero (a
launcher whose workers neither fail nor print needs no CPU); goal (issue 19): 0.05 %.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from benchmarks import launchers, proc
from benchmarks.harness import WORKERS, Context
from benchmarks.stats import Row, Target, summarize

FIGURE = 6
SCRIPT = WORKERS / "train_worker.py"
NPROC = 2
GOAL_PERCENT = 0.05


def measure(
    cmd: list[str], env: dict[str, str], stamps_dir: Path, seconds: float, window: float
) -> list[float]:
    process, wall0, perf0 = proc.start(cmd, env)
    try:
        start = stamps_dir / "train-start"
        end = stamps_dir / "train-end"
        proc.wait_for(lambda: start.exists() or not proc.running(process), 180, "training to start", 0.02)
        if not proc.running(process):
            raise proc.BenchError(f"{Path(cmd[0]).name} exited before training started")
        samples: list[float] = []
        last_t, last_cpu = time.perf_counter(), proc.threads_cpu_s(process.pid)
        while not end.exists() and proc.running(process):
            time.sleep(0.05)
            now = time.perf_counter()
            if now - last_t >= window or end.exists():
                cpu = proc.threads_cpu_s(process.pid)
                # a thread that exited takes its time with it: skip that slice
                if now - last_t >= window / 2 and cpu >= last_cpu:
                    samples.append(100.0 * (cpu - last_cpu) / (now - last_t))
                last_t, last_cpu = now, cpu
        finished = proc.finish(process, wall0, perf0, timeout=seconds + 120)
        if finished.returncode != 0:
            raise proc.BenchError(f"{Path(cmd[0]).name} exited {finished.returncode}")
        if not samples:
            raise proc.BenchError("no complete measurement window")
        return samples
    finally:
        if process.returncode is None:
            proc.kill_group(process)


def contenders(ctx: Context, seconds: float) -> dict[str, tuple[list[str], dict[str, str], Path]]:
    train = {"BENCH_TRAIN_SECONDS": f"{seconds:g}"}
    out = {}
    stamps_dir, state = ctx.scratch("cpu-ours"), ctx.scratch("state")
    env = launchers.ours_env(
        ctx,
        nproc=NPROC,
        state_dir=state,
        applog_prefix=state / "train.log",
        extra={"BENCH_STAMPS": str(stamps_dir), **train},
    )
    out["ours"] = (launchers.ours(ctx, SCRIPT), env, stamps_dir)
    if not ctx.quick:  # --quick measures our side only (each side costs two torch imports)
        stamps_dir = ctx.scratch("cpu-torchrun")
        env = ctx.env(BENCH_STAMPS=str(stamps_dir), **train)
        out["torchrun"] = (launchers.torchrun_standalone(ctx, NPROC, SCRIPT), env, stamps_dir)
    return out


def run(ctx: Context, seconds: float | None = None) -> list[Row]:
    seconds = seconds or (4.0 if ctx.quick else 60.0)
    window = 1.0 if ctx.quick else 10.0
    results: dict[str, list[float]] = {}
    errors: dict[str, str] = {}

    def one(name: str, cmd: list[str], env: dict[str, str], stamps_dir: Path) -> None:
        try:
            results[name] = measure(cmd, env, stamps_dir, seconds, window)
        except Exception as exc:  # reported in the row
            errors[name] = f"{type(exc).__name__}: {exc}"

    threads = [
        threading.Thread(target=one, args=(name, *spec), daemon=True)
        for name, spec in contenders(ctx, seconds).items()
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [
        Row(
            FIGURE,
            f"launcher CPU while 2 workers train ({seconds:g} s), percent of one core",
            "%",
            summarize(results["ours"]) if "ours" in results else None,
            summarize(results["torchrun"]) if "torchrun" in results else None,
            [Target("max", GOAL_PERCENT)],
            note="slurm-ft with its applog on; samples are time slices; both jobs run at once",
            error="; ".join(f"{k}: {v}" for k, v in errors.items()) or None,
            reference_label="0 (an idle launcher needs no CPU)",
        )
    ]
