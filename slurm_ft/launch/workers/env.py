"""The one builder of a worker's environment: the launcher's own environment (job secret
removed) with the variables this launcher sets for one worker of one cycle laid over it.

The spawn (:mod:`slurm_ft.launch.workers.group`) and ``--dry-run``
(:mod:`slurm_ft.cli.dryrun`) both call :func:`launcher_vars`, so what the dry run prints
is what the workers get; assembled in three places before, the two had drifted apart.
Every input is passed in: nothing here reads the process's environment or touches a
file, so the dry run can ask for a cycle that has not run yet.

What is set, in the order it is laid down (a later family never overrides an earlier one):

* torchrun's variables (``RANK`` ... ``TORCHELASTIC_ERROR_FILE``), ``OMP_NUM_THREADS=1``
  when unset and more than one worker, and ``SLURM_FT_CYCLE``/``SLURM_FT_CYCLE_INFO``;
* hang detection: the rank's monitor slot and the forwarded signals
  (:mod:`slurm_ft.worker` reads both); for Python workers the stack file and signal,
  with the injected ``sitecustomize`` first on ``PYTHONPATH`` to arm them;
* torch's NCCL flight recorder, unless the job sets a variable itself: GPU jobs leave
  their collective traces in the state dir when NCCL times out;
* NIC affinity (``NCCL_IB_HCA``, ``UCX_NET_DEVICES``) when placement chose NICs, unless
  the job sets them;
* snapshots: the node's snapshot area and its cap, and where the launchers persist
  snapshots (:mod:`slurm_ft.worker` reads them), when snapshots are on.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from slurm_ft import worker
from slurm_ft.launch.workers.layout import Topology
from slurm_ft.statedir import StateDir

if TYPE_CHECKING:
    from slurm_ft.topology.plan import Plan

# The signal that asks a worker for its stacks (armed by inject/sitecustomize.py). A
# real-time signal: no trainer or library uses it for anything else.
STACK_SIGNAL = signal.SIGRTMIN + 4
INJECT_DIR = Path(__file__).resolve().parents[1] / "inject"
STACK_FILE_ENV = "SLURM_FT_STACK_FILE"
STACK_SIGNAL_ENV = "SLURM_FT_STACK_SIGNAL"
# torch's NCCL flight recorder: (the name torch 2.8 and later reads, the name before it,
# value); the trace files' prefix is added per cycle. torch 2.8 made the recorder serve
# every backend and renamed its variables TORCH_FR_*: it still reads the old names, but
# warns at every worker's start that they are deprecated. TORCH_NCCL_DUMP_ON_TIMEOUT,
# NCCL's own, kept its name.
FR_RENAMED_IN = (2, 8)
NCCL_FLIGHT_RECORDER = (
    ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"),
    ("TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
)
NCCL_TRACE_PREFIX_ENVS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")


# The records here are NamedTuples, not dataclasses: they are defined on every launch's
# start, where a frozen dataclass costs ~4 M instructions to define (1% of a trivial
# launch) and a NamedTuple under 2 M.
class RankFiles(NamedTuple):
    """A worker's files in the launcher's private run dir (shared memory when there is);
    naming them is this module's job, making them the spawn's."""

    slot: str
    stack: str | None  # None: not a Python worker, no stack dump

    @classmethod
    def at(cls, run_dir: str | Path, rank: int, python: bool) -> RankFiles:
        return cls(
            str(Path(run_dir, f"rank{rank}.slot")),
            str(Path(run_dir, f"rank{rank}.stack")) if python else None,
        )


class SnapshotEnv(NamedTuple):
    """The node's snapshot area (made at the launcher's start), its cap, and the persist dir."""

    area: str
    limit: int
    persisted: str | None = None


class JobEnv(NamedTuple):
    """What the environments of this launcher's workers are made of, whatever the cycle."""

    base: Mapping[str, str]  # the launcher's environment without the job secret
    run_id: str
    max_restarts: int
    forwarded: tuple[int, ...]  # signals the launcher forwards to its workers
    python: bool  # Python workers: their stacks can be asked for
    state: StateDir  # cycle records, error files, NCCL traces
    run_dir: str  # the launcher's private run dir: monitor slots and stack files
    node_name: str  # this node: its own directory in the state dir (error files, NCCL traces)
    placement: Plan | None = None  # CPU/NUMA binding and NICs of each local rank
    torch_version: tuple[int, int] | None = None  # the workers' torch (None: not found)
    snapshots: SnapshotEnv | None = None  # None: snapshots off on this node

    def files(self, rank: int) -> RankFiles:
        return RankFiles.at(self.run_dir, rank, self.python)


class CycleEnv(NamedTuple):
    """What changes from cycle to cycle: where this node sits (spares move it), node 0's
    ``MASTER_PORT`` for the workers, the restart count and the job-wide cycle number."""

    topo: Topology
    master_port: int | str
    restart_count: int
    cycle: int


