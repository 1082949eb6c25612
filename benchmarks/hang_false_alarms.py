"""No false alarms from learned hang timeouts (issue 34): trainers with slow stretches of
their own run for minutes under the launcher, with the default factor, floor and ceiling,
and must end in one cycle with no hang found.

Not a figure of ``python -m benchmarks`` (minutes of mostly waiting); run it on its own::

    python -m benchmarks.hang_false_alarms --duration 300
    python -m benchmarks.hang_false_alarms --duration 120 --only slow-step,fit-loop
    python -m benchmarks.hang_false_alarms --duration 660 --only slow-step,fit-loop --nodes 1 --uncaptured

The trainers (2 simulated nodes each, run side by side: they mostly sleep):

* ``ddp``: ``scripts/examples/train_ddp.py`` (torch, gloo DDP), a step a second, a
  checkpoint every 50 steps; 1 worker per node.
* ``snapshot``: ``scripts/examples/train_snapshot.py`` (the DDP tutorial's shape), an epoch
  a second, a snapshot every 50; 1 worker per node.
* ``slow-step``: a line a second with every 50th step 10x slower (10 s), 2 workers per node.
* ``fit-loop``: the timing of a Lightning fit loop (``benchmarks/workers/fit_loop.py``,
  torch-free, Lightning is not installed): a step every 0.5 s, a validation pass that prints
  nothing for 12 s every 100 steps, and after every second one a checkpoint save silent
  for 6 more seconds that then writes 16 MiB over 4 s (18 s of silence in one piece);
  2 workers per node.

The warm-up (``--hang-initial-timeout``, 600 s by default) is shortened to ``--warmup``
(20 s) so the learned timeouts judge nearly the whole run (a gap that begins in the warm-up
teaches nothing and is judged only by ``--hang-timeout``): with the default warm-up a run
of a few minutes would never leave it. Standbys are off (``--preload none``): they cost
the 2-core machine a torch import each and play no part in hang detection.

``--nodes 1 --uncaptured``: one node whose workers write to the launcher's own streams (it
samples their byte counts); with ``--duration 660`` the last 5 minutes and more are judged
in the coarse phase (``hang.learn.coarse``: past the fine phase's 5 minutes).

Reported per trainer: how long it ran, its cycles, the hangs found (must be 0), the
ledger's learned gap, and the launcher log's lines that announce a learned timeout.
"""

from __future__ import annotations

import json
import math
import re
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import cmdline
from tests.integration.launch_cluster import EXAMPLES, SimJob

ROOT = Path(__file__).resolve().parent.parent
RHYTHM = ROOT / "tests" / "integration" / "rhythm_worker.py"
FIT_LOOP = ROOT / "benchmarks" / "workers" / "fit_loop.py"
LEARNED_LINE = re.compile(r"^.*hang timeout: learned .*$", re.MULTILINE)


@dataclass(frozen=True)
class Trainer:
    """One trainer: workers per node, and its command line for a run of about S seconds
    in a directory (the trainer's files go there)."""

    name: str
    nproc: int
    command: Callable[[float, Path], list[str]]


def ddp(seconds: float, tmp: Path) -> list[str]:
    steps = max(60, int(seconds))
    rhythm = ["--step-time", "1", "--steps", str(steps), "--ckpt-every", "50"]
    return [str(EXAMPLES / "train_ddp.py"), *rhythm, "--ckpt-dir", str(tmp / "ckpt")]


def snapshot(seconds: float, tmp: Path) -> list[str]:
    epochs = max(60, int(seconds))
    rhythm = ["--epoch-time", "1", "--epochs", str(epochs), "--save-every", "50"]
    return [str(EXAMPLES / "train_snapshot.py"), *rhythm, "--snapshot", str(tmp / "snapshot.pt")]


def slow_step(seconds: float, tmp: Path) -> list[str]:
    rounds = max(2, math.ceil(seconds / (49 + 10)))  # 49 steps of 1 s, then one of 10 s
    slow = ["--slow", "10", "--slow-every", "50"]
    return [str(RHYTHM), "finish", "--every", "1", "--steps", str(50 * rounds), *slow]


def fit_loop(seconds: float, tmp: Path) -> list[str]:
    # 200 steps of 0.5 s, two validations of 12 s, one checkpoint of 6 + 4 s: 134 s.
    rounds = max(2, math.ceil(seconds / 134))
    shape = ["--val-every", "100", "--val-time", "12", "--ckpt-every", "2", "--ckpt-think", "6"]
    save = ["--ckpt-mb", "16", "--ckpt-write", "4", "--ckpt-dir", str(tmp)]
    return [str(FIT_LOOP), "--step", "0.5", "--steps", str(200 * rounds), *shape, *save]


