"""Goodput under faults: slurm-ft against ``srun torchrun``, the same trainer, the same faults.

    python -m benchmarks.goodput [--duration 20m] [--every 120] [--seed 1] [--mix llama3]
    python -m benchmarks.goodput --schedule realistic [--snapshot-every 1]

By hand, on the local 4-node Slurm (``scripts/slurm-local-up``), not in CI (the short
variant is ``tests/slurm/test_drill_slurm.py``). One seeded plan of faults is drawn once
and injected into two jobs of 4 nodes (3 train, 1 stands by), one after the other:

* **slurm-ft**: ``sbatch_templates/train_requeue.sbatch`` with ``SPARE_NODES=1``; the faults
  come from ``slurm-ft-drill JOBID --every ... --seed ...`` itself;
* **torchrun**: ``srun torchrun --nnodes=3:3 --max-restarts`` (the fourth agent waits in
  the rendezvous), under ``sbatch --requeue`` with a batch script that requeues on USR1
  and on a failed step, as users do; the faults are aimed through the same drill code at
  the pids the trainer notes (torchrun keeps no records of its own).

The trainer (``benchmarks/workers/goodput_ddp.py``) is a real gloo DDP loop at a fixed
pace that checkpoints every ``--ckpt-every`` steps. Each run lasts ``--duration`` from its
first worker's start; then the newest checkpoint is read and the job cancelled.
Goodput = steps in that checkpoint × the undisturbed step time ÷ the allocation's wall
time (job start to the deadline). Also: time to ``--target`` steps (the first checkpoint at
or past it), a table per fault (from the step log for both; the slurm-ft report's
detection / stop / restart / start-up beside it), and one SVG with both timelines.
Results go to ``--out`` (default ``benchmarks/results/goodput-<time>/``).

``--faults FILE`` replaces the seeded plan with a drill schedule file (a targeted drill:
one preemption, say, to time its parts from the logs).

``--schedule realistic`` is issue #43's: the trainer's own checkpoint every 120 s, a fault
every 120 s on average, 20 minutes. ``--snapshot-every N`` runs slurm-ft with snapshots
(the trainer hands its state to ``worker.snapshot`` every N steps; the launchers persist the
newest at a requeue and at the end into ``<run>/snapshots``): the steps kept are then the
newest checkpoint's or the newest persisted snapshot's, whichever is further (torchrun runs
with its own checkpoints only).

``--schedule lose-node`` is issue #44's: the realistic schedule (checkpoints every 120 s, the
default mix every 120 s on average, 20 minutes) plus a
``lose-node`` about every 5 minutes (``--lose-every 300``, each seeded within +-10 %, at a
seeded node; the mix's faults within 30 s of one are dropped, so each lost node's cost is
its own), 2 nodes train, snapshots every step, slurm-ft only (the figure to compare is the
same schedule with ``--snapshot-every 0``). Every lost node needs a spare (the template
resubmits without lost nodes once none is left, which a 4-node cluster cannot hold): 20
minutes lose 3 nodes, so the run needs ``--nodes 5`` on a 5-node local Slurm
(``scripts/slurm-local-up --nodes 5``); the benchmark refuses a plan its spares cannot
last through. ``--sharded`` gives every
rank a state of its own (the trainer's hand-sharded momentum) and the launchers
``--snapshot-replicas 1``. The lost work of every lost node is printed (the goal is at
most 2 steps).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import cmdline
from benchmarks import goodput_timeline as tl
from slurm_ft import records
from slurm_ft.drill import schedule
from slurm_ft.drill.faults import Fault
from slurm_ft.drill.run import DrillJob, describe, inject
from slurm_ft.drill.schedule import Planned
from slurm_ft.drill.slurmjob import ended, lookup
from slurm_ft.statedir import StateDir

REPO = Path(__file__).resolve().parent.parent
TRAINER = REPO / "benchmarks" / "workers" / "goodput_ddp.py"
TEMPLATE = REPO / "sbatch_templates" / "train_requeue.sbatch"
ACTIVE_NODES, NODES = 3, 4

TORCHRUN_BATCH = """#!/bin/bash
#SBATCH --job-name=goodput-torchrun
#SBATCH --nodes={nodes}
#SBATCH --ntasks-per-node=1
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=slurm-%j.out
# USR1 (--signal=B:USR1, or a preemption): requeue, as a torchrun user's script does.
trap 'echo "USR1: requeue"; scontrol requeue $SLURM_JOB_ID; exit 0' USR1
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1)
# The rendezvous store lives with the first node's agent (every "node" here is one host,
# so torchrun's own guess, by host name and address, would be right for all of them).
agent='h=0; [ "$SLURMD_NODENAME" = "$0" ] && h=1; exec torchrun --rdzv-conf is_host=$h "$@"'
srun --kill-on-bad-exit=0 bash -c "$agent" "$head" \\
    --nnodes={active}:{active} --nproc-per-node=1 \\
    --max-restarts={max_restarts} --rdzv-backend=c10d --rdzv-endpoint="$head:29577" \\
    --rdzv-id="$SLURM_JOB_ID" {trainer} {args} &
