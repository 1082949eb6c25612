"""The node launchers' CPU and memory while snapshots flow (#43's cost, #44's replicas).

Three 2-node jobs of real launchers (simulated nodes on loopback addresses, one worker
each, ``benchmarks/workers/snapshot_steps.py``), one after another: the workers never
snapshot; they snapshot their shard of ``--mib`` MiB every step; they do and
``--snapshot-replicas 1`` keeps each node's shard in the other's memory. Once both workers
have stepped, each launcher's CPU (utime + stime of the launcher process itself, all its
threads, none of its workers) is read over ``--window-s`` seconds, and its RSS at the end.

    python -m benchmarks.snapshot_launcher [--mib 256] [--window-s 20] [--json PATH]
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import cmdline, launchers, proc
from benchmarks.harness import WORKERS, Context, context
from benchmarks.snapshot_replicas import rss_mib, shm_mapped_mib

SCRIPT = WORKERS / "snapshot_steps.py"


@dataclass(frozen=True)
class Launchers:
    job: str
    mib: int
    cpu_pct: list[float]  # per node, percent of one core over the window
    rss_mib: list[float]  # per node, at the window's end: its own (anonymous and file) pages
    shm_mapped_mib: list[float]  # per node: slots it maps while sending or receiving (in /dev/shm)
    replicas_on: bool  # the launchers said they keep replicas


JOBS = (("no snapshots", False, False), ("snapshots", True, False), ("snapshots + replicas", True, True))


def one_job(ctx: Context, name: str, mib: int, replicas: bool, window_s: float, job_id: str) -> Launchers:
    submit = ctx.scratch("snaplauncher")
    ready = submit / "ready"
    ready.mkdir()
    port = proc.free_port()
    secret = secrets.token_hex(32)
    flags = ["--health-checks", "none", "--preload", "none", "--snapshot-replicas", "1" if replicas else "0"]
    started = []
    with open(submit / "log", "ab") as log:
        for node in range(2):
            env = launchers.ours_env(
                ctx,
                nproc=1,
                state_dir=submit / "state",
                extra={
                    **launchers.simulated_node(job_id, 2, node, submit),
                    "SLURM_FT_LAUNCH_RDZV_PORT": str(port),
                    "SLURM_FT_JOB_SECRET": secret,
                    "BENCH_MIB": str(mib),
                    "BENCH_SECONDS": str(window_s + 300),  # outlives a slow start: the launchers are stopped
                    "BENCH_READY": str(ready),
                },
            )
            started.append(
                proc.start(
                    [ctx.tool("slurm-ft-launch"), *flags, str(SCRIPT)],
                    env,
                    stdout=log.fileno(),
                    stderr=log.fileno(),
                )
            )
        try:
            deadline = time.monotonic() + 120
            while len(list(ready.iterdir())) < 2:
                if time.monotonic() > deadline or any(p.poll() is not None for p, _, _ in started):
                    raise proc.BenchError(
                        f"{name}: the workers did not step; {(submit / 'log').read_text()[-600:]!r}"
                    )
                time.sleep(0.1)
            pids = [p.pid for p, _, _ in started]
            cpu0 = [proc.self_cpu_s(pid) for pid in pids]
            t0 = time.monotonic()
            time.sleep(window_s)  # the measured window, not a wait for anything
            wall = time.monotonic() - t0
            if any(p.poll() is not None for p, _, _ in started):
                raise proc.BenchError(
                    f"{name}: a launcher ended in the window; {(submit / 'log').read_text()[-1500:]!r}"
                )
            cpu = [100 * (proc.self_cpu_s(pid) - c) / wall for pid, c in zip(pids, cpu0, strict=True)]
            rss = [rss_mib(pid) for pid in pids]
            shm = [shm_mapped_mib(pid) for pid in pids]
        finally:
            for p, _, _ in started:
                if p.poll() is None:
                    proc.kill_group(p)
            proc.reap_marked(ctx.marker)
    replicas_said = "keeping its shards' replicas" in (submit / "log").read_text(errors="replace")
    return Launchers(name, mib, cpu, rss, shm, replicas_said)


def main(argv: list[str] | None = None) -> int:
    parser = cmdline.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=cmdline.positive_int, default=256)
    parser.add_argument("--window-s", type=cmdline.positive_float, default=20.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    results = []
    with context(quick=False) as ctx:
        for k, (name, snapshots, replicas) in enumerate(JOBS):
            results.append(
                one_job(
                    ctx,
                    name,
                    args.mib if snapshots else 0,
                    replicas,
                    args.window_s,
                    f"77{os.getpid() % 1000}{k}",
                )
            )
    print(
        f"launcher CPU (% of one core) and RSS over {args.window_s:.0f} s, 2 simulated nodes, "
        f"{args.mib} MiB shard per step"
    )
    for r in results:
        print(
            f"{r.job:>22}: node 0 {r.cpu_pct[0]:.2f} % {r.rss_mib[0]:.0f} MiB (+{r.shm_mapped_mib[0]:.0f} "
            f"MiB of slots mapped); node 1 {r.cpu_pct[1]:.2f} % {r.rss_mib[1]:.0f} MiB "
            f"(+{r.shm_mapped_mib[1]:.0f})"
        )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
