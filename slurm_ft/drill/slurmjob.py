"""The job as Slurm describes it (``scontrol show job -o``): whether the drill may touch it.

The drill refuses a job that is not running or is not the caller's before it reads any
record; which state dir and which processes belong to it comes from the records.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from slurm_ft import boundedrun

SCONTROL_TIMEOUT_S = 30.0


class JobError(ValueError):
    """The job cannot be drilled; the message says why."""


@dataclass(frozen=True)
class SlurmJobInfo:
    job_id: str
    state: str
    user_id: int | None
    work_dir: str | None
    batch_host: str | None
    array_job_id: str | None
    array_task_id: str | None

    @property
    def job_key(self) -> str:
        """The state dir's name for this job (array tasks: ``<array id>_<task>``)."""
        if self.array_job_id and self.array_task_id and self.array_task_id.isdigit():
            return f"{self.array_job_id}_{self.array_task_id}"
        return self.job_id


def parse_show_job(text: str) -> dict[str, str]:
    """``scontrol show job -o``'s one line -> its ``Key=Value`` pairs (values without spaces)."""
    fields: dict[str, str] = {}
    for word in text.split():
        key, sep, value = word.partition("=")
        if sep and key not in fields:
            fields[key] = value
    return fields


def info_from_fields(fields: dict[str, str]) -> SlurmJobInfo:
    uid_text = fields.get("UserId", "")  # "name(1000)"
    uid = None
    if "(" in uid_text and uid_text.endswith(")"):
        digits = uid_text.rsplit("(", 1)[1][:-1]
        uid = int(digits) if digits.isdigit() else None
    return SlurmJobInfo(
        job_id=fields.get("JobId", ""),
        state=fields.get("JobState", "UNKNOWN"),
        user_id=uid,
        work_dir=fields.get("WorkDir") or None,
        batch_host=fields.get("BatchHost") or None,
        array_job_id=fields.get("ArrayJobId") or None,
        array_task_id=fields.get("ArrayTaskId") or None,
    )


def lookup(job_id: str) -> SlurmJobInfo:
    try:
        done = boundedrun.run(["scontrol", "show", "job", "-o", job_id], SCONTROL_TIMEOUT_S)
    except FileNotFoundError:
        raise JobError(
            "scontrol not found: a JOBID needs Slurm (use --state-dir for a run without Slurm)"
        ) from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JobError(f"scontrol failed: {exc}") from None
    if done.returncode != 0 or not done.stdout.strip():
        why = done.stderr.strip() or "no such job"
        raise JobError(f"job {job_id}: {why}")
    return info_from_fields(parse_show_job(done.stdout.splitlines()[0]))


# Slurm's job states after which the job will not run again (a requeued job is PENDING).
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "GONE",
    }
)


def ended(state: str) -> bool:
    return state in FINAL_STATES


def check_drillable(info: SlurmJobInfo, caller_uid: int) -> None:
    if info.state != "RUNNING":
        raise JobError(f"job {info.job_id} is not running ({info.state})")
    if info.user_id is not None and info.user_id != caller_uid:
        raise JobError(
            f"job {info.job_id} is not yours (uid {info.user_id}): the drill touches only its caller's jobs"
        )
