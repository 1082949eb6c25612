"""Figure 6: launcher CPU in the steady state, while workers train and while they sleep.

Only the launcher processes themselves are counted (their threads' run time from
/proc/<pid>/task/*/schedstat, nanosecond resolution; not their children), over the
steady window that rank 0 marks with stamps, so start-up (imports, rendezvous, health
check) and shutdown are outside it. The window is cut into slices; each slice is one
sample of percent-of-one-core.

Two contests, each run with its contenders side by side (a launcher's CPU is its own
polling and bookkeeping, which the other jobs do not change, and measuring side by side
saves wall time):

- **train**: 2 workers train (gloo DDP, torch imported) and print a line every 20
  steps. slurm-ft runs with its per-cycle applog (it reads every worker line); torchrun
  with its defaults (workers write to the inherited stdout, the agent never touches it).
- **sleep** (issue 19's idle cost): the workers neither print nor fail, so what is left
  is the launcher's own periodic work: one node (beside torchrun), and both launchers
  of a 2-node job (node 0 also hosts the store and watches its peer's heart-beat).

The physical reference of the sleep rows is zero (a launcher whose workers neither fail
nor print needs no CPU); goals (issue 19): 0.05 % on one node, 0.1 % on node 0 of 2.
Reading every line as it comes costs one wake-up per line, which is not zero: the train
row's reference is a bare reader (``workers/bare_reader.py``: poll, read, writev, one
thread per pipe) fed the same number of lines a second as our launcher read, measured
right after; its target (ours) is at most 1.5x that reference.
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import launchers, proc
from benchmarks.harness import WORKERS, Context
from benchmarks.stats import Row, Summary, Target, summarize

FIGURE = 6
TRAIN_SCRIPT = WORKERS / "train_worker.py"
SLEEP_SCRIPT = WORKERS / "sleep_worker.py"
NPROC = 2
GOAL_ONE_NODE = 0.05
GOAL_NODE0_OF_2 = 0.1
GOAL_OVER_BARE_READER = 1.5
REFERENCE = "0 (an idle launcher needs no CPU)"
BARE_READER = WORKERS / "bare_reader.py"


@dataclass(frozen=True)
class Job:
    """One contender: the launchers of one job (one per node) and the directory where its
    rank 0 marks the steady window."""

    launchers: list[tuple[list[str], dict[str, str]]]
    stamps_dir: Path
    applog_dir: Path | None = None  # where its cycle logs go (they count the lines read)


def measure(job: Job, seconds: float, window: float) -> list[list[float]]:
    """Percent-of-one-core samples, one list per launcher of the job."""
    started = [proc.start(cmd, env) for cmd, env in job.launchers]
    processes = [p for p, _, _ in started]
    try:
        start, end = job.stamps_dir / "train-start", job.stamps_dir / "train-end"

        def all_running() -> bool:
            return all(proc.running(p) for p in processes)

        proc.wait_for(lambda: start.exists() or not all_running(), 180, "the steady window to start", 0.02)
        if not all_running():
            raise proc.BenchError(f"{Path(job.launchers[0][0][0]).name} exited before the window started")
        samples: list[list[float]] = [[] for _ in processes]
        last_t, last_cpu = time.perf_counter(), [proc.threads_cpu_s(p.pid) for p in processes]
        while not end.exists() and all_running():
            time.sleep(0.05)
            now = time.perf_counter()
            if now - last_t >= window or end.exists():
                cpu = [proc.threads_cpu_s(p.pid) for p in processes]
                for i in range(len(processes)):
                    # a thread that exited takes its time with it: skip that slice
                    if now - last_t >= window / 2 and cpu[i] >= last_cpu[i]:
                        samples[i].append(100.0 * (cpu[i] - last_cpu[i]) / (now - last_t))
                last_t, last_cpu = now, cpu
        for p, wall0, perf0 in started:
            finished = proc.finish(p, wall0, perf0, timeout=seconds + 120)
            if finished.returncode != 0:
                raise proc.BenchError(f"{Path(str(p.args[0])).name} exited {finished.returncode}")
        if not all(samples):
            raise proc.BenchError("no complete measurement window")
        return samples
    finally:
        for p in processes:
            if p.returncode is None:
                proc.kill_group(p)


Samples = dict[str, list[list[float]]]  # job -> one list per launcher


def contest(
    ctx: Context, jobs: dict[str, Job], seconds: float, window: float
) -> tuple[Samples, dict[str, str]]:
    """Measure every job at once; per job, its launchers' samples or its error."""
    results: Samples = {}
    errors: dict[str, str] = {}

    def one(name: str, job: Job) -> None:
        try:
            results[name] = measure(job, seconds, window)
        except Exception as exc:  # reported in the row
            errors[name] = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=one, args=item, daemon=True) for item in jobs.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    proc.reap_marked(ctx.marker)
    return results, errors


def one_node(ctx: Context, script: Path, seconds: float, *, applog: bool) -> Job:
    stamps_dir, state = ctx.scratch("cpu-ours"), ctx.scratch("state")
    env = launchers.ours_env(
        ctx,
        nproc=NPROC,
        state_dir=state,
        applog_prefix=state / "train.log" if applog else None,
        extra={"BENCH_STAMPS": str(stamps_dir), "BENCH_TRAIN_SECONDS": f"{seconds:g}"},
    )
    return Job([(launchers.ours(ctx, script), env)], stamps_dir, state if applog else None)


def torchrun_one_node(ctx: Context, script: Path, seconds: float) -> Job:
    stamps_dir = ctx.scratch("cpu-torchrun")
    env = ctx.env(BENCH_STAMPS=str(stamps_dir), BENCH_TRAIN_SECONDS=f"{seconds:g}")
    return Job([(launchers.torchrun_standalone(ctx, NPROC, script), env)], stamps_dir)


