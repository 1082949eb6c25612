"""The launcher's validated, frozen inputs, built once by ``cli/launch.py``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from slurm_ft.config import Settings
from slurm_ft.jobpointer import Pointer
from slurm_ft.launch.rendezvous.jobsecret import StoreAuth
from slurm_ft.launch.workers.env import JobEnv, SnapshotEnv
from slurm_ft.launch.workers.layout import Entry, Topology
from slurm_ft.slurm import SlurmJob
from slurm_ft.statedir import StateDir

if TYPE_CHECKING:
    from slurm_ft.topology.plan import Plan


class BadInput(Exception):
    """Input found wrong only once the launcher started (a corrupt ledger): exit 2."""


@dataclass(frozen=True)
class AgentConfig:
    """Everything a launcher is given, read and validated once in ``cli/launch``."""

    job: SlurmJob
    settings: Settings
    entry: Entry
    topo: Topology
    state: StateDir
    rdzv_ports: tuple[int, ...]  # node 0's store: the first free one; () on a single node
    base_env: Mapping[str, str]
    python: str
    cwd: str
    health_checks: bool  # run the health checks before each join
    run_id: str
    signals: tuple[int, ...]
    spawn_helper: tuple[str, ...] = ()  # workers.pdeathsig_helper()
    placement: Plan | None = None  # CPU/NUMA binding and NIC of each local rank, when asked
    torch_version: tuple[int, int] | None = None  # the workers' torch, from its metadata
    # Where node 0 leaves the pointer from the job id to the state dir (``jobpointer``),
    # and the pointer; None: no job id or no home.
    pointers_dir: Path | None = None
    pointer: Pointer | None = None
    # argv that SIGKILLs this job step everywhere (scancel), for node 0 to end a step
    # whose lost launcher would otherwise hold the allocation; () outside a Slurm step.
    step_killer: tuple[str, ...] = ()
    auth: StoreAuth = field(default_factory=StoreAuth)  # the job secret, if any
    # The launcher (hostlist index) that hosts the store: node 0 until it is lost and a
    # successor leads (``launch.succession.rule``).
    store_host: int = 0
    # The node's snapshot area, made at the launcher's start (None: snapshots off or not yet made).
    snapshots: SnapshotEnv | None = None

    @property
    def is_node0(self) -> bool:
        """This launcher hosts the store and coordinates the job (node 0's role, which a
        successor takes over)."""
        return self.job.node_rank == self.store_host

    @property
    def num_nodes(self) -> int:
        return self.job.num_nodes

    def job_env(self, run_dir: str) -> JobEnv:
        """The inputs of every worker environment of this launcher (``run_dir``: its
        private run dir, made at start; the dry run names a placeholder)."""
        return JobEnv(
            base=self.base_env,
            run_id=self.run_id,
            max_restarts=self.settings.launch.max_restarts,
            forwarded=self.signals,
            python=self.entry.kind != "command",
            state=self.state,
            run_dir=run_dir,
            node_name=self.job.node_name,
            placement=self.placement,
            torch_version=self.torch_version,
            snapshots=self.snapshots,
        )


def run_id_for(job: SlurmJob) -> str:
    return f"{job.job_key}-a{job.attempt}"
