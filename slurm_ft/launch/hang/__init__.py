"""Hang detection: what counts as a hang (pure judgements) and the readings they judge.

Three families, each off when its timeout is 0 (settings ``hang.*``):

* **silence** — no worker of the whole job wrote anything for ``hang.timeout`` seconds.
  Each launcher measures its own workers (the output its log pipeline reads, timed as it
  arrives; the bytes they write, from ``/proc/<pid>/io``: output it does not capture and
  any file they write), peers report "quiet for S seconds" with their
  heart-beat, and the coordinator judges the job as a whole: one rank that never prints
  is not a hang while others do. A rank held in the kernel (stopped, uninterruptible)
  through the silence is no start-up: the warm-up does not apply (:data:`HELD_STATES`).
* **iteration** — the checkpoint iteration did not advance for ``hang.iteration_timeout``.
* **rank** (opt-in, :mod:`slurm_ft.worker`) — a rank's heart-beats or sections, judged
  by its own launcher from the worker's shared-memory slot, with ft_launcher's meaning.

The package's modules, by job: :mod:`verdicts` (pure judgements and their limits),
:mod:`proc` (the /proc readings), :mod:`nodewatch` (a launcher's watch over its own
workers), :mod:`iteration` (node 0's watch over the progress source), :mod:`stacks` (the
evidence), :mod:`learn` (the learned timeouts, pure), :mod:`arrivals` (the workers' output
timed as the log pipeline reads it) and :mod:`judge` (node 0's verdicts while a cycle runs).
The names below are what the launcher's roles use; ``judge`` and ``learn`` are imported by
name where they are needed (importing this package does not run the judge).
"""

from __future__ import annotations

from slurm_ft.launch.hang.iteration import IterationWatch
from slurm_ft.launch.hang.nodewatch import LIVES_KEPT, Life, NodeWatch, parse_report, reported_held
from slurm_ft.launch.hang.proc import (
    HELD_STATES,
    STOPPED_STATES,
    UNINTERRUPTIBLE,
    bytes_read,
    bytes_written,
    process_state,
)
from slurm_ft.launch.hang.stacks import collect_stacks
from slurm_ft.launch.hang.verdicts import (
    Detector,
    Hang,
    Limits,
    failure_of,
    judge_rank,
    judge_silence,
    rank_hang,
)

__all__ = [
    "HELD_STATES",
    "LIVES_KEPT",
    "STOPPED_STATES",
    "UNINTERRUPTIBLE",
    "Detector",
    "Hang",
    "IterationWatch",
    "Life",
    "Limits",
    "NodeWatch",
    "bytes_read",
    "bytes_written",
    "collect_stacks",
    "failure_of",
    "judge_rank",
    "judge_silence",
    "parse_report",
    "process_state",
    "rank_hang",
    "reported_held",
]
