"""Figure 8: replacement latency with a spare node. 3 active + 1 spare simulated nodes,
one worker each; the launcher of an active node is killed with SIGKILL.

Latency is the time from the SIGKILL (``time.time()`` just before the kill) to the start
stamp of the last worker of the next cycle, minus the heart-beat timeout (node 0 can only
call a silent launcher lost after it): what is left is the launchers' own share — noticing
(one heart-beat poll), stopping the survivors' workers, the health checks and join of the
next cycle, the placement, and starting the workers (their interpreter start-up included,
see figure 2's second row). The killed node's rank runs on the spare in the next cycle
with the same world size. Silence is counted from the victim's last beat, which precedes
the kill by up to one heart-beat interval, so a sample can come out slightly negative.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid

from benchmarks import launchers, proc
from benchmarks.harness import WORKERS, Context, repeat
from benchmarks.stats import Row, Target, summarize
from benchmarks.workers import stamps

FIGURE = 8
SCRIPT = WORKERS / "restart_worker.py"
NODES, SPARES = 4, 1
VICTIM_NODE = 1  # an active node that is not the store host
HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S = 0.1, 1.0
SETTLE_S = 0.5  # every launcher in its watch loop before the kill
TIMEOUT = 120.0
ACTIVE = NODES - SPARES


def once(ctx: Context) -> float:
    directory = ctx.scratch("stamps")
    submit = ctx.scratch("submit")
    port, job_id = proc.free_port(), str(uuid.uuid4().int % 10**8)
    started = []
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
            "BENCH_VICTIM_RANK": "-1",  # no worker fails: the launcher is the victim
        },
    )
    with open(log, "ab") as out:
        for cmd, env in nodes:
            started.append(proc.start(cmd, env, stdout=out, stderr=subprocess.STDOUT))
        try:
            proc.wait_for(
                lambda: stamps.count(directory, "start-c0-") == ACTIVE, 60, "every first-cycle worker"
            )
            time.sleep(SETTLE_S)
            victim = started[VICTIM_NODE][0]
            killed = time.time()
            os.kill(victim.pid, signal.SIGKILL)
            proc.wait_for(
                lambda: stamps.count(directory, "start-c1-") == ACTIVE, 60, "every next-cycle worker"
            )
            codes = [
                proc.finish(p, w, t, TIMEOUT).returncode
                for k, (p, w, t) in enumerate(started)
                if k != VICTIM_NODE
            ]
        finally:
            for p, _, _ in started:
                if p.poll() is None:
                    proc.kill_group(p)
            proc.reap_marked(ctx.marker)
    if any(codes):
        raise proc.BenchError(f"exit codes {codes}; log tail: {log.read_text(errors='replace')[-600:]!r}")
    found = stamps.read_all(directory)
    return max(v for k, v in found.items() if k.startswith("start-c1-")) - killed - HEARTBEAT_TIMEOUT_S


def run(ctx: Context) -> list[Row]:
    samples = repeat(lambda: once(ctx), runs=ctx.runs(5, 2), warmup=ctx.runs(1, 0))
    return [
        Row(
            FIGURE,
            f"replacement latency: SIGKILL of an active launcher to last next-cycle worker started on "
            f"the spare, minus the heart-beat timeout ({ACTIVE} active + {SPARES} spare)",
            "s",
            summarize(samples),
            None,
            [Target("max", 0.5)],
            note=f"heart-beat every {HEARTBEAT_INTERVAL_S} s (the last beat precedes the kill by up to "
            f"that), timeout {HEARTBEAT_TIMEOUT_S} s",
        )
    ]
