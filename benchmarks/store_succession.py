"""Store succession (issue 28), measured by hand: ``python -m benchmarks.store_succession``.

3 active + 1 spare simulated nodes, one worker each. Node 0's launcher, the store host,
is lost: SIGKILL (its workers die with it through the parent-death signal; the peers'
connections are reset, so they notice at once) or SIGSTOP (frozen: the peers notice when
the heart-beat times out). The figure is the time from the loss to the start stamp of
the last worker of the next cycle, whose rank 0 now runs on the spare: noticing, the
claim in the state dir, the successor's store, the followers finding it, the join, the
fence, the placement and the workers' start. For the frozen host the heart-beat timeout
is subtracted (nothing can notice a silent host before it). Goal: at most 1 s.

Not a figure of ``python -m benchmarks`` (its README table has no row for it yet).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from benchmarks import harness, launchers, proc
from benchmarks.harness import WORKERS, Context, repeat
from benchmarks.stats import summarize
from benchmarks.workers import stamps

SCRIPT = WORKERS / "restart_worker.py"
NODES, SPARES = 4, 1
ACTIVE = NODES - SPARES
HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S = 0.1, 1.0
SETTLE_S = 0.5
TIMEOUT = 120.0
LOG_TAIL = 4000  # characters of the launchers' log in a failure's message


def once(ctx: Context, sig: int) -> float:
    directory = ctx.scratch("stamps")
    submit = ctx.scratch("submit")
    port, job_id = proc.free_port(), str(uuid.uuid4().int % 10**8)
    log = directory.parent / f"{directory.name}.log"
    nodes = launchers.ours_nodes(
        ctx,
        SCRIPT,
        nnodes=NODES,
        nproc=1,
        submit=submit,
        port=port,
        job_id=job_id,
        extra={
            "SLURM_FT_LAUNCH_SPARE_NODES": str(SPARES),
            "SLURM_FT_LAUNCH_HEARTBEAT_INTERVAL": str(HEARTBEAT_INTERVAL_S),
            "SLURM_FT_LAUNCH_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT_S),
            "BENCH_STAMPS": str(directory),
            "BENCH_VICTIM_RANK": "-1",  # no worker fails: the store host is the victim
        },
    )
    started = []
    with open(log, "ab") as out:
        for cmd, env in nodes:
            started.append(proc.start(cmd, env, stdout=out, stderr=subprocess.STDOUT))
        try:
            proc.wait_for(
                lambda: stamps.count(directory, "start-c0-") == ACTIVE, 60, "every first-cycle worker"
            )
            time.sleep(SETTLE_S)
            victim = started[0][0]
            lost = time.time()
            os.kill(victim.pid, sig)
            proc.wait_for(
                lambda: stamps.count(directory, "start-c1-") == ACTIVE, 60, "every next-cycle worker"
            )
            codes = [proc.finish(p, w, t, TIMEOUT).returncode for p, w, t in started[1:]]
        except proc.BenchError as exc:
            raise proc.BenchError(f"{exc}; log tail: {_tail(log)!r}") from None
        finally:
            for p, _, _ in started:
                if p.poll() is None:
                    if sig == signal.SIGSTOP:
                        os.kill(p.pid, signal.SIGCONT)
                    proc.kill_group(p)
            proc.reap_marked(ctx.marker)
    if any(codes):
        raise proc.BenchError(f"exit codes {codes}; log tail: {_tail(log)!r}")
    found = stamps.read_all(directory)
    last = max(v for k, v in found.items() if k.startswith("start-c1-"))
    return last - lost - (HEARTBEAT_TIMEOUT_S if sig == signal.SIGSTOP else 0.0)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-LOG_TAIL:]


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with harness.context(False) as ctx:
        for sig, what in (
            (signal.SIGKILL, "SIGKILL"),
            (signal.SIGSTOP, "SIGSTOP, minus the heart-beat timeout"),
        ):
            samples = repeat(lambda s=sig: once(ctx, s), runs=runs, warmup=1)
            stats = summarize(samples)
            print(f"store host {what}: last next-cycle worker started after {stats} s ({samples})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
