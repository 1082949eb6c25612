"""What the health check while training costs (issue 34, item 3: ``--health-check-interval``).

Two measurements, printed as one small table (not a figure of ``python -m benchmarks``:
run it alone, ``python -m benchmarks.health_interval_cpu``):

- **per run**: the launcher's run while workers train (``launch.companions.training_checks``'s
  call: the ``storage`` and ``gpu`` families, the launcher's own directories as near
  paths, mount discovery on) repeated in this process; CPU of every thread of the process
  (``time.process_time``, which keeps the time of threads that ended) plus that of the
  probe children it reaped (``RUSAGE_CHILDREN``), divided by the runs. Once as this
  machine is (its paths on local disks: probed in-process; no NVML: the GPU family skips
  in about a millisecond), once with one more path that is not on a local disk, so it
  takes a probe child, as each Lustre or NFS path and each discovered mount does.
- **launcher**: one launcher, 2 silent sleeping workers, the default checks (nic, storage,
  gpu), three jobs side by side: the check while training off, every 10 s, every 1 s.
  CPU of the launcher process (utime + stime, exited threads included) plus its reaped
  children (cutime + cstime: the probe children; the workers are alive, so not in it),
  from /proc/<pid>/stat over the steady window that rank 0 marks; clock ticks (10 ms) are
  fine over a 60 s window.
"""

from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path

from benchmarks import cmdline, launcher_cpu, proc
from benchmarks.harness import Context, context
from slurm_ft.config import HealthSettings
from slurm_ft.health import run_checks

INTERVALS = (0.0, 10.0, 1.0)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def per_run_ms(runs: int, extra_paths: list[str]) -> tuple[float, float]:
    """(CPU ms, wall ms) of one run, averaged over ``runs``."""
    with tempfile.TemporaryDirectory(prefix="health-cpu-") as tmp:
        settings = HealthSettings(checks=["storage", "gpu"], paths=extra_paths)
        near = [str(Path(tmp) / "state"), str(Path(tmp) / "logs")]
        run_checks(settings, node_name="bench", expected_gpus=None, near_paths=near, foreign_memory=False)
        cpu0, kids0, wall0 = time.process_time(), _children_cpu_s(), time.perf_counter()
        for _ in range(runs):
            report = run_checks(
                settings, node_name="bench", expected_gpus=None, near_paths=near, foreign_memory=False
            )
            if not report.healthy:
                raise proc.BenchError(f"unhealthy: {report.first_failure}")
        cpu = time.process_time() - cpu0 + _children_cpu_s() - kids0
        wall = time.perf_counter() - wall0
    return 1000.0 * cpu / runs, 1000.0 * wall / runs


def _stat_cpu_s(pid: int) -> float:
    """utime + stime + cutime + cstime of ``pid``: itself, its ended threads, its reaped children."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rfind(")") + 2 :].split()
    return sum(int(fields[k]) for k in (11, 12, 13, 14)) / proc.CLK_TCK


def launcher_percent(ctx: Context, seconds: float) -> dict[float, float]:
    """Percent of one core of a launcher with the check every S s (0: off), measured side by side."""
    jobs = {}
    for every in INTERVALS:
        job = launcher_cpu.one_node(ctx, launcher_cpu.SLEEP_SCRIPT, seconds, applog=True)
        cmd, env = job.launchers[0]
        env["SLURM_FT_HEALTH_CHECK_INTERVAL"] = f"{every:g}"
        jobs[every] = (job, proc.start(cmd, env))
    try:
        starts = {e: j.stamps_dir / "train-start" for e, (j, _) in jobs.items()}
        ends = {e: j.stamps_dir / "train-end" for e, (j, _) in jobs.items()}
        first: dict[float, tuple[float, float]] = {}
        last: dict[float, tuple[float, float]] = {}
        deadline = time.monotonic() + seconds + 180
        while len(last) < len(jobs) and time.monotonic() < deadline:
            for every, (_, (p, _, _)) in jobs.items():
                if every not in first and starts[every].exists():
                    first[every] = (time.perf_counter(), _stat_cpu_s(p.pid))
                elif every in first and every not in last:
                    if ends[every].exists():
                        last[every] = (time.perf_counter(), _stat_cpu_s(p.pid))
                    elif p.poll() is not None:
                        raise proc.BenchError(f"the launcher with interval {every:g} exited early")
            time.sleep(0.05)
        if len(last) < len(jobs):
            raise proc.BenchError("no complete window")
        for _, (p, wall0, perf0) in jobs.values():
            if proc.finish(p, wall0, perf0, timeout=120).returncode != 0:
                raise proc.BenchError("a launcher failed")
        return {e: 100.0 * (last[e][1] - first[e][1]) / (last[e][0] - first[e][0]) for e in jobs}
    finally:
        for _, (p, _, _) in jobs.values():
            if p.returncode is None:
                proc.kill_group(p)
        proc.reap_marked(ctx.marker)


def main(argv: list[str] | None = None) -> int:
    parser = cmdline.Parser(prog="python -m benchmarks.health_interval_cpu", description=__doc__)
    parser.add_argument(
        "--runs", type=cmdline.positive_int, default=200, help="runs averaged per row (default 200)"
    )
    parser.add_argument(
        "--seconds", type=cmdline.positive_float, default=60.0, help="the launchers' window (default 60)"
    )
    args = parser.parse_args(argv)
    local_cpu, local_wall = per_run_ms(args.runs, [])
    child_cpu, child_wall = per_run_ms(args.runs, ["/proc/self"])  # procfs: not a local disk
    rows = [
        (
            "one run, this machine (paths on local disks, no NVML)",
            f"{local_cpu:.2f} ms",
            f"{local_wall:.2f} ms",
        ),
        ("one run, + 1 path off local disks (a probe child)", f"{child_cpu:.2f} ms", f"{child_wall:.2f} ms"),
    ]
    with context(quick=False) as ctx:
        percent = launcher_percent(ctx, args.seconds)
    for every, value in percent.items():
        label = "off" if every == 0 else f"every {every:g} s"
        what = f"launcher, 2 sleeping workers, {args.seconds:g} s, check while training {label}"
        rows.append((what, f"{value:.3f} % of one core", ""))
    print("| what | CPU | wall |\n|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
