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
NODE_PROCESSES = "processes.jsonl"  # in each node's own directory
NODE_SNAPSHOTS = "snapshots.jsonl"


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
    def nodes_dir(self) -> Path:
        return self.path / "nodes"

    def node_dir(self, node_name: str) -> Path:
        """One node's own files, made once by its launcher and written only by it and its
        workers: nothing a cycle adds lands in a directory that every node writes into,
        which a shared file system's directory lock would serialise (#45)."""
        return self.nodes_dir / node_name

    def node_processes(self, node_name: str) -> Path:
        """The launcher's and workers' pids of one node, one JSON line per cycle
        (``records.NodeProcesses``), appended."""
        return self.node_dir(node_name) / NODE_PROCESSES

    @property
    def snapshots_dir(self) -> Path:
        return self.path / "snapshots"

    def node_snapshots(self, node_name: str) -> Path:
        """Where each of one node's ranks resumed from, and its newest snapshot at the
        cycle's end, one JSON line per cycle (``records.NodeSnapshots``), appended."""
        return self.node_dir(node_name) / NODE_SNAPSHOTS

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

    def error_file(self, node_name: str, cycle: int, rank: int) -> Path:
        """TORCHELASTIC_ERROR_FILE of one worker in one cycle, in its node's directory."""
        return self.node_dir(node_name) / f"cycle{cycle}-rank{rank}.error.json"

    def stacks_file(self, node_name: str, cycle: int, rank: int) -> Path:
        """Every thread's Python stack of one worker, kept when a hang stopped its cycle."""
        return self.node_dir(node_name) / f"cycle{cycle}-rank{rank}.stacks.txt"

    def flight_recorder_prefix(self, node_name: str, cycle: int) -> Path:
        """The NCCL flight recorder's dump prefix (torch appends the rank)."""
        return self.node_dir(node_name) / f"cycle{cycle}-nccl_trace_rank_"

    # The layout before #45 (a directory per cycle that every node wrote into), still read
    # where a job's history is shown (the report, the logs, the drill): a job requeued
    # across an upgrade of slurm-ft keeps its state dir and its earlier cycles.

    def legacy_processes_dir(self, cycle: int) -> Path:
        return self.path / "processes" / f"{CYCLE_RECORD_STEM}{cycle}"

    @property
    def legacy_snapshots_glob(self) -> str:
        """Under :attr:`snapshots_dir`: ``cycle<N>/<node>.json``."""
        return f"{CYCLE_RECORD_STEM}*/*.json"

    def legacy_error_file(self, cycle: int, rank: int) -> Path:
        return self.path / "errors" / f"{CYCLE_RECORD_STEM}{cycle}" / f"rank{rank}.json"

    def legacy_stacks_file(self, cycle: int, rank: int) -> Path:
        return self.path / "errors" / f"{CYCLE_RECORD_STEM}{cycle}" / f"stacks-rank{rank}.txt"


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