def launcher_vars(job: JobEnv, cyc: CycleEnv, local_rank: int) -> dict[str, str]:
    """The variables the launcher sets for local rank ``local_rank`` of cycle ``cyc``
    (new ones and ones it replaces); the worker's environment is ``job.base`` with these
    laid over it (:func:`worker_env`)."""
    base, topo = job.base, cyc.topo
    rank = topo.global_rank(local_rank)
    out = {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(topo.world_size),
        "LOCAL_WORLD_SIZE": str(topo.nproc_per_node),
        "GROUP_RANK": str(topo.node_rank),
        "GROUP_WORLD_SIZE": str(topo.num_nodes),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(topo.world_size),
        "ROLE_NAME": topo.role,
        "MASTER_ADDR": topo.master_addr,
        "MASTER_PORT": str(cyc.master_port),
        "TORCHELASTIC_RESTART_COUNT": str(cyc.restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(job.max_restarts),
        "TORCHELASTIC_RUN_ID": job.run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCHELASTIC_ERROR_FILE": str(job.state.error_file(job.node_name, cyc.cycle, rank)),
        "SLURM_FT_CYCLE": str(cyc.cycle),
        "SLURM_FT_CYCLE_INFO": str(job.state.cycle_record(cyc.cycle)),
    }
    if "OMP_NUM_THREADS" not in base and topo.nproc_per_node > 1:
        out["OMP_NUM_THREADS"] = "1"
    files = job.files(rank)
    out[worker.MONITOR_ENV] = files.slot
    out[worker.SIGNALS_ENV] = ",".join(str(int(s)) for s in job.forwarded)
    if files.stack is not None:
        path = base.get("PYTHONPATH", "")
        out["PYTHONPATH"] = f"{INJECT_DIR}{os.pathsep}{path}" if path else str(INJECT_DIR)
        out[STACK_FILE_ENV] = files.stack
        out[STACK_SIGNAL_ENV] = str(int(STACK_SIGNAL))
    out.update(flight_recorder_vars(job, cyc.cycle))
    if job.placement is not None:
        out.update(job.placement.ranks[local_rank].nic_env(base))
    if job.snapshots is not None:
        out[worker.SNAPSHOT_DIR_ENV] = job.snapshots.area
        out[worker.SNAPSHOT_LIMIT_ENV] = str(job.snapshots.limit)
        if job.snapshots.persisted:
            out[worker.SNAPSHOT_PERSISTED_ENV] = job.snapshots.persisted
    return out


def flight_recorder_vars(job: JobEnv, cycle: int) -> dict[str, str]:
    """The flight recorder's variables under the names the workers' torch reads (the new
    ones when the version is unknown: nothing to warn about), each unless the job set it
    under either name."""
    trace = str(job.state.flight_recorder_prefix(job.node_name, cycle))
    old = job.torch_version is not None and job.torch_version < FR_RENAMED_IN
    out = {}
    for new_name, old_name, value in (*NCCL_FLIGHT_RECORDER, (*NCCL_TRACE_PREFIX_ENVS, trace)):
        if new_name not in job.base and old_name not in job.base:
            out[old_name if old else new_name] = value
    return out


def worker_env(job: JobEnv, cyc: CycleEnv, local_rank: int) -> dict[str, str]:
    """The complete environment of local rank ``local_rank`` in cycle ``cyc``."""
    return {**job.base, **launcher_vars(job, cyc, local_rank)}


# The variables that say who a worker is in one cycle (torchrun's, the cycle's files):
# a standby is started without them and given them when it becomes a cycle's worker. Any
# other variable that differs means it was built for another job: it is not used.
CYCLE_VARS = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "GROUP_WORLD_SIZE",
        "ROLE_RANK",
        "ROLE_WORLD_SIZE",
        "ROLE_NAME",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_USE_AGENT_STORE",
        "TORCHELASTIC_ERROR_FILE",
        "SLURM_FT_CYCLE",
        "SLURM_FT_CYCLE_INFO",
        worker.MONITOR_ENV,
        STACK_FILE_ENV,
        *NCCL_TRACE_PREFIX_ENVS,
    }
)


def without_cycle_vars(env: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in env.items() if key not in CYCLE_VARS}


def standby_env(job: JobEnv, nproc_per_node: int, local_rank: int) -> dict[str, str]:
    """The environment a standby for local rank ``local_rank`` starts with: a worker's,
    less :data:`CYCLE_VARS` (whatever node rank and cycle it will serve; the job's
    interpreter settings, ``PYTHONPATH`` with the injected ``sitecustomize`` included)."""
    unplaced = CycleEnv(Topology(0, 1, nproc_per_node, ""), 0, 0, 0)
    return without_cycle_vars(worker_env(job, unplaced, local_rank))
