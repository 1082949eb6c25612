"""Learned hang timeouts (issue 34): how long after a trainer falls silent its hang is
found, with the default factor and floor, and what learning costs the launcher.

Not a figure of ``python -m benchmarks`` (one run takes minutes of mostly waiting); run
it on its own::

    python -m benchmarks.hang_learned --every 1 --runs 3
    python -m benchmarks.hang_learned --cpu 40
    python -m benchmarks.hang_learned --cpu 40 --nodes 2
    python -m benchmarks.hang_learned --cpu 40 --applog
    python -m benchmarks.hang_learned --cpu 40 --after 310
    python -m benchmarks.hang_learned --every 1 --steps 330 --runs 1 --uncaptured
    python -m benchmarks.hang_learned --young second --every 0.5 --steps 30 --runs 3

Detection: 2 simulated nodes (``--nodes``) x 2 workers print a line every ``--every`` s for
``--steps`` steps (``--print-ranks 0``: only rank 0, on node 0, prints), then every rank
goes silent. Reported: from the last line to the verdict, and to the cycle's end (the
workers stopped, their stacks kept). The warm-up (``--hang-initial-timeout``,
600 s by default) is shortened to 5 s so a run takes a minute; the policy is unchanged.
``--uncaptured``: no cycle log, the workers write to the launcher's own streams (it samples
their byte counts); with ``--steps`` past 305 s of lines the hang comes in the coarse phase
(``hang.learn.coarse``: 5 minutes after the warm-up).

Young cycles (``--young``, issue 46): the default warm-up (600 s) and no progress source,
2 simulated nodes x 2 workers printing every ``--every`` s; the hang comes ``--steps`` lines
into the cycle: ``second``: in the second cycle (the first printed for 25 s and crashed, so
the ledger knows the job's start-up); ``requeue``: in the first cycle of a requeued attempt
(the first attempt printed for 25 s and finished); ``stopped``: in the first cycle, rank 3
stops itself (SIGSTOP) while the others wait. Reported as for any hang, with the rule that
judged.

CPU: one node (``--nodes``: node 0 of that many), 2 workers each printing a line a second
for ``--cpu`` s, the launcher's own CPU (its threads' schedstat, ns) with learning on
(default) and off (``--hang-safety-factor 0``), side by side. Node 0 of several nodes is
the one that learns, and the one with a peer monitor whose wakes can take its samples.
The workers inherit the launcher's streams (the launcher samples their byte counts), or
with ``--applog`` write to the cycle log (the launcher reads every line and times it).
``--after S``: the window starts S s later (310: in the coarse phase, 5 minutes after the
warm-up), and the two launchers, learned and fixed, run side by side to save the wait.
"""

from __future__ import annotations

import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import cmdline
from tests.integration.launch_cluster import SimJob

WORKER = Path(__file__).resolve().parent.parent / "tests" / "integration" / "rhythm_worker.py"
BASE = ["--nproc-per-node", "2", "--health-checks", "none", "--workers-stop-timeout", "3"]


def detection_once(
    every: float, steps: int, tmp: Path, printing: str | None, uncaptured: bool = False, nodes: int = 2
) -> tuple[float, float]:
    """(from the last line to the verdict, from the last line to the cycle's end) in s."""
    log = tmp / "logs" / "job.log"
    args = [*BASE, "--hang-initial-timeout", "5", "--max-restarts", "0"]
    if not uncaptured:
        args += ["--applog-prefix", str(log)]
    who = ["--print-ranks", printing] if printing is not None else []
    rhythm = ["--every", f"{every:g}", "--steps", str(steps), *who]
    job = SimJob(tmp, nodes, args, [str(WORKER), "hang", *rhythm])
    job.start()
    try:
        job.wait(steps * every * 1.5 + 60 * every + 120)
    finally:
        job.kill()
    record = job.cycle_record(0)
    failure = record["first_failure"]
    if not failure or failure.get("detector") != "silence":
        raise SystemExit(f"expected a silence hang, got {failure}")
    if uncaptured:
        output = "".join(job.node(k).out() for k in range(nodes))
    else:
        output = (tmp / "logs" / "job_cycle0.log").read_text()
    went = max(float(t) for t in re.findall(r"goes silent at ([0-9.]+)", output))
    # The verdict's time and the cycle's end (the last worker stopped), against the last
    # line (all on this machine's clock).
    return float(failure["time"]) - went, float(record["end_time"]) - went


