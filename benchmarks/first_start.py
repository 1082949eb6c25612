"""The launchers' part of a job's first start (and of every requeued attempt's): from the
launchers' start to the last first-cycle worker's first statement.

    python -m benchmarks.first_start [--nodes 4] [--runs 7] [--code DIR ...]

By hand, not part of ``python -m benchmarks``. N simulated nodes on this host (the
``SLURM_*`` variables srun sets, 127.0.1.K), one torch-free worker each (its first
statement takes the time), so what is measured is the launchers: their start, the torch
import the rendezvous store needs, the rendezvous and the spawn; ``--worker torch`` waits
until each worker has imported torch.distributed, as a trainer's start does. Without ``--code`` the
checkout this runs from; with several, each is a checkout (``PYTHONPATH``) measured in
turn, interleaved, so a before and an after share the machine's moments.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

from benchmarks import cmdline, launchers, proc
from benchmarks.harness import REPO, WORKERS, Context, context
from benchmarks.stats import summarize
from benchmarks.workers import stamps

SCRIPTS = {
    "none": WORKERS / "restart_worker.py",  # torch-free, stamps its first statement
    "torch": WORKERS / "first_start_torch.py",  # stamps once torch.distributed is imported
}


def once(ctx: Context, code: Path, nodes: int, script: Path) -> float:
    directory = ctx.scratch("stamps")
    submit = ctx.scratch("submit")
    cmds = launchers.ours_nodes(
        ctx,
        script,
        nnodes=nodes,
        nproc=1,
        submit=submit,
        port=proc.free_port(),
        job_id=str(uuid.uuid4().int % 10**8),
        extra={"BENCH_STAMPS": str(directory), "BENCH_VICTIM_RANK": "-1", "PYTHONPATH": str(code)},
    )
    started = []
    log = directory.parent / f"{directory.name}.log"
    t0 = time.time()
    with open(log, "ab") as out:
        try:
            for cmd, env in cmds:
                started.append(proc.start(cmd, env, stdout=out, stderr=subprocess.STDOUT))
            proc.wait_for(lambda: stamps.count(directory, "start-c0-") == nodes, 120, "every first worker")
        except proc.BenchError as exc:
            raise proc.BenchError(
                f"{code}: {exc}; log tail: {log.read_text(errors='replace')[-1500:]}"
            ) from None
        finally:
            for p, _, _ in started:
                proc.kill_group(p)
            proc.reap_marked(ctx.marker)
    return max(stamps.read_all(directory).values()) - t0


def main(argv: list[str] | None = None) -> int:
    p = cmdline.Parser(prog="python -m benchmarks.first_start", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=4)
    p.add_argument("--runs", type=cmdline.positive_int, default=7)
    p.add_argument("--code", type=Path, action="append", help="a checkout to measure (repeatable)")
    p.add_argument(
        "--worker",
        choices=tuple(SCRIPTS),
        default="none",
        help="none: a torch-free worker, the launchers alone; torch: until each worker has imported "
        "torch.distributed, as a trainer has before its rendezvous",
    )
    a = p.parse_args(argv)
    codes = [c.resolve() for c in a.code or [REPO]]
    samples: dict[Path, list[float]] = {c: [] for c in codes}
    with context(quick=False) as ctx:
        for code in codes:  # a warm-up each (page cache, bytecode)
            once(ctx, code, a.nodes, SCRIPTS[a.worker])
        for _ in range(a.runs):
            for code in codes:
                samples[code].append(once(ctx, code, a.nodes, SCRIPTS[a.worker]))
    for code, values in samples.items():
        s = summarize(values)
        print(
            f"{code}: launchers' start to the last first worker ({a.worker}), {a.nodes} nodes: "
            f"median {s.median:.3f} s (min {s.min:.3f}, max {s.max:.3f}, n={s.n})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
