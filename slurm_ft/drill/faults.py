"""The faults a drill can inject, and how each one is made honestly.

Every fault is a signal to processes the launchers recorded (``records.NodeProcesses``),
so it is real: the job's own detectors have to find it, and it costs what it costs.

* ``crash``: the rank aborts (SIGABRT): what a failed C++/CUDA assertion, ``std::terminate``
  or an abort in a collective library does to a trainer. The launcher records it as a worker
  killed by SIGABRT, told apart from ``kill``'s SIGKILL. (A Python exception cannot be
  raised from outside a process without the trainer's help.)
* ``kill``: SIGKILL to one rank (with its process group): a GPU falling off the bus, the
  OOM killer.
* ``hang``: SIGSTOP to one rank: it stays alive and silent, the others wait in a collective.
* ``freeze-launcher``: SIGSTOP to one node's launcher: its heart-beat stops, its workers run on.
* ``lose-node``: SIGKILL to one node's launcher and all its workers at once: a host gone.
* ``kill-launcher``: SIGKILL to one node's launcher alone (its workers die with it, by their
  parent-death signal): the snapshot mode's fault, since the node's in-memory snapshots go
  with the launcher that owns them (its area is swept by the next launcher on the node), so
  the job goes on from a replica or its last checkpoint.
* ``preempt``: SIGUSR1 to the job's batch script (``scancel --signal=USR1 --batch``), what
  ``#SBATCH --signal=B:USR1@T`` sends before a time limit or preemption. Slurm jobs only.

Not offered, because they cannot be done honestly here: ``slow-storage`` (needs a storage
path the drill can slow down for the job alone: a FUSE or a cgroup io limit made by root,
on every node) and ``nic-down`` (the nodes of a job share host interfaces on one machine,
and taking a real NIC down needs root and takes every job on the node with it). The drill
names them and refuses with the reason, so a schedule that asks for them fails up front.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import Enum


class Fault(str, Enum):
    CRASH = "crash"
    KILL = "kill"
    HANG = "hang"
    FREEZE_LAUNCHER = "freeze-launcher"
    LOSE_NODE = "lose-node"
    KILL_LAUNCHER = "kill-launcher"
    PREEMPT = "preempt"


class Target(str, Enum):
    """What a fault is aimed at: one rank, one node's launcher (and its workers), the batch script."""

    RANK = "rank"
    NODE = "node"
    BATCH = "batch"


@dataclass(frozen=True)
class FaultSpec:
    """How a fault is made: the signal and which processes receive it."""

    target: Target
    signal: signal.Signals
    with_workers: bool = False  # NODE: the node's workers receive it too, in the same moment


SPECS: dict[Fault, FaultSpec] = {
    Fault.CRASH: FaultSpec(Target.RANK, signal.SIGABRT),
    Fault.KILL: FaultSpec(Target.RANK, signal.SIGKILL),
    Fault.HANG: FaultSpec(Target.RANK, signal.SIGSTOP),
    Fault.FREEZE_LAUNCHER: FaultSpec(Target.NODE, signal.SIGSTOP),
    Fault.LOSE_NODE: FaultSpec(Target.NODE, signal.SIGKILL, with_workers=True),
    Fault.KILL_LAUNCHER: FaultSpec(Target.NODE, signal.SIGKILL),
    Fault.PREEMPT: FaultSpec(Target.BATCH, signal.SIGUSR1),
}

NOT_HERE: dict[str, str] = {
    "slow-storage": (
        "slow-storage cannot be injected honestly here: it needs a storage path slowed for this "
        "job alone on every node (a FUSE mount or a root-made cgroup io limit)"
    ),
    "nic-down": (
        "nic-down cannot be injected honestly here: taking a real NIC down needs root and cuts "
        "every job on the node (the local cluster's nodes share one host's interfaces)"
    ),
}

NAMES = tuple(f.value for f in Fault)


class FaultError(ValueError):
    """A fault name the drill cannot inject; the message says why."""


def parse(name: str) -> Fault:
    if name in NOT_HERE:
        raise FaultError(NOT_HERE[name])
    try:
        return Fault(name)
    except ValueError:
        raise FaultError(f"unknown fault {name!r} (known: {', '.join(NAMES)})") from None