YOUNG = ("second", "requeue", "stopped")
EARLY_STEPS = 50  # the cycle or attempt before the hang: this many lines, then an exit


def young_once(kind: str, every: float, steps: int, tmp: Path) -> tuple[float, float, str]:
    """(from the last line to the verdict, to the cycle's end, the rule) for a hang
    ``steps`` lines into a young cycle (see the module's docstring)."""
    log = tmp / "logs" / "job.log"
    args = [*BASE, "--applog-prefix", str(log), "--max-restarts", "1"]
    rhythm = ["--every", f"{every:g}", "--steps", str(steps)]
    attempt, cycle, extra = 0, 0, []
    if kind == "second":
        cycle, extra = 1, ["--cycle", "1", "--early-exit", "3", "--early-steps", str(EARLY_STEPS)]
    elif kind == "requeue":
        first = SimJob(
            tmp, 2, args, [str(WORKER), "finish", "--every", f"{every:g}", "--steps", str(EARLY_STEPS)]
        )
        first.start()
        try:
            first.wait(EARLY_STEPS * every * 1.5 + 60)
        finally:
            first.kill()
        attempt = cycle = 1
        extra = ["--cycle", "1"]
    else:
        extra = ["--stop-rank", "3"]
    job = SimJob(tmp, 2, args, [str(WORKER), "hang", *rhythm, *extra], attempt=attempt)
    job.start()
    try:
        job.wait(EARLY_STEPS * every * 1.5 + steps * every * 1.5 + 200)
    finally:
        job.kill()
    record = job.cycle_record(cycle)
    failure = record["first_failure"]
    if not failure or failure.get("detector") != "silence":
        raise SystemExit(f"expected a silence hang in cycle {cycle}, got {failure}")
    output = (tmp / "logs" / f"job_cycle{cycle}.log").read_text()
    went = max(float(t) for t in re.findall(r"goes silent at ([0-9.]+)", output))
    detail = str(failure["detail"])
    if "stopped-rank rule" in detail:
        rule = "stopped-rank rule"
    elif "warm-up ended at" in detail:
        rule = "learned, warm-up ended by the known start-up"
    else:
        rule = detail[detail.find("(") + 1 : -1]
    return float(failure["time"]) - went, float(record["end_time"]) - went, rule


def launcher_cpu_ns(pid: int) -> int:
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total


def cpu_run(
    seconds: float,
    learning: tuple[bool, ...],
    tmp: Path,
    idle: bool = False,
    nodes: int = 1,
    applog: bool = False,
    after: float = 0.0,
) -> list[float]:
    """Percent of one core node 0's launcher used over the steady middle of the run, one
    job per ``learning`` value, side by side (``idle``: the workers write nothing, one line
    at the end; ``applog``: a cycle log; ``after``: the window starts that much later)."""
    span = seconds + after
    steps = int(span)
    rhythm = ["--every", f"{span:g}", "--steps", "1"] if idle else ["--every", "1", "--steps", str(steps)]
    jobs = []
    for k, learns in enumerate(learning):
        extra = [] if learns else ["--hang-safety-factor", "0"]
        if applog:
            extra += ["--applog-prefix", str(tmp / f"job{k}" / "logs" / "job.log")]
        args = [*BASE, "--hang-initial-timeout", "2", *extra]
        jobs.append(SimJob(tmp / f"job{k}", nodes, args, [str(WORKER), "finish", *rhythm]))
    try:
        for job in jobs:
            job.start()
        pids = [job.node(0).proc.pid for job in jobs]
        time.sleep(5.0 + after)  # start-up (imports, rendezvous) outside the window
        t0, c0 = time.monotonic(), [launcher_cpu_ns(pid) for pid in pids]
        time.sleep(seconds - 8.0)
        t1, c1 = time.monotonic(), [launcher_cpu_ns(pid) for pid in pids]
        for job in jobs:
            job.wait(span + 60)
    finally:
        for job in jobs:
            job.kill()
    return [100.0 * (b - a) / 1e9 / (t1 - t0) for a, b in zip(c0, c1, strict=True)]


