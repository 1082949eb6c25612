"""Where a job's state lives and what each file in it is called.

The launcher, `slurm-ft-progress` and the sbatch templates must all find the same
directory from the same inputs, across Slurm requeues of the job, so the rule lives here
and nowhere else. The formats of the files belong to their own modules (the ledger to
``progress.py``, cycle and outcome records to ``launch/records.py``); this module only
names them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from slurm_ft.slurm import SlurmJob

STATE_DIR_NAME = ".slurm_ft"
CYCLE_RECORD_STEM = "cycle"


@dataclass(frozen=True)
class StateDir:
    """Where every state file lives: one home for the names the launcher, the guard and the report share."""

    path: Path

    @property
    def ledger(self) -> Path:
        return self.path / "ledger.json"

    @property
    def cycle_counter(self) -> Path:
        """Next global cycle number; survives requeues so no log file is ever reused."""
        return self.path / "next_cycle"

    @property
    def outcome(self) -> Path:
        return self.path / "outcome.json"

    @property
    def outcomes_dir(self) -> Path:
        """Every attempt's outcome record, kept: ``outcome.json`` holds only the latest."""
        return self.path / "outcomes"

    def attempt_outcome(self, attempt: int, run_uuid: str) -> Path:
        """The kept copy of one launcher run's outcome; the uuid tells apart standalone runs,
        which all count as attempt 0."""
        return self.outcomes_dir / f"attempt{attempt}.{run_uuid}.json"

    @property
    def cycles_dir(self) -> Path:
        return self.path / "cycles"

    def cycle_record(self, cycle: int) -> Path:
        return self.cycles_dir / f"{CYCLE_RECORD_STEM}{cycle}.json"

    def recorded_cycles(self) -> list[int]:
        """The cycle numbers that have a record (unreadable directory: none)."""
        found = []
        try:
            paths = list(self.cycles_dir.glob(f"{CYCLE_RECORD_STEM}*.json"))
        except OSError:
            return []
        for path in paths:
            number = path.stem[len(CYCLE_RECORD_STEM) :]
            if number.isdigit():
                found.append(int(number))
        return sorted(found)

    @property
    def unhealthy_dir(self) -> Path:
        return self.path / "unhealthy"

    def unhealthy_record(self, node_name: str) -> Path:
        return self.unhealthy_dir / f"{node_name}.json"

    @property
    def processes_dir(self) -> Path:
        return self.path / "processes"

    def node_processes(self, cycle: int, node_name: str) -> Path:
        """The launcher's and workers' pids of one node in one cycle (``records.NodeProcesses``)."""
        return self.processes_dir / f"{CYCLE_RECORD_STEM}{cycle}" / f"{node_name}.json"

    @property
    def snapshots_dir(self) -> Path:
        return self.path / "snapshots"

    def node_snapshots(self, cycle: int, node_name: str) -> Path:
        """Where each of one node's ranks resumed from in one cycle, and its newest snapshot
        at the cycle's end (``records.NodeSnapshots``)."""
        return self.snapshots_dir / f"{CYCLE_RECORD_STEM}{cycle}" / f"{node_name}.json"

    def snapshots_persisted(self, attempt: int, node_name: str) -> Path:
        """What one node's launcher persisted on its way out of ``attempt``
        (``records.SnapshotsPersisted``)."""
        return self.snapshots_dir / f"persisted-attempt{attempt}-{node_name}.json"

    def succession_claim(self, run_id: str, epoch: int) -> Path:
        """Who hosts the launchers' store in ``epoch`` of attempt ``run_id``
        (``records.SuccessionClaim``): made once, never replaced (``launch.succession.rule``)."""
        return self.path / "succession" / f"{run_id}.epoch{epoch}.json"

    def succession_port(self, run_id: str, epoch: int) -> Path:
        """The port the successor's store of ``epoch`` listens on, written once it does, so
        followers go straight to it (``launch.succession.rule``); a hint, never trusted alone."""
        return self.path / "succession" / f"{run_id}.epoch{epoch}.port"

    @property
    def drills_dir(self) -> Path:
        """One ``records.DrillRecord`` per fault ``slurm-ft-drill`` injected."""
        return self.path / "drills"

    @property
    def progress_readings(self) -> Path:
        """Node 0's timed readings of the progress source (``records.ProgressReading``, JSON lines)."""
        return self.path / "progress" / "readings.jsonl"

    @property
    def snapshot_readings(self) -> Path:
        """Node 0's timed readings of its newest snapshot step (``records.ProgressReading``,
        JSON lines; ``launch.snapshots.readings``)."""
        return self.path / "progress" / "snapshot-readings.jsonl"

    @property
    def error_files_dir(self) -> Path:
        return self.path / "errors"

    def error_file(self, cycle: int, rank: int) -> Path:
        """TORCHELASTIC_ERROR_FILE of one worker in one cycle."""
        return self.error_files_dir / f"cycle{cycle}" / f"rank{rank}.json"

    def stacks_file(self, cycle: int, rank: int) -> Path:
        """Every thread's Python stack of one worker, kept when a hang stopped its cycle."""
        return self.error_files_dir / f"cycle{cycle}" / f"stacks-rank{rank}.txt"


def resolve(job: SlurmJob, configured: str | None, cwd: str | os.PathLike[str]) -> StateDir:
    """The state dir: the configured one, else ``<submit dir>/.slurm_ft/<job key>``.

    Standalone runs have no job id to key on; they share ``standalone``, and a new run
    continues the history like a requeue would (cycle numbers, and so log files, are never
    reused; ``slurm-ft-progress reset`` or ``--state-dir`` starts afresh).
    """
    if configured:
        return StateDir(Path(configured))
    return for_job_key(job.submit_dir or cwd, job.job_key)


def for_job_key(submit_dir: str | os.PathLike[str], job_key: str) -> StateDir:
    """``<submit dir>/.slurm_ft/<job key>``: the default state dir of a job (``standalone``
    for runs outside Slurm)."""
    return StateDir(Path(submit_dir) / STATE_DIR_NAME / job_key)
