"""Where and when a launcher writes its state-dir files: cycle records, the job outcome,
unhealthy-node records.

The formats live in ``records``; this module owns the timing rules around them. Node 0
writes the job's records. A peer writes its own copies only when its state dir is not
shared with node 0 (it finds no record of this run there), so a shared dir never ends up
with a peer's partial view. Files that are not on a restart's critical path are deferred
until the next cycle's workers run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slurm_ft import atomicfile
from slurm_ft.launch import records
from slurm_ft.launch import rendezvous as rdzv
from slurm_ft.launch.records import Failure
from slurm_ft.launch.workers import Topology
from slurm_ft.slurm import SlurmJob
from slurm_ft.statedir import StateDir


@dataclass
class RunState:
    """What this launcher knows of the run so far; the records report it."""

    first_cycle: int = 0
    run_uuid: str = ""
    cycles_run: int = 0
    last_failure: Failure | None = None
    nodes: list[str] = field(default_factory=list)
    last_cycle: int | None = None
    unhealthy_nodes: list[str] = field(default_factory=list)


class Bookkeeper:
    def __init__(
        self,
        state: StateDir,
        job: SlurmJob,
        run_id: str,
        topo: Topology,
        run: RunState,
        clock: Callable[[], float],
    ) -> None:
        self.state = state
        self.job = job
        self.run_id = run_id
        self.topo = topo
        self.run = run
        self.clock = clock
        self.is_node0 = job.node_rank == 0
        self.private_records: bool | None = None  # peers: the state dir is not shared with node 0
        self.deferred: list[Callable[[], None]] = []

    # ------------------------------------------------------------------ deferred writes

    def defer(self, write: Callable[[], None]) -> None:
        self.deferred.append(write)

    def flush(self) -> None:
        """Write the bookkeeping files that were kept off the restart's critical path."""
        while self.deferred:
            self.deferred.pop(0)()

    # ------------------------------------------------------------------ records

    def cycle_record(self, i: int, cycle: int, d: rdzv.Decision) -> records.CycleRecord:
        return records.CycleRecord(
            cycle=cycle,
            attempt=self.job.attempt,
            restart=i,
            run_id=self.run_id,
            run_uuid=self.run.run_uuid,
            start_time=d.start_time,
            nodes=list(d.nodes),
            world_size=self.topo.world_size,
            nproc_per_node=self.topo.nproc_per_node,
            master_addr=self.topo.master_addr,
            master_port=d.master_port,
        )

    def outcome(self, code: int, reason: str, d: rdzv.Decision | None = None) -> records.OutcomeRecord:
        st = self.run
        failure = st.last_failure
        return records.make_outcome(
            code,
            reason,
            first_failure=failure.to_json() if failure else None,
            cycles=st.cycles_run,
            first_cycle=st.first_cycle if st.cycles_run else None,
            last_cycle=st.last_cycle,
            attempt=self.job.attempt,
            job_id=self.job.job_id,
            run_id=self.run_id,
            run_uuid=st.run_uuid,
            unhealthy_nodes=list(d.unhealthy_nodes) if d else list(st.unhealthy_nodes),
            nodes=list(d.nodes) if d and d.nodes else list(st.nodes),
            time=self.clock(),
        )

    # ------------------------------------------------------------------ node 0

    def open_cycle(self, i: int, cycle: int, d: rdzv.Decision) -> None:
        records.write(self.state.cycle_record(cycle), self.cycle_record(i, cycle, d))

    def close_cycle(
        self, i: int, cycle: int, d: rdzv.Decision, result: rdzv.CycleResult, *, later: bool
    ) -> None:
        rec = self.cycle_record(i, cycle, d)
        rec.outcome, rec.end_time, rec.first_failure = result.outcome, result.end_time, result.first_failure
        path = self.state.cycle_record(cycle)
        if later:
            self.defer(lambda: records.write(path, rec))
        else:
            records.write(path, rec)

    def write_outcome(self, code: int, reason: str, d: rdzv.Decision | None = None) -> None:
        records.write(self.state.outcome, self.outcome(code, reason, d))

    def own_unhealthy(self, detail: str, report: dict[str, Any]) -> None:
        atomicfile.write_json(
            self.state.unhealthy_record(self.job.node_name),
            {"node": self.job.node_name, "reason": detail, "time": self.clock(), "report": report},
        )

    def peers_unhealthy(self, pairs: list[tuple[str, str]], now: float) -> None:
        """Node 0 records the nodes that reported themselves unhealthy, on their behalf."""
        for node, detail in pairs:
            if node != self.job.node_name:
                atomicfile.write_json(
                    self.state.unhealthy_record(node),
                    {"node": node, "reason": detail, "time": now, "reported_by": self.job.node_name},
                )

    # ------------------------------------------------------------------ peers

    def peer_open(self, i: int, cycle: int, d: rdzv.Decision) -> None:
        path = self.state.cycle_record(cycle)
        if self.private_records is None:
            self.private_records = not records.written_by(path, self.run.run_uuid)
        if self.private_records:
            records.write(path, self.cycle_record(i, cycle, d))

    def peer_close(self, cycle: int, result_of: Callable[[], rdzv.CycleResult | None]) -> None:
        """``result_of`` asks the store for node 0's result; only called when needed."""
        if not self.private_records:
            return
        result = result_of()
        doc = records.read_json(self.state.cycle_record(cycle))
        if result is None or doc is None:
            return
        rec = records.CycleRecord.from_json(doc)
        rec.outcome, rec.end_time, rec.first_failure = result.outcome, result.end_time, result.first_failure
        records.write(self.state.cycle_record(cycle), rec)

    def peer_outcome(self, code: int, reason: str, d: rdzv.Decision | None) -> None:
        if self.is_node0:
            return
        if records.written_by(self.state.outcome, self.run.run_uuid):
            return
        if self.private_records is False:
            return
        with contextlib.suppress(OSError):
            records.write(self.state.outcome, self.outcome(code, reason, d))
