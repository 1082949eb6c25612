"""Fencing a lost store host: none of its processes may still write once a successor leads.

A store host that froze (SIGSTOP, a hung kernel, a network partition) is not dead: its
launcher, and its workers, may wake up later, and an old rank 0 that wakes up must not
overwrite the new cycle's checkpoint. So before the successor's first decision, every
process the lost host recorded (``nodes/<node>/processes.jsonl``: the launcher and its
workers, with their start ticks, so a reused pid is never hit) gets SIGKILL: through
Slurm (``srun --jobid J --overlap -w NODE``, the drill's helper) inside a Slurm step, on
this host otherwise (simulated nodes). What could not be killed (the node does not
answer) is named, for the outcome record. A process that already ended is fenced.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from slurm_ft import jsonlines
from slurm_ft.drill.send import Sent, send_here, send_via_srun
from slurm_ft.drill.targets import Shot
from slurm_ft.records import NodeProcesses
from slurm_ft.statedir import StateDir

FENCE_TIMEOUT_S = 20.0  # an srun to a node that does not answer


@dataclass(frozen=True)
class Fenced:
    """What the fence did: how many processes it killed (or found ended), and each it
    could not kill with why ("node0: pid 123 (rank 0): <why>")."""

    node: str
    killed: int = 0
    unfenced: tuple[str, ...] = ()
    found: bool = True  # a record of the node's processes was there

    def describe(self) -> str:
        if not self.found:
            return f"fence of {self.node}: no record of its processes"
        if self.unfenced:
            return f"fence of {self.node}: {self.killed} killed, NOT fenced: {'; '.join(self.unfenced)}"
        return f"fence of {self.node}: {self.killed} process(es) killed or already gone"


def recorded(state: StateDir, node: str, cycles: Sequence[int], run_uuid: str) -> NodeProcesses | None:
    """The newest of ``cycles`` (newest first) for which ``node`` recorded its processes in
    this run (its last line of the cycle, should there be two)."""
    mine: dict[int, NodeProcesses] = {}
    for doc in jsonlines.read(state.node_processes(node)):
        try:
            found = NodeProcesses.from_json(doc)
        except (TypeError, ValueError):
            continue
        if found.run_uuid == run_uuid and found.node == node:
            mine[found.cycle] = found
    return next((mine[c] for c in cycles if c in mine), None)


def shots_of(procs: NodeProcesses) -> tuple[list[Shot], dict[int, str]]:
    """SIGKILL targets: each worker's process group (data loaders go with it), then the
    launcher; and what each pid was, for people."""
    shots = [Shot(w.pid, w.start_ticks, True) for w in procs.workers]
    shots.append(Shot(procs.launcher_pid, procs.launcher_start_ticks))
    what = {w.pid: f"rank {w.rank}" for w in procs.workers}
    what[procs.launcher_pid] = "launcher"
    return shots, what


def fence(
    state: StateDir,
    node: str,
    cycles: Sequence[int],
    run_uuid: str,
    job_id: str | None,
    *,
    via_srun: bool,
    timeout: float = FENCE_TIMEOUT_S,
) -> Fenced:
    """SIGKILL what ``node`` recorded in the newest of ``cycles`` (see the module doc)."""
    procs = recorded(state, node, cycles, run_uuid)
    if procs is None:
        return Fenced(node, found=False)
    shots, what = shots_of(procs)
    shots = [s for s in shots if s.pid != os.getpid()]  # launchers of one process (the tests)
    if via_srun and job_id is not None:
        sent = send_via_srun(job_id, node, shots, signal.SIGKILL, timeout=timeout)
    else:
        sent = send_here(shots, signal.SIGKILL, job_id)
    return summary(node, sent, what)


def summary(node: str, sent: Sequence[Sent], what: dict[int, str]) -> Fenced:
    """A process signalled, or one that had ended, is fenced; any other answer is not."""
    unfenced = tuple(
        f"{node}: pid {s.pid} ({what.get(s.pid, '?')}): {s.problem}"
        for s in sent
        if not s.ok and not (s.problem or "").endswith(("(it ended)", "ended before the signal"))
    )
    return Fenced(node, killed=len(sent) - len(unfenced), unfenced=unfenced)
