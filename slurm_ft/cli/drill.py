"""``slurm-ft-drill``: inject a real fault into a running slurm-ft job and record it.

    slurm-ft-drill JOBID|--state-dir DIR FAULT [--rank R | --node N] [--at T]
    slurm-ft-drill JOBID|--state-dir DIR --schedule FILE
    slurm-ft-drill JOBID|--state-dir DIR --every S [--mix M] --seed K --duration D

Everything that can be wrong with the input is found before the first signal: one line,
exit 2, nothing injected. See ``slurm_ft/drill/faults.py`` for what each fault does.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from slurm_ft import jobpointer, statedir
from slurm_ft.cli.usage import UsageError, UsageParser, run_command
from slurm_ft.drill import faults, schedule, slurmjob
from slurm_ft.drill.run import DrillJob, describe, inject
from slurm_ft.drill.targets import JobShape, TargetError, check_aim, newest_shape
from slurm_ft.exitcodes import ExitCode

PROG = "slurm-ft-drill"
_JOB_KEY = re.compile(r"[0-9]+(_[0-9]+)?")
DEFAULT_EVERY = "120"
DEFAULT_DURATION = "20m"
JOB_CHECK_PERIOD_S = 5.0


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(
        prog=PROG,
        description="Inject a real fault into a running slurm-ft job (by hand or from a seeded schedule) "
        "and record it in the job's state dir.",
        allow_abbrev=False,
    )
    p.add_argument("words", nargs="*", metavar="JOBID FAULT", help=f"faults: {', '.join(faults.NAMES)}")
    p.add_argument(
        "--state-dir", metavar="DIR", help="the job's state dir (alone: a run without Slurm, on this host)"
    )
    aim = p.add_mutually_exclusive_group()
    aim.add_argument(
        "--rank", type=int, metavar="R", help="global rank (crash, kill, hang; default: the last)"
    )
    aim.add_argument(
        "--node", metavar="N", help="node rank among the training nodes, or node name (default: the last)"
    )
    p.add_argument("--at", metavar="T", help="when: seconds from now (30, 2m) or HH:MM[:SS] today")
    p.add_argument("--schedule", metavar="FILE", help="faults from a file: AT FAULT [rank=R|node=N] per line")
    p.add_argument(
        "--every", metavar="S", help=f"seeded plan: a fault every S seconds on average ({DEFAULT_EVERY})"
    )
    p.add_argument(
        "--mix", metavar="M", default="llama3", help="seeded plan: fault=weight,... or llama3 (default)"
    )
    p.add_argument(
        "--seed", type=int, metavar="K", help="seeded plan: the seed (the same seed, the same plan)"
    )
    p.add_argument("--duration", metavar="D", help=f"seeded plan: how long ({DEFAULT_DURATION})")
    p.add_argument("--plan", action="store_true", help="print the plan and exit without injecting")
    return p


def _split_words(words: list[str]) -> tuple[str | None, str | None]:
    if len(words) > 2:
        raise UsageError(f"too many arguments: {' '.join(words)}")
    job = words[0] if words and _JOB_KEY.fullmatch(words[0]) else None
    rest = words[1:] if job is not None else words
    if len(rest) > 1:
        raise UsageError(f"expected JOBID FAULT, got {' '.join(words)}")
    return job, (rest[0] if rest else None)


def _node_arg(text: str | None) -> int | str | None:
    if text is None:
        return None
    return int(text) if text.isdigit() else text


def _find_job(job_key: str | None, state_dir: str | None, env: Mapping[str, str], cwd: str) -> DrillJob:
    """The job and its state dir, refused unless it is a running slurm-ft job of the caller's."""
    if job_key is None and state_dir is None:
        raise UsageError("give JOBID or --state-dir DIR")
    job_id: str | None = None
    if job_key is not None:
        try:
            info = slurmjob.lookup(job_key)
            slurmjob.check_drillable(info, os.getuid())
        except slurmjob.JobError as exc:
            raise UsageError(str(exc)) from None
        job_id = info.job_id
        base = info.work_dir or env.get("SLURM_SUBMIT_DIR") or cwd
        if state_dir:
            state = statedir.StateDir(Path(state_dir))
        else:
            default = statedir.for_job_key(base, info.job_key).path
            pointers = jobpointer.pointers_dir(env)
            state = statedir.StateDir(jobpointer.find(default, info.job_key, pointers, os.getuid()))
    else:
        assert state_dir is not None
        state = statedir.StateDir(Path(state_dir))
    shape = newest_shape(state)
    if shape is None:
        raise UsageError(f"not a slurm-ft job: {state.path} holds no launcher process records")
    owners = {p.job_id for p in shape.processes.values()}
    if job_id is None and owners != {None}:
        raise UsageError(
            f"{state.path} belongs to Slurm job {sorted(o or '-' for o in owners)[0]}: give its JOBID"
        )
    if job_id is not None and job_id not in owners:
        raise UsageError(f"not a slurm-ft job: {state.path} records no launcher of job {job_id}")
    return DrillJob(state, job_id)