TRAINERS = {
    t.name: t
    for t in (
        Trainer("ddp", 1, ddp),
        Trainer("snapshot", 1, snapshot),
        Trainer("slow-step", 2, slow_step),
        Trainer("fit-loop", 2, fit_loop),
    )
}


@dataclass
class Result:
    name: str
    wall_s: float = 0.0
    codes: list[int] = field(default_factory=list)
    cycles: int = 0
    alarms: int = 0
    outcome: str = ""
    gaps: list[float | None] = field(default_factory=list)
    learned: list[str] = field(default_factory=list)
    error: str = ""


def run_one(
    trainer: Trainer, seconds: float, warmup: float, tmp: Path, nodes: int = 2, uncaptured: bool = False
) -> Result:
    """One trainer under the launcher, to its end; what the state dir and log say
    (``uncaptured``: no cycle log, the workers write to the launcher's own streams)."""
    result = Result(trainer.name)
    log = tmp / "logs" / "job.log"
    args = [
        *["--nproc-per-node", str(trainer.nproc), "--health-checks", "none", "--preload", "none"],
        *["--hang-initial-timeout", f"{warmup:g}", "--max-restarts", "0", "--workers-stop-timeout", "3"],
    ]
    if not uncaptured:
        args += ["--applog-prefix", str(log)]
    job = SimJob(tmp, nodes, args, trainer.command(seconds, tmp))
    started = time.monotonic()
    job.start()
    try:
        result.codes = job.wait(seconds * 1.5 + 180)
    except AssertionError as e:
        result.error = str(e)[-2000:]
    finally:
        job.kill()
    result.wall_s = time.monotonic() - started
    cycles = sorted((job.state / "cycles").glob("cycle*.json"))
    result.cycles = len(cycles)
    for path in cycles:
        failure = json.loads(path.read_text()).get("first_failure")
        if failure and failure.get("kind") == "hang":
            result.alarms += 1
    outcome = job.state / "outcome.json"
    if outcome.exists():
        result.outcome = str(json.loads(outcome.read_text()).get("outcome", ""))
    ledger = job.state / "ledger.json"
    if ledger.exists():
        result.gaps = [c.get("silence_gap") for c in json.loads(ledger.read_text()).get("cycles", [])]
    result.learned = LEARNED_LINE.findall(job.node(0).err())
    if result.codes != [0] * nodes and not result.error:
        result.error = job.dump()[-3000:]
    return result


def report(r: Result) -> str:
    gaps = ", ".join("none" if g is None else f"{g:.1f}s" for g in r.gaps)
    lines = [
        f"{r.name}: ran {r.wall_s:.0f}s, exit codes {r.codes}, {r.cycles} cycle(s), outcome "
        f"{r.outcome or '?'}, hangs found {r.alarms}; ledger silence_gap: {gaps or 'none'}",
        *(f"    {line.strip()}" for line in r.learned),
    ]
    if r.error:
        lines.append(f"    ERROR: {r.error}")
    return "\n".join(lines)


def main() -> int:
    p = cmdline.Parser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--duration", type=cmdline.positive_float, default=300.0, help="seconds each trainer runs (about)"
    )
    p.add_argument("--warmup", type=float, default=20.0, help="--hang-initial-timeout for the runs")
    p.add_argument(
        "--only",
        type=cmdline.names(list(TRAINERS)),
        default=",".join(TRAINERS),
        help=f"comma-separated: {', '.join(TRAINERS)}",
    )
    p.add_argument("--nodes", type=int, default=2, help="simulated nodes per trainer")
    p.add_argument("--uncaptured", action="store_true", help="no cycle log: the launcher samples the output")
    a = p.parse_args()
    chosen = [TRAINERS[n] for n in a.only]
    results: dict[str, Result] = {}

    def one(trainer: Trainer) -> None:
        with tempfile.TemporaryDirectory(prefix=f"false-alarms-{trainer.name}-") as d:
            results[trainer.name] = run_one(trainer, a.duration, a.warmup, Path(d), a.nodes, a.uncaptured)
        print(report(results[trainer.name]), flush=True)

    threads = [threading.Thread(target=one, args=(t,), name=t.name) for t in chosen]
    for i, t in enumerate(threads):
        if i:
            time.sleep(3.0)  # stagger the start-ups (imports) on a small machine
        t.start()
    for t in threads:
        t.join()
    bad = [r.name for r in results.values() if r.alarms or r.error or r.cycles != 1]
    print(
        f"false alarms: {sum(r.alarms for r in results.values())} over {len(results)} trainer(s)"
        + (f"; FAILED: {', '.join(bad)}" if bad else "")
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
