"""Learned hang timeouts (issue 34): how long after a trainer falls silent its hang is
found, with the default factor and floor, and what learning costs the launcher.

Not a figure of ``python -m benchmarks`` (one run takes minutes of mostly waiting); run
it on its own::

    python -m benchmarks.hang_learned --every 1 --runs 3
    python -m benchmarks.hang_learned --cpu 40
    python -m benchmarks.hang_learned --cpu 40 --nodes 2
    python -m benchmarks.hang_learned --cpu 40 --applog

Detection: 2 simulated nodes x 2 workers print a line every ``--every`` s for
``--steps`` steps (``--print-ranks 0``: only rank 0, on node 0, prints), then every rank
goes silent. Reported: from the last line to the verdict, and to the cycle's end (the
workers stopped, their stacks kept). The warm-up (``--hang-initial-timeout``,
600 s by default) is shortened to 5 s so a run takes a minute; the policy is unchanged.

CPU: one node (``--nodes``: node 0 of that many), 2 workers each printing a line a second
for ``--cpu`` s, the launcher's own CPU (its threads' schedstat, ns) with learning on
(default) and off (``--hang-safety-factor 0``), side by side. Node 0 of several nodes is
the one that learns, and the one with a peer monitor whose wakes can take its samples.
The workers inherit the launcher's streams (the launcher samples their byte counts), or
with ``--applog`` write to the cycle log (the launcher reads every line and times it).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.integration.launch_cluster import SimJob

WORKER = Path(__file__).resolve().parent.parent / "tests" / "integration" / "rhythm_worker.py"
BASE = ["--nproc-per-node", "2", "--health-checks", "none", "--workers-stop-timeout", "3"]


def detection_once(every: float, steps: int, tmp: Path, printing: str | None) -> tuple[float, float]:
    """(from the last line to the verdict, from the last line to the cycle's end) in s."""
    log = tmp / "logs" / "job.log"
    args = [*BASE, "--applog-prefix", str(log), "--hang-initial-timeout", "5", "--max-restarts", "0"]
    who = ["--print-ranks", printing] if printing is not None else []
    job = SimJob(tmp, 2, args, [str(WORKER), "hang", "--every", f"{every:g}", "--steps", str(steps), *who])
    job.start()
    try:
        job.wait(steps * every * 1.5 + 60 * every + 120)
    finally:
        job.kill()
    record = job.cycle_record(0)
    failure = record["first_failure"]
    if not failure or failure.get("detector") != "silence":
        raise SystemExit(f"expected a silence hang, got {failure}")
    cycle_log = (tmp / "logs" / "job_cycle0.log").read_text()
    went = max(float(t) for t in re.findall(r"goes silent at ([0-9.]+)", cycle_log))
    # The verdict's time and the cycle's end (the last worker stopped), against the last
    # line (all on this machine's clock).
    return float(failure["time"]) - went, float(record["end_time"]) - went


def launcher_cpu_ns(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total


def cpu_run(
    seconds: float, learning: bool, tmp: Path, idle: bool = False, nodes: int = 1, applog: bool = False
) -> float:
    """Percent of one core node 0's launcher used over the steady middle of the run
    (``idle``: the workers write nothing, one line at the end; ``applog``: a cycle log)."""
    extra = [] if learning else ["--hang-safety-factor", "0"]
    if applog:
        extra += ["--applog-prefix", str(tmp / "logs" / "job.log")]
    steps = int(seconds)
    rhythm = ["--every", f"{seconds:g}", "--steps", "1"] if idle else ["--every", "1", "--steps", str(steps)]
    job = SimJob(tmp, nodes, [*BASE, "--hang-initial-timeout", "2", *extra], [str(WORKER), "finish", *rhythm])
    job.start()
    try:
        pid = job.node(0).proc.pid
        time.sleep(5.0)  # start-up (imports, rendezvous) outside the window
        t0, c0 = time.monotonic(), launcher_cpu_ns(pid)
        time.sleep(seconds - 8.0)
        t1, c1 = time.monotonic(), launcher_cpu_ns(pid)
        job.wait(seconds + 60)
    finally:
        job.kill()
    return 100.0 * (c1 - c0) / 1e9 / (t1 - t0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--every", type=float, default=1.0, help="the trainer's interval between lines (s)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--print-ranks", help="only these ranks print (default: all 4; '0': node 0's rank 0)")
    p.add_argument("--cpu", type=float, default=0.0, help="measure launcher CPU over S s instead")
    p.add_argument("--idle", action="store_true", help="with --cpu: the workers write nothing")
    p.add_argument("--nodes", type=int, default=1, help="with --cpu: simulated nodes (node 0 measured)")
    p.add_argument("--applog", action="store_true", help="with --cpu: the workers' lines go to a cycle log")
    a = p.parse_args()
    if a.cpu:
        rows = []
        for _ in range(a.runs):
            for learning in (True, False):
                with tempfile.TemporaryDirectory() as d:
                    rows.append((learning, cpu_run(a.cpu, learning, Path(d), a.idle, a.nodes, a.applog)))
        for learning in (True, False):
            values = [v for k, v in rows if k is learning]
            name = "learned (default)" if learning else "fixed (--hang-safety-factor 0)"
            what = "idle workers" if a.idle else "a line a second"
            what += ", cycle log" if a.applog else ""
            where = f"node 0 of {a.nodes}" if a.nodes > 1 else "one node"
            shown = ", ".join(f"{v:.3f}" for v in values)
            print(
                f"launcher CPU ({where}, {what}), {name}: mean {statistics.mean(values):.4f}, "
                f"median {statistics.median(values):.3f} % of a core ({shown})"
            )
        return 0
    found, stopped = [], []
    for _ in range(a.runs):
        with tempfile.TemporaryDirectory() as d:
            silent, end = detection_once(a.every, a.steps, Path(d), a.print_ranks)
        found.append(silent)
        stopped.append(end)
        print(
            f"every {a.every:g}s: hang found {silent:.1f}s after the last line; "
            f"workers stopped {end:.1f}s after the last line",
            flush=True,
        )
    goal = max(30.0, 10 * a.every)
    print(
        f"every {a.every:g}s, {a.runs} run(s): found after median {statistics.median(found):.1f}s "
        f"(max {max(found):.1f}s; goal <= {goal:g}s plus the stacks); stopped after median "
        f"{statistics.median(stopped):.1f}s (max {max(stopped):.1f}s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