wait $!
code=$?
echo "srun exit $code"
# The step ended (restarts spent, the rendezvous host lost): requeue and go on.
[ "$code" -ne 0 ] && scontrol requeue "$SLURM_JOB_ID"
exit 0
"""


@dataclass
class RunResult:
    tool: str
    job_id: str
    job_start: float
    first_worker: float
    deadline: float
    kept_steps: int
    step_time: float | None
    goodput: float | None
    time_to_target_s: float | None
    faults: list[tl.FaultCost] = field(default_factory=list)
    report_goodput: float | None = None  # slurm-ft only: the report's kept training ÷ the same wall time
    report_faults: list[dict[str, object]] = field(default_factory=list)
    report_error: str | None = None  # why slurm-ft-report gave no figure, when it did not
    snapshot_every: int = 0  # the trainer's snapshots (slurm-ft only); 0: none
    kept_from: str = "checkpoint"  # where ``kept_steps`` were read: checkpoint or persisted snapshot

    @property
    def wall_s(self) -> float:
        return self.deadline - self.job_start


def _sh(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]


def _end_job(job_id: str) -> None:
    """Cancel the run's job for good. A plain scancel sends SIGTERM, which the template
    (and a torchrun user's script) answers with ``scontrol requeue``, and the job came
    back: it is made non-requeueable first."""
    _sh(["scontrol", "update", f"JobId={job_id}", "Requeue=0"])
    _sh(["scancel", job_id])


def _sbatch(script: Path, args: list[str], env: dict[str, str]) -> str:
    done = _sh(["sbatch", "--parsable", *args, str(script)], cwd=script.parent, env=env)
    if done.returncode != 0:
        raise SystemExit(f"goodput: sbatch failed: {done.stderr.strip()}")
    return done.stdout.strip().split(";")[0]


def _job_start(job_id: str) -> float:
    out = _sh(["scontrol", "show", "job", "-o", job_id]).stdout
    for word in out.split():
        if word.startswith("StartTime="):
            return time.mktime(time.strptime(word.split("=", 1)[1], "%Y-%m-%dT%H:%M:%S"))
    raise SystemExit(f"goodput: no StartTime for job {job_id}")


def _wait(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"goodput: timed out waiting for {what}")
        time.sleep(0.5)


def _newest_before(ckpt: Path, deadline: float) -> int:
    best = 0
    for path in ckpt.glob("step_*"):
        try:
            if path.stat().st_mtime <= deadline:
                best = max(best, int(path.name[5:]))
        except (OSError, ValueError):
            continue
    return best


def _first_at_or_past(ckpt: Path, target: int) -> float | None:
    times = []
    for path in ckpt.glob("step_*"):
        try:
            if int(path.name[5:]) >= target:
                times.append(path.stat().st_mtime)
        except (OSError, ValueError):
            continue
    return min(times) if times else None


def _steps(log: Path) -> list[tl.Step]:
    out = []
    for line in log.read_text().splitlines() if log.exists() else []:
        try:
            doc = json.loads(line)
            pid = doc.get("pid")
            out.append(tl.Step(float(doc["t"]), int(doc["step"]), int(pid) if pid is not None else None))
        except (ValueError, KeyError):
            continue
    return out


def _trainer_args(work: Path, a: argparse.Namespace, snapshot_every: int = 0) -> str:
    args = (
        f"--ckpt {work / 'ckpt'} --step-log {work / 'steps.jsonl'} --pids {work / 'pids'} "
        f"--step-time {a.step_time} --ckpt-every {a.ckpt_every} --pg-timeout {a.pg_timeout}"
    )
    return f"{args} --snapshot-every {snapshot_every}" if snapshot_every else args


_STEP_OF = re.compile(r" step (\d+)")


def _persisted_step(state: StateDir, steps: list[tl.Step], deadline: float) -> int:
    """The newest step a node persisted after the job's end (the launchers persist on the
    cancel's SIGTERM; the trainer's state is replicated, so one node's copy is the job's),
    no further than the trainer got by the deadline; 0: none. Read from the launchers'
    persist records (a node's record counts only when it persisted everything it held)."""
    reached = max((s.step for s in steps if s.t <= deadline), default=0)
    newest = 0
    for path in state.snapshots_dir.glob("persisted-attempt*.json"):
        doc = records.read_json(path) or {}
        found = [
            int(line.split(" step ")[1].split()[0]) for line in doc.get("persisted", []) if " step " in line
        ]
        if found and not doc.get("not_persisted"):
            newest = max(newest, min(found))
    return min(newest, reached)


def _prepare(out: Path, tool: str) -> Path:
    work = out / tool
    (work / "ckpt").mkdir(parents=True)
    (work / "logs").mkdir()
    return work


def _finish(
    tool: str,
    job_id: str,
    work: Path,
    start: float,
    first: float,
    deadline: float,
    a: argparse.Namespace,
    state: StateDir | None = None,
) -> RunResult:
    """``start``: the job's first start (a requeue moves Slurm's StartTime); ``state``:
    slurm-ft's state dir when its launchers persist snapshots."""
    kept = _newest_before(work / "ckpt", deadline)
    _end_job(job_id)
    _wait(lambda: ended(_state(job_id)), 120, f"job {job_id} to end")
    steps = _steps(work / "steps.jsonl")
    kept_from = "checkpoint"
    if state is not None:
        persisted = _persisted_step(state, steps, deadline)
        if persisted > kept:
            kept, kept_from = persisted, "persisted snapshot"
    pace = tl.step_time(steps)
    reached = _first_at_or_past(work / "ckpt", a.target)
    return RunResult(
        tool=tool,
        job_id=job_id,
        job_start=start,
        first_worker=first,
        deadline=deadline,
        kept_steps=kept,
        step_time=pace,
        goodput=kept * pace / (deadline - start) if pace else None,
        time_to_target_s=reached - start if reached is not None and reached <= deadline else None,
        snapshot_every=a.snapshot_every if state is not None else 0,
        kept_from=kept_from,
    )


def _state(job_id: str) -> str:
    try:
        return lookup(job_id).state
    except ValueError:
        return "GONE"


# --------------------------------------------------------------------------- slurm-ft


def run_slurm_ft(out: Path, a: argparse.Namespace, env: dict[str, str]) -> RunResult:
    work = _prepare(out, "slurm-ft")
    shutil.copy(TEMPLATE, work / TEMPLATE.name)
    job_env = dict(
        env,
        TRAIN_SCRIPT=str(TRAINER),
        TRAIN_ARGS=_trainer_args(work, a, a.snapshot_every) + (" --sharded" if a.sharded else ""),
        NPROC_PER_NODE="1",
        SPARE_NODES=str(a.nodes - a.active_nodes),
        MAX_RESTARTS="1000",
        MAX_NO_PROGRESS_CYCLES="10",
        MAX_REQUEUES="1000",
        PROGRESS_SOURCE=f"checkpoint-dir:{work / 'ckpt'}",
        LOG_DIR=str(work / "logs"),
        HEALTH_CHECKS="none",
        TERM_TIMEOUT="10",
        GLOO_SOCKET_IFNAME="lo",
        LAUNCH_EXTRA_ARGS=f"--rank-heartbeat-timeout {a.hang_timeout} --join-timeout 120"
        + (f" --snapshot-persist-dir {work / 'snapshots'}" if a.snapshot_every else "")
        + (" --snapshot-replicas 1" if a.sharded and a.snapshot_every else ""),
    )
    job_id = _sbatch(work / TEMPLATE.name, [f"--nodes={a.nodes}", "--no-kill"], job_env)
    print(f"slurm-ft: job {job_id}", flush=True)
    try:
        return _slurm_ft_run(out, a, env, work, job_id)
    finally:
        _end_job(job_id)  # a run cut short leaves no job behind (a no-op once it ended)


def _slurm_ft_run(
    out: Path, a: argparse.Namespace, env: dict[str, str], work: Path, job_id: str
) -> RunResult:
    state = StateDir(work / ".slurm_ft" / job_id)
    _wait(lambda: bool(list(state.processes_dir.glob("cycle*/*.json"))), 300, "slurm-ft's first workers")
    first = time.time()
    start = _job_start(job_id)
    drill_cmd = [sys.executable, "-m", "slurm_ft.cli.drill", job_id]
    if a.schedule == "lose-node":  # a plan of two mixes: given to the drill as a file
        (work / "drill-schedule.txt").write_text("".join(f"{p.describe()}\n" for p in a.drill_plan))
        drill_cmd += ["--schedule", "drill-schedule.txt"]
    elif a.faults is not None:
        drill_cmd += ["--schedule", str(a.faults.resolve())]
    else:
        drill_cmd += [
            "--every",
            str(a.every),
            "--mix",
            a.mix,
            "--seed",
            str(a.seed),
            "--duration",
            str(a.duration),
        ]
    with open(work / "drill.out", "w") as drill_out:
        drill = subprocess.Popen(drill_cmd, cwd=work, env=env, stdout=drill_out, stderr=subprocess.STDOUT)
    deadline = first + a.duration
    time.sleep(max(0.0, deadline - time.time()))
    result = _finish("slurm-ft", job_id, work, start, first, deadline, a, state if a.snapshot_every else None)
    try:
        drill.wait(timeout=60)
    except subprocess.TimeoutExpired:
        drill.kill()
        drill.wait()
    reporter = [sys.executable, "-m", "slurm_ft.cli.report", "--state-dir", str(state.path)]
    report = _sh([*reporter, "--json"], env=env)
    _sh([*reporter, "--svg", str(out / "slurm-ft-report.svg")], env=env)
    if report.returncode == 0:
        doc = json.loads(report.stdout)
        # The report's wall clock starts at the first cycle; the allocation's at the job's start.
        result.report_goodput = doc["totals"]["progress_s"] / result.wall_s
        result.report_faults = doc.get("faults", [])
        (out / "slurm-ft-report.json").write_text(report.stdout)
    else:
        said = report.stderr.strip().splitlines()
        result.report_error = said[-1] if said else f"exit {report.returncode}"
    drills = [records.read_json(p) for p in sorted(state.drills_dir.glob("*.json"))]
    result.faults = _costs([d for d in drills if d], work, result)
    return result


def _costs(drills: list[records.JsonDict], work: Path, r: RunResult) -> list[tl.FaultCost]:
    steps = _steps(work / "steps.jsonl")
    faults = []
    for d in drills:
        where = (
            f"rank {d['rank']} on {d['node']}" if d.get("rank") is not None else (d.get("node") or "batch")
        )
        faults.append((str(d["fault"]), where, float(d["time"]), bool(d.get("injected"))))
    return tl.fault_costs(faults, steps, r.step_time or 1.0)


# --------------------------------------------------------------------------- torchrun


def _torchrun_records(work: Path, state: StateDir, job_id: str) -> None:
    """What the drill needs, made from the pids the trainer noted: the newest restart's
    ranks as one cycle, torchrun's agent as the node's launcher."""
    notes = [records.read_json(p) for p in (work / "pids").glob("*.json")]
    latest: dict[int, records.JsonDict] = {}
    for d in sorted((n for n in notes if n), key=lambda n: n["time"]):
        latest[d["rank"]] = d  # a rank's newest note wins (its node may have changed)
    cur = list(latest.values())
    if not cur:
        return
    newest = (max(d["attempt"] for d in cur), 0)
    cycle = int(max(d["time"] for d in cur))  # grows with every restart: the drill takes the newest
    nodes = [d["node"] for d in sorted(cur, key=lambda d: d["group_rank"])]
    rec = records.CycleRecord(
        cycle=cycle,
        attempt=newest[0],
        restart=newest[1],
        run_id=job_id,
        run_uuid="torchrun",
        start_time=time.time(),
        nodes=nodes,
        world_size=len(cur),
        nproc_per_node=1,
        master_addr=nodes[0] if nodes else "",
        master_port=0,
    )
    records.write(state.cycle_record(cycle), rec)
    for d in cur:
        records.write(
            state.node_processes(cycle, d["node"]),
            records.NodeProcesses(
                cycle=cycle,
                node=d["node"],
                node_rank=d["group_rank"],
                job_id=job_id,
                run_uuid="torchrun",
                launcher_pid=d["agent_pid"],
                launcher_start_ticks=d["agent_start_ticks"],
                time=d["time"],
                workers=[records.WorkerProcess(d["rank"], d["local_rank"], d["pid"], d["start_ticks"])],
            ),
        )


def _inject_plan(plan: list[Planned], job_id: str, work: Path, state: StateDir, t0: float, seed: int) -> None:
    for k, item in enumerate(plan, 1):
        time.sleep(max(0.0, t0 + item.at - time.time()))
        st = _state(job_id)
        if ended(st):
            return
        _torchrun_records(work, state, job_id)
        skip = None if st == "RUNNING" else f"the job is {st} (requeued?): nothing to hit"
        rec = inject(
            DrillJob(state, job_id),
            item.fault,
            item.rank,
            item.node,
            f"seed {seed}, fault {k} of {len(plan)}",
            skip=skip,
        )
        with open(work / "drill.out", "a") as fh:
            fh.write(describe(rec) + "\n")


def run_torchrun(out: Path, a: argparse.Namespace, env: dict[str, str], plan: list[Planned]) -> RunResult:
    work = _prepare(out, "torchrun")
    script = work / "torchrun.sbatch"
    script.write_text(
        TORCHRUN_BATCH.format(
            nodes=a.torchrun_nodes,
            active=ACTIVE_NODES,
            max_restarts=1000,
            trainer=TRAINER,
            args=_trainer_args(work, a),
        )
    )
    job_id = _sbatch(script, [], dict(env, GLOO_SOCKET_IFNAME="lo"))
    print(f"torchrun: job {job_id}", flush=True)
    try:
        return _torchrun_run(a, plan, work, job_id)
    finally:
        _end_job(job_id)


def _torchrun_run(a: argparse.Namespace, plan: list[Planned], work: Path, job_id: str) -> RunResult:
    _wait(lambda: len(list((work / "pids").glob("*.json"))) >= ACTIVE_NODES, 300, "torchrun's first workers")
    first = time.time()
    start = _job_start(job_id)
    state = StateDir(work / "drill-state")
    injector = threading.Thread(
        target=_inject_plan, args=(plan, job_id, work, state, first, a.seed), daemon=True
    )
    injector.start()
    deadline = first + a.duration
    time.sleep(max(0.0, deadline - time.time()))
    result = _finish("torchrun", job_id, work, start, first, deadline, a)
    injector.join(timeout=60)
    drills = [records.read_json(p) for p in sorted(state.drills_dir.glob("*.json"))]
    result.faults = _costs([d for d in drills if d], work, result)
    return result


# --------------------------------------------------------------------------- output


def _fmt(v: float | None, unit: str = "s") -> str:
    return "-" if v is None else f"{v:.1f} {unit}"


def print_results(results: list[RunResult], a: argparse.Namespace) -> None:
    print(
        f"\ngoodput benchmark: {a.duration:g} s per run, a fault every {a.every:g} s on average, "
        f"mix {a.mix}, seed {a.seed}; {a.active_nodes} nodes train, {a.nodes - a.active_nodes} stand by; "
        f"checkpoint every {a.ckpt_every} steps ({a.ckpt_every * a.step_time:g} s)"
        + (f"; slurm-ft snapshots every {a.snapshot_every} step(s)" if a.snapshot_every else "")
        + ("; sharded trainer, --snapshot-replicas 1" if a.sharded else "")
        + (f"; a lose-node every ~{a.lose_every:g} s" if a.schedule == "lose-node" else "")
    )
    print(
        f"{'':10} {'goodput':>8} {'steps kept':>10} {'step time':>9} {'wall':>8} "
        f"{'time to ' + str(a.target):>14} {'report':>8}"
    )
    for r in results:
        rep = "-" if r.report_goodput is None else f"{100 * r.report_goodput:.1f} %"
        good = "-" if r.goodput is None else f"{100 * r.goodput:.1f} %"
        print(
            f"{r.tool:10} {good:>8} {r.kept_steps:>10} {_fmt(r.step_time):>9} {_fmt(r.wall_s):>8} "
            f"{_fmt(r.time_to_target_s):>14} {rep:>8}"
        )
    for r in results:
        print(
            f"\n{r.tool}: per fault (from the trainer's step log; down = the fault until steps went on again)"
        )
        print(f"  {'at':>6} {'fault':16} {'where':18} {'down':>8} {'lost work':>10} {'cost':>8}")
        for f in r.faults:
            if not f.injected:
                print(f"  {f.time - r.first_worker:6.0f} {f.fault:16} {f.where:18} not injected")
                continue
            during = f"  (during the {f.during}'s recovery)" if f.during else ""
            print(
                f"  {f.time - r.first_worker:6.0f} {f.fault:16} {f.where:18} {_fmt(f.down_s):>8} "
                f"{_fmt(f.lost_s):>10} {_fmt(f.cost_s):>8}{during}"
            )
        if r.report_error:
            print(f"  slurm-ft-report failed: {r.report_error}")
        if r.report_faults:
            print("  the report's split: detection / stop / restart / start-up / lost work = cost")
            for d in r.report_faults:
                parts = " / ".join(
                    _fmt(d.get(k)) for k in ("detection_s", "stop_s", "restart_s", "startup_s", "lost_work_s")
                )
                print(
                    f"  {float(d['time']) - r.first_worker:6.0f} {d['fault']!s:16} {parts} "
                    f"= {_fmt(d.get('cost_s'))}"
                )
        lost = [f.lost_steps for f in r.faults if f.fault == "lose-node" and f.injected]
        if lost:
            print(f"  lost work per lost node (steps done again; goal <= 2): {lost}")


REALISTIC = {"ckpt_every_s": 120.0, "every": 120.0, "duration": 1200.0}
LOSE_NODE_JITTER, LOSE_NODE_CLEAR_S = 0.1, 30.0


def apply_lose_node(a: argparse.Namespace, argv: list[str]) -> None:
    """#44's schedule, where the command line does not say otherwise: #43's, 2 nodes train
    (the rest stand by: one spare per lost node), snapshots every step, slurm-ft only."""
    apply_realistic(a, argv)
    given = {word.split("=", 1)[0] for word in argv}
    if "--active-nodes" not in given:
        a.active_nodes = 2
    if "--snapshot-every" not in given:
        a.snapshot_every = 1
    if a.only == "torchrun":
        raise SystemExit("goodput: --schedule lose-node runs slurm-ft only (compare --snapshot-every 0)")
    a.only = "slurm-ft"


def lose_node_plan(a: argparse.Namespace) -> list[Planned]:
    """The default mix's seeded plan and a lose-node about every ``--lose-every`` seconds
    (each within +-10 %) at a seeded node, without the mix's faults that fall within 30 s
    of a lost node (each lost node's cost is its own)."""
    nodes = a.active_nodes
    mix = schedule.seeded(a.every, schedule.parse_mix(a.mix), a.seed, a.duration, nodes, nodes)
    rng = random.Random(f"lose-node {a.seed}")
    lost = []
    at = a.lose_every
    while at < a.duration:
        when = round(at * (1 + rng.uniform(-LOSE_NODE_JITTER, LOSE_NODE_JITTER)), 3)
        lost.append(Planned(when, Fault.LOSE_NODE, None, rng.randrange(nodes)))
        at += a.lose_every
    clear = [p for p in mix if all(abs(p.at - q.at) > LOSE_NODE_CLEAR_S for q in lost)]
    return sorted([*clear, *lost], key=lambda p: p.at)


def apply_realistic(a: argparse.Namespace, argv: list[str]) -> None:
    """#43's schedule, where the command line does not say otherwise: the trainer's own
    checkpoint every 120 s at its pace, a fault every 120 s on average, 20 minutes."""
    given = {word.split("=", 1)[0] for word in argv}
    if "--ckpt-every" not in given:
        a.ckpt_every = max(1, round(REALISTIC["ckpt_every_s"] / a.step_time))
    if "--every" not in given:
        a.every = REALISTIC["every"]
    if "--duration" not in given:
        a.duration = REALISTIC["duration"]


def main(argv: list[str] | None = None) -> int:
    p = cmdline.Parser(prog="python -m benchmarks.goodput", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=schedule.parse_seconds, default=1200.0, help="per run (default 20m)")
    p.add_argument("--every", type=schedule.parse_seconds, default=120.0, help="mean seconds between faults")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--mix", default="llama3")
    p.add_argument("--step-time", type=cmdline.positive_float, default=0.2)
    p.add_argument(
        "--ckpt-every", type=cmdline.positive_int, default=25, help="steps between checkpoints (5 s at 0.2 s)"
    )
    p.add_argument(
        "--hang-timeout",
        type=float,
        default=10.0,
        help="slurm-ft's --rank-heartbeat-timeout (0: off; the learned silence timeout finds a hang)",
    )
    p.add_argument(
        "--pg-timeout",
        type=cmdline.positive_float,
        default=60.0,
        help="the trainer's gloo timeout (both runs)",
    )
    p.add_argument(
        "--target", type=cmdline.positive_int, help="time to this many steps (default: 3/4 of a run)"
    )
    p.add_argument("--only", choices=("slurm-ft", "torchrun"), default=None)
    p.add_argument(
        "--torchrun-nodes",
        type=int,
        choices=(ACTIVE_NODES, NODES),
        default=NODES,
        help=f"{NODES}: the fourth agent waits in the rendezvous (a spare); {ACTIVE_NODES}: no spare",
    )
    p.add_argument(
        "--schedule",
        choices=("default", "realistic", "lose-node"),
        default="default",
        help="realistic (#43): checkpoints every 120 s, a fault every 120 s, 20 minutes "
        "(sets --ckpt-every, --every and --duration unless given); lose-node (#44): realistic "
        "plus a lose-node every --lose-every s, 2 nodes train and a spare per lost node stands "
        "by (--nodes), snapshots every step, slurm-ft only",
    )
    p.add_argument(
        "--nodes", type=cmdline.positive_int, default=NODES, help=f"slurm-ft's job size (default {NODES})"
    )
    p.add_argument(
        "--active-nodes",
        type=int,
        default=ACTIVE_NODES,
        help=f"slurm-ft's training nodes (default {ACTIVE_NODES}; the rest stand by)",
    )
    p.add_argument(
        "--lose-every",
        type=schedule.parse_seconds,
        default=300.0,
        help="--schedule lose-node: seconds between lost nodes (default 300)",
    )
    p.add_argument(
        "--sharded",
        action="store_true",
        help="slurm-ft's trainer keeps a state per rank, the launchers --snapshot-replicas 1",
    )
    p.add_argument(
        "--snapshot-every", type=int, default=0, help="slurm-ft with snapshots every N steps (0: none)"
    )
    p.add_argument(
        "--faults",
        type=Path,
        default=None,
        help="the faults from a drill schedule file (AT FAULT [rank=R|node=N] a line) instead of "
        "a seeded plan: a targeted drill, e.g. one preemption to time its parts",
    )
    p.add_argument("--plan", action="store_true", help="print the faults and exit")
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    if not 1 <= a.active_nodes <= a.nodes:
        p.error(f"--active-nodes must be 1..{a.nodes} (--nodes)")
    if a.schedule == "realistic":
        apply_realistic(a, argv if argv is not None else sys.argv[1:])
    if a.schedule == "lose-node":
        apply_lose_node(a, argv if argv is not None else sys.argv[1:])
    if a.target is None:
        a.target = int(0.75 * a.duration / a.step_time)
    try:
        if a.faults is not None:
            plan = schedule.parse_schedule(a.faults.read_text())
        else:
            plan = schedule.seeded(
                a.every, schedule.parse_mix(a.mix), a.seed, a.duration, ACTIVE_NODES, ACTIVE_NODES
            )
        if a.schedule == "lose-node":
            plan = a.drill_plan = lose_node_plan(a)
    except schedule.ScheduleError as exc:
        p.error(f"--faults {a.faults}: {exc}" if a.faults is not None else str(exc))
    except OSError as exc:
        p.error(f"--faults {a.faults}: {exc.strerror}")
        lost = sum(1 for p in plan if p.fault is Fault.LOSE_NODE)
        if a.nodes < a.active_nodes + lost:
            print(
                f"goodput: the plan loses {lost} node(s) and the job has {a.nodes - a.active_nodes} "
                f"spare(s): give --nodes {a.active_nodes + lost} (scripts/slurm-local-up --nodes "
                f"{a.active_nodes + lost}) or a longer --lose-every",
                file=sys.stderr,
            )
            return 2
    for item in plan:
        print(item.describe())
    if a.plan:
        return 0
    if shutil.which("sbatch") is None or _sh(["sinfo", "-h"]).returncode != 0:
        print("goodput: needs the local Slurm (scripts/slurm-local-up)", file=sys.stderr)
        return 2
    have = len(set(_sh(["sinfo", "-h", "-N", "-o", "%N"]).stdout.split()))
    if have < a.nodes:
        print(f"goodput: the job needs {a.nodes} nodes, the local Slurm has {have}", file=sys.stderr)
        return 2
    out = a.out or REPO / "benchmarks" / "results" / time.strftime("goodput-%Y%m%dT%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "TORCHELASTIC_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)
    results = []
    if a.only in (None, "slurm-ft"):
        results.append(run_slurm_ft(out, a, env))
    if a.only in (None, "torchrun"):
        results.append(run_torchrun(out, a, env, plan))
    print_results(results, a)
    runs = []
    for r in results:
        steps = _steps(out / r.tool / "steps.jsonl")
        segs = tl.segments(steps, r.kept_steps, r.step_time or a.step_time, r.job_start, r.deadline)
        runs.append((r.tool, segs, r.faults, r.job_start, r.deadline))
    (out / "timelines.svg").write_text(tl.svg(runs))
    (out / "results.json").write_text(
        json.dumps(
            {"args": {k: str(v) for k, v in vars(a).items()}, "runs": [asdict(r) for r in results]}, indent=2
        )
    )
    print(f"\nresults, report and timelines in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
