"""One injection: aim, send, record. The record goes to the job's state dir whatever happened,
so the report shows a fault that could not be sent as well as one that was."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from slurm_ft import records
from slurm_ft.drill import send
from slurm_ft.drill.faults import SPECS, Fault, Target
from slurm_ft.drill.targets import Aim, JobShape, TargetError, aim, newest_shape
from slurm_ft.records import DrillRecord
from slurm_ft.statedir import StateDir


@dataclass(frozen=True)
class DrillJob:
    """What the drill needs of its job: the state dir, and the Slurm job id (None: a run
    without Slurm, on this host)."""

    state: StateDir
    job_id: str | None


def inject(
    job: DrillJob,
    fault: Fault,
    rank: int | None,
    node: int | str | None,
    schedule: str | None = None,
    clock: Callable[[], float] = time.time,
    skip: str | None = None,
) -> DrillRecord:
    """Inject ``fault`` now and record it; never raises for a target that is gone.
    ``skip``: record it as not injected, for that reason (the job is not running now)."""
    spec = SPECS[fault]
    shape = newest_shape(job.state)
    target: Aim | None = None
    problem: str | None = skip
    sent: list[send.Sent] = []
    if problem is None and shape is None:
        problem = "no cycle with recorded processes yet"
    elif problem is None and shape is not None:
        try:
            target = aim(fault, shape, rank, node)
        except TargetError as exc:
            problem = str(exc)
    when = clock()
    if target is not None:
        if spec.target is Target.BATCH:
            problem = (
                send.preempt(job.job_id)
                if job.job_id
                else "preempt needs a Slurm job (it signals the batch script)"
            )
        elif job.job_id is None:  # a run without Slurm: its processes are on this host
            sent = send.send_here(target.shots, int(spec.signal), None)
        else:
            assert target.node is not None
            sent = send.send_via_srun(job.job_id, target.node, target.shots, int(spec.signal))
        problems = [s.problem for s in sent if not s.ok and s.problem]
        if problems and not any(s.ok for s in sent):
            problem = "; ".join(problems)
        elif problems:
            problem = "partly: " + "; ".join(problems)
    rec = DrillRecord(
        fault=fault.value,
        time=when,
        node=target.node if target else None,
        node_rank=target.node_rank if target else None,
        rank=target.rank if target else None,
        cycle=target.cycle if target else (shape.cycle if shape else None),
        signal=spec.signal.name,
        pids=[s.pid for s in sent if s.ok],
        job_id=job.job_id,
        injected=problem is None or problem.startswith("partly"),
        problem=problem,
        schedule=schedule,
    )
    path = job.state.drills_dir / f"{when:.3f}-{fault.value}.json"
    records.write(path, rec)
    return rec


def shape_of(job: DrillJob) -> JobShape | None:
    return newest_shape(job.state)


def describe(rec: DrillRecord) -> str:
    where = f"rank {rec.rank} on {rec.node}" if rec.rank is not None else (rec.node or "the batch script")
    stamp = time.strftime("%H:%M:%S", time.localtime(rec.time))
    if rec.injected:
        text = f"{stamp} {rec.fault}: {rec.signal} to {where} (cycle {rec.cycle})"
        return text + (f" [{rec.problem}]" if rec.problem else "")
    return f"{stamp} {rec.fault}: not injected: {rec.problem}"
