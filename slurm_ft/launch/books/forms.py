"""What each of the launcher's records says, built from immutable values (the run's
summary, a decision, an ending): the record of a cycle, the files its output went to, the
attempt's outcome. When and where they are written is ``bookkeeper``'s; their formats are
``slurm_ft.records``'s."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from slurm_ft import records
from slurm_ft.launch.books.summary import RunSummary
from slurm_ft.launch.output.applog import cycle_log_path
from slurm_ft.launch.policy import Ending
from slurm_ft.launch.rendezvous.protocol import Decision
from slurm_ft.launch.workers.layout import Topology
from slurm_ft.slurm import SlurmJob


@dataclass(frozen=True)
class RecordForms:
    """The launcher's facts every record repeats (its job, run id, topology, clock, where
    the cycle logs go), and the records made from them."""

    job: SlurmJob
    run_id: str
    topo: Topology
    clock: Callable[[], float]
    applog_prefix: str | None = None
    applog_per_node: bool = False

    def cycle_record(self, run: RunSummary, i: int, cycle: int, d: Decision) -> records.CycleRecord:
        names = list(d.nodes)
        active = [names[k] for k in d.active if k < len(names)]
        spare = [names[k] for k in d.spares if k < len(names)]
        return records.CycleRecord(
            cycle=cycle,
            attempt=self.job.attempt,
            restart=i,
            run_id=self.run_id,
            run_uuid=run.run_uuid,
            start_time=d.start_time,
            nodes=list(d.nodes),
            world_size=self.topo.world_size,
            nproc_per_node=self.topo.nproc_per_node,
            master_addr=d.master_addr or self.topo.master_addr,
            master_port=d.master_port,
            active_nodes=active,
            spare_nodes=spare,
            replacements=list(d.replacements),
            log_files=[f.to_json() for f in self.log_files(cycle, d)],
        )

    def log_files(self, cycle: int, d: Decision) -> list[records.LogFile]:
        """The files the cycle's launchers write its output to (the same naming rule as
        ``CycleWorkers``: ``.node<K>`` with the launcher's index K in the node list)."""
        if not self.applog_prefix:
            return []
        if not self.applog_per_node:
            return [records.LogFile(str(cycle_log_path(self.applog_prefix, cycle)))]
        names = list(d.nodes) or [self.job.node_name]
        working = d.active or tuple(range(len(names)))
        return [
            records.LogFile(str(cycle_log_path(self.applog_prefix, cycle, k)), names[k], k)
            for k in working
            if k < len(names)
        ]

    def outcome(self, run: RunSummary, ending: Ending) -> records.OutcomeRecord:
        failure = run.last_failure
        return records.OutcomeRecord(
            exit_code=ending.exit_code,
            outcome=ending.outcome,
            reason=ending.reason,
            first_failure=failure.to_json() if failure else None,
            cycles=run.cycles_run,
            first_cycle=run.first_cycle if run.cycles_run else None,
            last_cycle=run.last_cycle,
            attempt=self.job.attempt,
            job_id=self.job.job_id,
            run_id=self.run_id,
            run_uuid=run.run_uuid,
            unhealthy_nodes=list(ending.unhealthy_nodes),
            nodes=list(ending.nodes if ending.nodes else run.nodes),
            lost_nodes=list(ending.lost_nodes or run.lost_nodes),
            suspect_nodes=list(ending.suspect_nodes or run.suspect_nodes),
            store_values_ignored=list(run.store_values_ignored),
            store_successions=list(run.successions),
            unfenced=list(run.unfenced),
            snapshots_persisted=list(run.snapshots_persisted),
            snapshots_not_persisted=list(run.snapshots_not_persisted),
            time=self.clock(),
        )