def two_nodes(ctx: Context, script: Path, seconds: float) -> Job:
    stamps_dir, submit = ctx.scratch("cpu-2nodes"), ctx.scratch("submit")
    cmds_envs = launchers.ours_nodes(
        ctx,
        script,
        nnodes=2,
        nproc=NPROC,
        submit=submit,
        port=proc.free_port(),
        job_id="6006",
        extra={
            "BENCH_STAMPS": str(stamps_dir),
            "BENCH_TRAIN_SECONDS": f"{seconds:g}",
            "SLURM_FT_APPLOG_PREFIX": str(submit / "train.log"),
        },
    )
    return Job(cmds_envs, stamps_dir)


def lines_per_second(job: Job, seconds: float) -> float:
    """What the job's launcher read: the lines of its cycle logs over the training time."""
    if job.applog_dir is None:
        raise proc.BenchError("the job has no application log")
    lines = 0
    for log in job.applog_dir.glob("train_cycle*.log"):
        with log.open("rb") as fh:
            lines += sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    if not lines:
        raise proc.BenchError("the training job's cycle log is empty")
    return lines / seconds


def bare_reader(ctx: Context, rate: float, seconds: float, runs: int) -> Summary:
    """Percent of one core a bare reader spends on ``rate`` lines a second (one sample a run)."""
    samples = []
    for _ in range(runs):
        out = ctx.scratch("bare-reader") / "lines.log"
        cmd = [ctx.python, str(BARE_READER), f"{rate:.3f}", f"{seconds:g}", str(out)]
        done = subprocess.run(
            cmd, env=ctx.env(), capture_output=True, text=True, timeout=seconds + 60, check=False
        )
        if done.returncode != 0:
            raise proc.BenchError(f"bare_reader.py exited {done.returncode}: {done.stderr.strip()[-200:]}")
        samples.append(float(done.stdout.strip()))
    return summarize(samples)


def _summary(results: Samples, name: str, launcher: int = 0) -> Summary | None:
    return summarize(results[name][launcher]) if name in results else None


def _error(errors: dict[str, str], *names: str) -> str | None:
    return "; ".join(f"{k}: {v}" for k, v in errors.items() if k in names) or None


def run(ctx: Context, seconds: float | None = None) -> list[Row]:
    seconds = seconds or (4.0 if ctx.quick else 60.0)
    window = 1.0 if ctx.quick else 10.0
    idle_seconds, idle_window = (4.0, 1.0) if ctx.quick else (30.0, 5.0)

    train = {"ours": one_node(ctx, TRAIN_SCRIPT, seconds, applog=True)}
    if not ctx.quick:  # --quick measures our side only (each side costs two torch imports)
        train["torchrun"] = torchrun_one_node(ctx, TRAIN_SCRIPT, seconds)
    trained, train_errors = contest(ctx, train, seconds, window)

    idle = {
        "ours": one_node(ctx, SLEEP_SCRIPT, idle_seconds, applog=True),
        "torchrun": torchrun_one_node(ctx, SLEEP_SCRIPT, idle_seconds),
        "two nodes": two_nodes(ctx, SLEEP_SCRIPT, idle_seconds),
    }
    slept, idle_errors = contest(ctx, idle, idle_seconds, idle_window)

    rate, floor, floor_error = 0.0, None, None
    try:
        rate = lines_per_second(train["ours"], seconds)
        floor = bare_reader(ctx, rate, window, ctx.runs(3, 1))
    except (proc.BenchError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
        floor_error = f"bare reader: {type(exc).__name__}: {exc}"

    sleeping = f"workers sleep ({idle_seconds:g} s, silent)"
    two = _error(idle_errors, "two nodes")
    return [
        _row(
            f" while 2 workers train ({seconds:g} s)",
            (_summary(trained, "ours"), _summary(trained, "torchrun")),
            [Target("ref_ratio_max", GOAL_OVER_BARE_READER)],
            f"slurm-ft with its applog on, reading {rate:.1f} lines/s; time-slice samples; both jobs at once",
            _error(train_errors, "ours", "torchrun") or floor_error,
            (floor, f"a bare reader of {rate:.1f} lines/s (one wake-up per line)"),
        ),
        _row(
            f", one node, 2 {sleeping}",
            (_summary(slept, "ours"), _summary(slept, "torchrun")),
            [Target("max", GOAL_ONE_NODE)],
            "applog on; the three idle jobs of this figure run at once",
            _error(idle_errors, "ours", "torchrun"),
        ),
        _row(
            f", node 0 of 2 (store host), 2 {sleeping} per node",
            (_summary(slept, "two nodes", 0), None),
            [Target("max", GOAL_NODE0_OF_2)],
            "simulated 2-node job on this machine; heart-beat every 1 s",
            two,
        ),
        _row(
            f", node 1 of 2, 2 {sleeping} per node",
            (_summary(slept, "two nodes", 1), None),
            [],
            "the same job's other launcher: beats every 1 s, store watchdog",
            two,
        ),
    ]


def _row(
    what: str,
    sides: tuple[Summary | None, Summary | None],
    targets: list[Target],
    note: str,
    error: str | None,
    reference: tuple[Summary | None, str] = (None, REFERENCE),
) -> Row:
    """One row of percent-of-one-core: ours and torchrun's (if measured), its targets and
    physical reference."""
    ours, theirs = sides
    metric = f"launcher CPU{what}, percent of one core"
    return Row(
        FIGURE,
        metric,
        "%",
        ours,
        theirs,
        targets,
        note=note,
        error=error,
        reference=reference[0],
        reference_label=reference[1],
    )