def _plan(args: argparse.Namespace, fault_name: str | None, shape: JobShape) -> list[schedule.Planned]:
    seeded = args.every is not None or args.seed is not None or args.duration is not None
    chosen = sum(x for x in (fault_name is not None, args.schedule is not None, seeded))
    if chosen != 1:
        raise UsageError("give one of: FAULT, --schedule FILE, or --every/--seed/--duration")
    try:
        if fault_name is not None:
            fault = faults.parse(fault_name)
            now = time.time()
            midnight = time.mktime((*time.localtime(now)[:3], 0, 0, 0, 0, 0, -1))
            at = schedule.parse_at(args.at, now, midnight) - now if args.at else 0.0
            return [schedule.Planned(at, fault, args.rank, None)]
        if args.rank is not None or args.node is not None or args.at is not None:
            raise UsageError("--rank, --node and --at go with one FAULT; a schedule says its own")
        if args.schedule is not None:
            try:
                text = Path(args.schedule).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise UsageError(f"cannot read {args.schedule}: {exc}") from None
            try:
                return schedule.parse_schedule(text)
            except schedule.ScheduleError as exc:
                raise UsageError(f"{args.schedule}: {exc}") from None
        if args.seed is None:
            raise UsageError("a seeded plan needs --seed K (the same seed, the same plan)")
        return schedule.seeded(
            schedule.parse_seconds(args.every or DEFAULT_EVERY),
            schedule.parse_mix(args.mix),
            args.seed,
            schedule.parse_seconds(args.duration or DEFAULT_DURATION),
            shape.world_size,
            shape.num_nodes,
        )
    except (faults.FaultError, schedule.ScheduleError) as exc:
        raise UsageError(str(exc)) from None


def _job_state(job: DrillJob) -> str:
    """RUNNING for a run without Slurm; Slurm's state word, or GONE when it forgot the job."""
    if job.job_id is None:
        return "RUNNING"
    try:
        return slurmjob.lookup(job.job_id).state
    except slurmjob.JobError:
        return "GONE"


def _wait_until(when: float, job: DrillJob, sleep: Callable[[float], None] = time.sleep) -> str | None:
    """Sleep until ``when``; the job's state then, or None when it ended meanwhile (a
    requeued job waiting in the queue has not ended: a schedule goes on through requeues)."""
    while True:
        left = when - time.time()
        if left <= 0:
            state = _job_state(job)
            return None if slurmjob.ended(state) else state
        sleep(min(left, JOB_CHECK_PERIOD_S))
        if left > JOB_CHECK_PERIOD_S and slurmjob.ended(_job_state(job)):
            return None


def _main(argv: Sequence[str] | None, env: Mapping[str, str], cwd: str) -> int:
    args = build_parser().parse_args(argv)
    job_key, fault_name = _split_words(list(args.words))
    job = _find_job(job_key, args.state_dir, env, cwd)
    shape = newest_shape(job.state)
    assert shape is not None
    plan = _plan(args, fault_name, shape)
    node = _node_arg(args.node)
    for item in plan:
        try:
            check_aim(item.fault, shape, item.rank, node if len(plan) == 1 and fault_name else item.node)
        except TargetError as exc:
            raise UsageError(str(exc)) from None
        if item.fault is faults.Fault.PREEMPT and job.job_id is None:
            raise UsageError("preempt needs a Slurm job (it signals the batch script): give JOBID")
    label = f"seed {args.seed}" if args.seed is not None else (args.schedule or None)
    if args.plan:
        for item in plan:
            print(item.describe())
        return int(ExitCode.SUCCESS)
    start = time.time()
    for k, item in enumerate(plan, 1):
        state = _wait_until(start + item.at, job)
        if state is None:
            print(f"{PROG}: the job has ended; {k - 1} of {len(plan)} faults were due")
            return int(ExitCode.SUCCESS)
        where = node if fault_name else item.node
        tag = f"{label}, fault {k} of {len(plan)}" if label else None
        skip = None if state == "RUNNING" else f"the job is {state} (requeued?): nothing to hit"
        rec = inject(job, item.fault, item.rank, where, schedule=tag, skip=skip)
        print(describe(rec), flush=True)
    return int(ExitCode.SUCCESS)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(PROG, lambda: _main(argv, dict(os.environ), os.getcwd()))


if __name__ == "__main__":
    from slurm_ft.cli.entry import finish

    finish(main)
