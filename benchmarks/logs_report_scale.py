"""`slurm-ft-report` and `slurm-ft-logs` over a big job's state dir: 256, 1,024 and 4,096
nodes (issue #45, the last bullet).

The state dir and the per-node cycle logs are written by the launcher's own writers, as
each launcher of the job would write them: node 0's cycle records (opened, then closed
with the first failure), its ledger and timed progress readings, its outcome record; every
node's ``processes/cycle<N>/<node>.json`` (``records.NodeProcesses``) for every cycle; and
every node's cycle log (``--applog-per-node``) through the launcher's line framer
(``LineFramer``) and cycle file (``CycleFile``). What is simulated: the launchers
themselves (one process writes every node's files in turn), the worker output (a few
lines per rank and cycle: steps, one warning every rank prints, rank 0's loss, and the
failing rank's traceback), and the clock (the cycles' times are made up, 60 s apart).

The job: 4 ranks per node, ``--cycles`` cycles (default 4: three end in a worker's
failure, the last succeeds), one attempt. Each command runs ``--runs`` times (the fastest
is kept, page cache warm) with its output to a file; the figure is its wall time, the
interpreter's start included. The table says the files written per cycle, and how the
times grow from 256 to 4,096 nodes (16x the nodes).

    python -m benchmarks.logs_report_scale [--nodes 256,1024,4096] [--cycles 4] [--runs 3] [--snapshots]

``--snapshots``: the workers take snapshots, so every node also writes
``snapshots/cycle<N>/<node>.json`` (``records.NodeSnapshots``) at every cycle's end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import cmdline

NPROC = 4
T0 = 1_800_000_000.0
CYCLE_S = 60.0
STEPS = 6

COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("slurm-ft-report", ()),
    ("slurm-ft-report", ("--json",)),
    ("slurm-ft-report", ("--svg", "{out}.svg")),
    ("slurm-ft-logs", ("--list",)),
    ("slurm-ft-logs", ("--failure", "--cycle", "0")),
    ("slurm-ft-logs", ("--rank", "5")),
    ("slurm-ft-logs", ("--node", "{node}")),
    ("slurm-ft-logs", ("--tail", "20")),
    ("slurm-ft-logs", ("--collapse",)),
    ("slurm-ft-logs", ()),
)


def node_names(n: int) -> list[str]:
    return [f"n{k:05d}" for k in range(n)]


def worker_output(rank: int, cycle: int, failing: int | None) -> bytes:
    """What one rank printed in one cycle (the launcher frames it, rank prefix and all)."""
    lines = ["UserWarning: TypedStorage is deprecated"]
    for step in range(STEPS):
        lines.append(f"step {cycle * STEPS + step} done in 0.2{rank % 10} s")
        if rank == 0:
            lines.append(f"loss {1.0 / (1 + cycle * STEPS + step):.4f}")
    if rank == failing:
        lines += [
            "Traceback (most recent call last):",
            '  File "train.py", line 42, in <module>',
            "    loss.backward()",
            "RuntimeError: CUDA error: an illegal memory access was encountered",
        ]
    return ("\n".join(lines) + "\n").encode()


def write_job(
    state_path: Path, logs: Path, nodes: int, cycles: int, snapshots: bool = False
) -> dict[str, int]:
    """The job's state dir and logs, by the launcher's writers; the files written per cycle."""
    from slurm_ft import progress, records
    from slurm_ft.launch.output.applog import cycle_log_path
    from slurm_ft.launch.output.cyclefile import AppLogStats, CycleFile
    from slurm_ft.launch.output.eventlog import EventLog
    from slurm_ft.launch.output.framing import LineFramer
    from slurm_ft.logline import rank_width
    from slurm_ft.records import CycleOutcome, CycleRecord, Failure, FailureKind, LogFile
    from slurm_ft.statedir import StateDir

    state = StateDir(state_path)
    names = node_names(nodes)
    world = nodes * NPROC
    width = rank_width(world)
    run_uuid = "f" * 32
    prefix = str(logs / "job.log")
    entries = []
    before = _count_files(state_path)
    for c in range(cycles):
        start = T0 + c * CYCLE_S
        last = c == cycles - 1
        failing = None if last else (c * 997) % world
        files = [LogFile(str(cycle_log_path(prefix, c, k)), names[k], k) for k in range(nodes)]
        rec = CycleRecord(
            cycle=c, attempt=0, restart=c, run_id="4242-a0", run_uuid=run_uuid, start_time=start,
            nodes=names, world_size=world, nproc_per_node=NPROC, master_addr=names[0],
            master_port=29500, log_files=[f.to_json() for f in files],
        )  # fmt: skip
        records.write(state.cycle_record(c), rec)  # node 0, before the workers start
        for k, name in enumerate(names):
            workers = [records.WorkerProcess(k * NPROC + i, i, 10_000 + i, 1) for i in range(NPROC)]
            records.write(
                state.node_processes(c, name),
                records.NodeProcesses(c, name, k, "4242", run_uuid, 9_000, 1, start, workers),
            )
            out = CycleFile(Path(files[k].path), AppLogStats(), EventLog(None, name, quiet=True))
            for i in range(NPROC):
                rank = k * NPROC + i
                parts, n = LineFramer(rank, width, 64 * 1024).feed_parts(worker_output(rank, c, failing))
                out.write_parts(parts, sum(len(part) for part in parts), n)
            out.close()
            if snapshots:  # where its ranks resumed from, and its newest snapshot at the end
                source = records.SnapshotSource.MEMORY if c else records.SnapshotSource.NONE
                resumed = [
                    records.RankResume(w.rank, source, c * STEPS if c else None).to_json() for w in workers
                ]
                rec_s = records.NodeSnapshots(c, name, k, run_uuid, start + CYCLE_S, resumed, (c + 1) * STEPS)
                records.write(state.node_snapshots(c, name), rec_s)
        end = start + CYCLE_S - 5
        if failing is not None:
            node = failing // NPROC
            failure = Failure(
                kind=FailureKind.WORKER,
                node=names[node],
                node_rank=node,
                time=end - 2,
                rank=failing,
                exit_code=1,
                message="RuntimeError: CUDA error: an illegal memory access was encountered",
            )
            rec.first_failure = failure.to_json()
        rec.outcome = CycleOutcome.SUCCEEDED if last else CycleOutcome.FAILED
        rec.end_time = end
        records.write(state.cycle_record(c), rec)  # node 0, at the cycle's end
        for step in range(STEPS):
            records.append_reading(
                state.progress_readings,
                records.ProgressReading(start + 10 + 5 * step, (c * STEPS + step) * 10),
            )
        entries.append(
            progress.CycleEntry(
                cycle=c,
                attempt=0,
                iteration_start=c * STEPS * 10,
                iteration_end=(c * STEPS + STEPS - 1) * 10,
                outcome=rec.outcome.value,
                progressed=True,
                started_at=start,
                ended_at=end,
            )
        )
        progress.save_ledger(
            state.ledger, progress.Ledger(cycles=list(entries), source="checkpoint-dir:/ckpt")
        )
    records.write(
        state.outcome,
        records.OutcomeRecord(
            exit_code=0,
            outcome="finished",
            reason="all workers finished",
            first_failure=None,
            cycles=cycles,
            first_cycle=0,
            last_cycle=cycles - 1,
            attempt=0,
            job_id="4242",
            run_id="4242-a0",
            run_uuid=run_uuid,
            nodes=names,
            time=T0 + cycles * CYCLE_S,
        ),
    )
    after = _count_files(state_path)
    return {"state files per cycle": (after - before) // cycles, "log files per cycle": nodes}


def _count_files(path: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(path))


def time_command(prog: str, args: list[str], state: Path, out: Path, runs: int) -> tuple[float, int]:
    """The fastest of ``runs`` (wall seconds, exit code), output to a file."""
    module = {"slurm-ft-report": "slurm_ft.cli.report", "slurm-ft-logs": "slurm_ft.cli.logs"}[prog]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    best, code = float("inf"), 0
    for _ in range(runs):
        with open(out, "wb") as sink:
            t = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", module, "--state-dir", str(state), *args],
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=env,
                timeout=900,
                check=False,
            )
            best = min(best, time.perf_counter() - t)
        code = done.returncode
    return best, code


def main(argv: list[str] | None = None) -> int:
    p = cmdline.Parser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--nodes", type=cmdline.sizes, default="256,1024,4096")
    p.add_argument("--cycles", type=cmdline.positive_int, default=4)
    p.add_argument("--runs", type=cmdline.positive_int, default=3)
    p.add_argument("--dir", help="where the jobs are written (default: a temporary dir, removed)")
    p.add_argument("--keep", action="store_true", help="keep the jobs")
    p.add_argument(
        "--snapshots", action="store_true", help="the workers take snapshots (a record per node and cycle)"
    )
    a = p.parse_args(argv)
    sizes = a.nodes
    root = Path(a.dir or tempfile.mkdtemp(prefix="slurm-ft-logs-report-scale-"))
    rows: dict[str, dict[int, float]] = {}
    try:
        for n in sizes:
            job = root / f"job{n}"
            shutil.rmtree(job, ignore_errors=True)
            t = time.perf_counter()
            counts = write_job(job / "state", job / "logs", n, a.cycles, a.snapshots)
            print(f"{n} nodes: wrote the job in {time.perf_counter() - t:.1f} s; {counts}", flush=True)
            for prog, args in COMMANDS:
                filled = [x.format(out=str(job / "out"), node=node_names(n)[n // 2]) for x in args]
                name = " ".join([prog, *args]).replace("{out}", "OUT").replace("{node}", "NODE")
                secs, code = time_command(prog, filled, job / "state", job / "out.txt", a.runs)
                rows.setdefault(name, {})[n] = secs
                print(f"  {name:45s} {secs:7.3f} s (exit {code})", flush=True)
            if not a.keep:
                shutil.rmtree(job, ignore_errors=True)
    finally:
        if not a.keep and not a.dir:
            shutil.rmtree(root, ignore_errors=True)
    print()
    head = " | ".join(f"{n:,} nodes" for n in sizes)
    print(f"| command | {head} | {sizes[-1] // sizes[0]}x nodes: time x |")
    print("|---|" + "---|" * len(sizes) + "---|")
    for name, by_n in rows.items():
        cells = " | ".join(f"{by_n[n]:.2f} s" for n in sizes)
        print(f"| `{name}` | {cells} | {by_n[sizes[-1]] / by_n[sizes[0]]:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
