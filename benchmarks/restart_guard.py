"""What the no-progress guard adds to a restart. Goal: at most 0.1 s.

Two measurements, each with and without a progress source, interleaved run by run:

1. the launcher, end to end: the restart latency of ``restart_latency`` (2 simulated nodes
   x 2 workers, one worker dies; worker death to the last next-cycle worker started), once
   with ``--progress-source file:SNAPSHOT`` on a snapshot the dying cycle did not replace
   (a cycle without progress that does not stop the job: before progress sources this
   waited about a second), once without a source;
2. the guard alone, as node 0 calls it on the restart path (``after_cycle`` then
   ``before_cycle``), with the early look begun when the cycle ends (``begin_reading``)
   overlapping a worker stop of ``STOP_S``, and without it. The launcher loop gains the
   early look once ``begin_reading`` is wired in (see the report of issue 15); until then
   figure 1 measures the guard taking its one look inside ``after_cycle``.

    python -m benchmarks.restart_guard [--runs N]
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks import cmdline, harness, launchers, proc, restart_latency
from benchmarks.stats import summarize

TARGET_S = 0.1
STOP_S = 0.05  # a worker's SIGTERM-to-exit, during which the early look runs


def launcher_once(ctx: harness.Context, source: str | None) -> float:
    directory = ctx.scratch("stamps")
    submit = ctx.scratch("submit")
    extra_node: dict[str, str] = {}
    if source is not None:
        snapshot = submit / "snapshot.pt"
        snapshot.write_bytes(b"a snapshot the failing cycle never replaces")
        extra_node["SLURM_FT_PROGRESS_SOURCE"] = f"file:{snapshot}"
    port, job_id = proc.free_port(), str(uuid.uuid4().int % 10**8)
    cmds = []
    for node in range(restart_latency.NNODES):
        env = launchers.ours_env(
            ctx,
            nproc=restart_latency.NPROC,
            state_dir=submit / "state",
            max_restarts=1,
            extra={
                **launchers.simulated_node(job_id, restart_latency.NNODES, node, submit),
                "SLURM_FT_LAUNCH_RDZV_PORT": str(port),
                "BENCH_STAMPS": str(directory),
                "BENCH_VICTIM_RANK": str(restart_latency.VICTIM),
                **extra_node,
            },
        )
        cmds.append((launchers.ours(ctx, restart_latency.SCRIPT), env))
    launchers.run_agents(ctx, cmds, directory.parent / f"{directory.name}.log")
    return restart_latency.latency(directory)


def guard_once(work: Path, with_source: bool, early: bool) -> float:
    """Seconds the guard adds to one restart (the stop itself excluded)."""
    from slurm_ft.config import ProgressSettings
    from slurm_ft.progress import ProgressTracker
    from slurm_ft.statedir import StateDir

    state = Path(tempfile.mkdtemp(dir=work))
    snapshot = state / "snapshot.pt"
    snapshot.write_bytes(b"x" * 4096)
    settings = ProgressSettings(source=f"file:{snapshot}" if with_source else None)
    tracker = ProgressTracker(StateDir(state / "state"), settings, 0)
    tracker.start_line()
    assert tracker.before_cycle(0) is None
    if early:
        tracker.begin_reading()
    time.sleep(STOP_S)  # the workers being stopped
    started = time.perf_counter()
    tracker.after_cycle(0, "worker-failed")
    assert tracker.before_cycle(1) is None
    return time.perf_counter() - started


def main() -> int:
    parser = cmdline.Parser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=cmdline.positive_int, default=5, help="launcher runs per side (the guard alone: x10)"
    )
    parser.add_argument("--skip-launcher", action="store_true", help="only the guard alone")
    args = parser.parse_args()
    with harness.context(quick=False) as ctx:
        alone = harness.interleave(
            {
                "none": lambda: guard_once(ctx.workdir, False, False),
                "file, early look": lambda: guard_once(ctx.workdir, True, True),
                "file, look in after_cycle": lambda: guard_once(ctx.workdir, True, False),
            },
            runs=10 * args.runs,
        )
        contest = None
        if not args.skip_launcher:
            contest = harness.interleave(
                {"none": lambda: launcher_once(ctx, None), "file": lambda: launcher_once(ctx, "file")},
                runs=args.runs,
            )

    def ms(x: float) -> str:
        return f"{x * 1e3:.0f} ms"

    worst = 0.0
    base = summarize(alone.samples["none"]).median
    print(f"guard alone, after_cycle + before_cycle (after a {ms(STOP_S)} stop):")
    for name, values in alone.samples.items():
        s = summarize(values)
        print(f"  {name:28s} median {ms(s.median)} (min {ms(s.min)}, max {ms(s.max)})")
        worst = max(worst, s.median - base) if name == "file, early look" else worst
    if contest is not None:
        off, on = summarize(contest.samples["none"]), summarize(contest.samples["file"])
        print("launcher restart latency, worker death to last next-cycle worker started (2 nodes x 2):")
        print(
            f"  no progress source           median {ms(off.median)} (min {ms(off.min)}, max {ms(off.max)})"
        )
        print(f"  file: source, no progress    median {ms(on.median)} (min {ms(on.min)}, max {ms(on.max)})")
        print(f"  added by the guard           {ms(on.median - off.median)}")
        worst = max(worst, on.median - off.median)
    verdict = "meets" if worst <= TARGET_S else "MISSES"
    print(f"target: the guard adds <= {ms(TARGET_S)} to a restart: {verdict}")
    return 0 if worst <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