def main() -> int:
    p = cmdline.Parser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--every", type=cmdline.positive_float, default=1.0, help="the trainer's interval between lines (s)"
    )
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--runs", type=cmdline.positive_int, default=3)
    p.add_argument("--print-ranks", help="only these ranks print (default: all 4; '0': node 0's rank 0)")
    p.add_argument("--cpu", type=float, default=0.0, help="measure launcher CPU over S s instead")
    p.add_argument("--idle", action="store_true", help="with --cpu: the workers write nothing")
    p.add_argument("--nodes", type=int, help="simulated nodes (--cpu: 1, node 0 measured; else 2)")
    p.add_argument("--applog", action="store_true", help="with --cpu: the workers' lines go to a cycle log")
    p.add_argument("--after", type=float, default=0.0, help="with --cpu: the window starts S s later")
    p.add_argument("--uncaptured", action="store_true", help="detection: no cycle log")
    p.add_argument("--young", choices=YOUNG, help="detection: a hang in a young cycle (the default warm-up)")
    a = p.parse_args()
    if a.young:
        found, stopped = [], []
        for _ in range(a.runs):
            with tempfile.TemporaryDirectory() as d:
                silent, end, rule = young_once(a.young, a.every, a.steps, Path(d))
            found.append(silent)
            stopped.append(end)
            print(
                f"young ({a.young}), every {a.every:g}s, silent after {a.steps} lines: hang found "
                f"{silent:.1f}s after the last line ({rule}); workers stopped {end:.1f}s after it",
                flush=True,
            )
        goal = max(30.0, 10 * a.every)
        print(
            f"young ({a.young}), {a.runs} run(s): found after median {statistics.median(found):.1f}s "
            f"(max {max(found):.1f}s; goal <= {goal:g}s plus the stacks); stopped after median "
            f"{statistics.median(stopped):.1f}s (max {max(stopped):.1f}s)"
        )
        return 0
    if a.cpu:
        rows = []
        for _ in range(a.runs):
            pairs = [(True, False)] if a.after else [(True,), (False,)]
            for learning in pairs:
                with tempfile.TemporaryDirectory() as d:
                    got = cpu_run(a.cpu, learning, Path(d), a.idle, a.nodes or 1, a.applog, a.after)
                rows.extend(zip(learning, got, strict=True))
        for learning in (True, False):
            values = [v for k, v in rows if k is learning]
            name = "learned (default)" if learning else "fixed (--hang-safety-factor 0)"
            what = "idle workers" if a.idle else "a line a second"
            what += ", cycle log" if a.applog else ""
            what += f", from {a.after:g} s" if a.after else ""
            where = f"node 0 of {a.nodes}" if (a.nodes or 1) > 1 else "one node"
            shown = ", ".join(f"{v:.3f}" for v in values)
            print(
                f"launcher CPU ({where}, {what}), {name}: mean {statistics.mean(values):.4f}, "
                f"median {statistics.median(values):.3f} % of a core ({shown})"
            )
        return 0
    found, stopped = [], []
    for _ in range(a.runs):
        with tempfile.TemporaryDirectory() as d:
            silent, end = detection_once(a.every, a.steps, Path(d), a.print_ranks, a.uncaptured, a.nodes or 2)
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
