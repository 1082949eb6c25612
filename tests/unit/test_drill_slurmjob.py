"""What the drill reads of `scontrol show job -o`, and when it refuses a job."""

from __future__ import annotations

import pytest

from slurm_ft.drill import slurmjob

LINE = (
    "JobId=42 JobName=train UserId=alice(1001) GroupId=alice(1001) JobState=RUNNING Reason=None "
    "WorkDir=/home/alice/run BatchHost=node1 NodeList=node[1-4] ArrayJobId=40 ArrayTaskId=2 "
    "StdOut=/home/alice/run/slurm-42.out"
)


def test_the_fields_the_drill_needs_are_read() -> None:
    info = slurmjob.info_from_fields(slurmjob.parse_show_job(LINE))
    assert (info.job_id, info.state, info.user_id, info.work_dir, info.batch_host) == (
        "42",
        "RUNNING",
        1001,
        "/home/alice/run",
        "node1",
    )
    assert info.job_key == "40_2"  # an array task's state dir is named after its array
    plain = slurmjob.info_from_fields(slurmjob.parse_show_job("JobId=7 JobState=PENDING UserId=bob(5)"))
    assert plain.job_key == "7" and plain.work_dir is None


def test_a_job_not_running_or_not_the_callers_is_refused() -> None:
    info = slurmjob.info_from_fields(slurmjob.parse_show_job(LINE))
    slurmjob.check_drillable(info, 1001)
    with pytest.raises(slurmjob.JobError, match="is not yours"):
        slurmjob.check_drillable(info, 0)
    pending = slurmjob.info_from_fields(slurmjob.parse_show_job(LINE.replace("RUNNING", "PENDING")))
    with pytest.raises(slurmjob.JobError, match=r"is not running \(PENDING\)"):
        slurmjob.check_drillable(pending, 1001)


def test_a_requeued_job_has_not_ended() -> None:
    assert not slurmjob.ended("PENDING") and not slurmjob.ended("RUNNING")
    assert slurmjob.ended("COMPLETED") and slurmjob.ended("CANCELLED") and slurmjob.ended("GONE")
