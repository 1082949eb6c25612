"""Where and when a launcher writes its state-dir files: cycle records, the job outcome,
unhealthy-node records.

The formats live in ``records``. This module owns what each record says
(:class:`RecordForms`) and the timing rules around them (:class:`Bookkeeper`), and receives
everything it writes as immutable values (a :class:`RunSummary`, a decision, a result):
what a record says never depends on when the loop happened to update a field. Node 0
writes the job's records. A peer writes its own copies only when its state dir is not
shared with node 0 (it finds no record of this run there), so a shared dir never ends up
with a peer's partial view. Files that are not on a restart's critical path are deferred
until the next cycle's workers run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from slurm_ft import jobpointer, procident, records
from slurm_ft.launch import policy
from slurm_ft.launch.books.stateio import StateIO
from slurm_ft.launch.context import AgentConfig
from slurm_ft.launch.output.applog import cycle_log_path
from slurm_ft.launch.policy import Ending
from slurm_ft.launch.rendezvous.protocol import CycleResult, Decision
from slurm_ft.launch.workers.layout import Topology
from slurm_ft.launch.workers.survivors import Survivor
from slurm_ft.records import Failure, JsonDict
from slurm_ft.slurm import SlurmJob
from slurm_ft.statedir import StateDir

Record = (
    records.CycleRecord
    | records.OutcomeRecord
    | records.NodeProcesses
    | records.NodeSnapshots
    | records.SnapshotsPersisted
)


@dataclass(frozen=True)
class RunSummary:
    """What this launcher knows of the run at one moment; the records report it."""

    first_cycle: int = 0
    run_uuid: str = ""
    cycles_run: int = 0
    last_cycle: int | None = None
    last_failure: Failure | None = None
    nodes: tuple[str, ...] = ()
    lost_nodes: tuple[str, ...] = ()  # with spares: lost launchers, spares included
    suspect_nodes: tuple[str, ...] = ()
    failure_seen: Failure | None = None  # the last failure, kept after a success (metrics)
    log_lost: tuple[int, int] = (0, 0)  # lines, bytes the cycle logs could not take
    store_values_ignored: tuple[str, ...] = ()  # the store keys whose values were ignored (sealer)
    successions: tuple[str, ...] = ()  # the store moved: one line each (launch.succession.rule)
    unfenced: tuple[str, ...] = ()  # processes of a lost store host that could not be killed
    snapshots_persisted: tuple[str, ...] = ()  # this node's persist on the way out: one line per rank
    snapshots_not_persisted: tuple[str, ...] = ()  # ... and what it could not persist

    def started(self, cycle: int) -> RunSummary:
        return dataclasses.replace(self, cycles_run=self.cycles_run + 1, last_cycle=cycle)

    def closed(
        self, failure: Failure | None, *, succeeded: bool, log_lost: tuple[int, int] = (0, 0)
    ) -> RunSummary:
        """After a cycle: its failure is the last one (a success clears the last one), and
        what its cycle log could not take is counted."""
        last = failure if failure is not None else None if succeeded else self.last_failure
        return dataclasses.replace(
            self,
            last_failure=last,
            failure_seen=failure or self.failure_seen,
            log_lost=(self.log_lost[0] + log_lost[0], self.log_lost[1] + log_lost[1]),
        )


class RecordForms:
    """The launcher's facts every record repeats (its job, run id, topology, clock, where
    the cycle logs go), and what each record says, made from immutable values. (A plain
    class: it is behaviour, and a dataclass costs the launcher's start its generated code.)"""

    def __init__(
        self,
        job: SlurmJob,
        run_id: str,
        topo: Topology,
        clock: Callable[[], float],
        applog_prefix: str | None = None,
        applog_per_node: bool = False,
    ) -> None:
        self.job, self.run_id, self.topo, self.clock = job, run_id, topo, clock
        self.applog_prefix, self.applog_per_node = applog_prefix, applog_per_node

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


def stuck_detail(stuck: list[Survivor]) -> str:
    """Processes that outlived SIGKILL hold this node's GPUs and files: it is unhealthy
    from now on (its next join says so, and node 0 stops the job with 94 naming it)."""
    what = "; ".join(s.describe() for s in stuck)
    return f"stuck: {len(stuck)} worker process(es) survived SIGKILL: {what}"


class Bookkeeper:
    """One launcher's records: which it writes, when, and through which bounded access."""

    def __init__(self, state: StateDir, forms: RecordForms) -> None:
        self.state = state
        self.job = job = forms.job
        self.clock = forms.clock
        self.forms = forms
        self.is_node0 = job.node_rank == 0
        self.private_records: bool | None = None  # peers: the state dir is not shared with node 0
        self.deferred: list[Callable[[], None]] = []
        # Every state-dir file operation (bounded off local disks; the agent sets its
        # timeout and where it reports a stall).
        self.io = StateIO(state.path, job.node_name)

    @classmethod
    def for_launcher(
        cls,
        cfg: AgentConfig,
        clock: Callable[[], float],
        on_event: Callable[[str], None],
        interrupted: Callable[[], bool],
    ) -> Bookkeeper:
        """The books of the launcher that ``cfg`` describes: state-dir access bounded by
        ``launch.write_timeout``, a stall reported through ``on_event``, waits cut short
        once ``interrupted`` (a signal arrived)."""
        applog = cfg.settings.applog
        forms = RecordForms(cfg.job, cfg.run_id, cfg.topo, clock, applog.prefix, applog.per_node)
        books = cls(cfg.state, forms)
        books.io = StateIO(
            cfg.state.path, cfg.job.node_name, timeout=cfg.settings.launch.write_timeout, on_event=on_event
        )
        books.io.interrupted = interrupted
        return books

    def leave_pointer(self, cfg: AgentConfig, on_event: Callable[[str], None]) -> None:
        """Node 0: the pointer from the job id to the state dir in the owner's home
        (``jobpointer``), bounded like a state-dir write (a home on a dead mount is no
        reason to stop), and the oldest pointers beyond ``jobpointer.KEEP`` removed."""
        directory, pointer = cfg.pointers_dir, cfg.pointer
        if directory is None or pointer is None:
            return
        io = StateIO(
            directory, self.job.node_name, timeout=cfg.settings.launch.write_timeout, on_event=on_event
        )
        try:
            io.mkdirs(directory)
            io.write_bytes(jobpointer.pointer_file(directory, pointer.job_key), pointer.encode())
            for name in jobpointer.stale(io.list_names(directory) or []):
                io.unlink(directory / name)
        except OSError as exc:
            on_event(f"no pointer to the state dir left in {directory}: {exc.strerror or exc}")
        finally:
            io.close(1.0)

    def _write(self, path: Path, record: Record) -> None:
        self.io.write_json(path, record.to_json())

    # ------------------------------------------------------------------ deferred writes

    def defer(self, write: Callable[[], None]) -> None:
        self.deferred.append(write)

    def flush(self) -> None:
        """Write the bookkeeping files that were kept off the restart's critical path."""
        while self.deferred:
            self.deferred.pop(0)()

    # ------------------------------------------------------------------ records

    def write_outcome(self, run: RunSummary, ending: Ending) -> None:
        """Node 0 always; a peer only into a state dir of its own (see module doc). Each
        attempt's outcome is also kept under ``outcomes/`` (the templates remove
        ``outcome.json`` before the next attempt; ``slurm-ft-report`` reads them all)."""
        if not self.is_node0 and (
            self.io.written_by(self.state.outcome, run.run_uuid) or self.private_records is False
        ):
            return
        with contextlib.suppress(OSError) if not self.is_node0 else contextlib.nullcontext():
            self._write_outcome(run, ending)

    def node0_lost(self, run: RunSummary, ending: Ending, budget: float) -> None:
        """A peer whose node 0 froze: node 0 writes nothing any more, so the peer writes the
        attempt's outcome (``ending`` names node 0 in ``lost_nodes``: the report and the
        template's exclusions then name it), unless node 0 wrote one for this run. Several
        peers may: each writes the same thing, atomically. Waits at most ``budget``."""
        if self.io.written_by(self.state.outcome, run.run_uuid):
            return
        with contextlib.suppress(OSError):
            self._write_outcome(run, ending)
            self.io.settle(budget)

    def _write_outcome(self, run: RunSummary, ending: Ending) -> None:
        """The attempt's outcome, and its copy under ``outcomes/``. Raises OSError."""
        rec = self.forms.outcome(run, ending)
        self._write(self.state.outcome, rec)
        self._write(self.state.attempt_outcome(self.job.attempt, run.run_uuid), rec)

    def settle(self, run: RunSummary, ending: Ending, budget: float) -> tuple[Ending, str | None]:
        """The outcome record, then what was kept while the state dir did not answer, waiting
        at most ``budget``; else the ending says so (README: a file system that stops
        answering): 94 naming this node and the path, unless training finished (0) or a
        signal ends the attempt (128+N). The ending, and why not (None: all written)."""
        with contextlib.suppress(OSError):
            self.write_outcome(run, ending)
        if self.io.settle(budget):
            return ending, None
        problem = self.io.problem() or (
            f"state dir {self.io.root} on {self.job.node_name} did not take the records within {budget:.0f} s"
        )
        return policy.state_dir_stalled(ending, problem, self.job.node_name), problem

    # ------------------------------------------------------------------ cycle records

    def open_cycle(self, run: RunSummary, i: int, cycle: int, d: Decision) -> None:
        """Node 0 before workers start (they read it through SLURM_FT_CYCLE_INFO); a peer
        only when its state dir is its own."""
        path = self.state.cycle_record(cycle)
        if not self.is_node0:
            if self.private_records is None:
                self.private_records = not self.io.written_by(path, run.run_uuid)
            if not self.private_records:
                return
        self._write(path, self.forms.cycle_record(run, i, cycle, d))

    def shares_state(self, run_uuid: str, cycle: int) -> bool:
        """Whether this launcher's state dir is the store host's: its record of ``cycle`` of
        this run is there (a store succession needs one state dir for all)."""
        if self.is_node0:
            return True
        if self.private_records is None:
            self.private_records = not self.io.written_by(self.state.cycle_record(cycle), run_uuid)
        return not self.private_records

    def close_cycle(
        self, run: RunSummary, i: int, cycle: int, d: Decision, result: CycleResult, *, later: bool
    ) -> None:
        rec = self.forms.cycle_record(run, i, cycle, d)
        rec.outcome, rec.end_time, rec.first_failure = result.outcome, result.end_time, result.first_failure
        path = self.state.cycle_record(cycle)
        if later:
            self.defer(lambda: self._write(path, rec))
        else:
            self._write(path, rec)

    def peer_close(self, cycle: int, result_of: Callable[[], CycleResult | None]) -> None:
        """``result_of`` asks the store for node 0's result; only called when needed."""
        if not self.private_records:
            return
        result = result_of()
        doc = self.io.read_json(self.state.cycle_record(cycle))
        if result is None or doc is None:
            return
        rec = records.CycleRecord.from_json(doc)
        rec.outcome, rec.end_time, rec.first_failure = result.outcome, result.end_time, result.first_failure
        self._write(self.state.cycle_record(cycle), rec)

    # ------------------------------------------------------------------ processes

    def node_processes(self, run: RunSummary, cycle: int, workers: list[tuple[int, int, int]]) -> None:
        """This node's launcher and workers ((rank, local rank, pid); none on a spare) in ``cycle``,
        for ``slurm-ft-drill``. Every node writes its own file; a state dir that cannot
        take it costs the drill its targets, never the job its cycle."""
        rec = records.NodeProcesses(
            cycle=cycle,
            node=self.job.node_name,
            node_rank=self.job.node_rank,
            job_id=self.job.job_id,
            run_uuid=run.run_uuid,
            launcher_pid=os.getpid(),
            launcher_start_ticks=procident.start_ticks(os.getpid()),
            time=self.clock(),
            workers=[
                records.WorkerProcess(rank, local, pid, procident.start_ticks(pid))
                for rank, local, pid in sorted(workers)
            ],
        )
        with contextlib.suppress(OSError):
            self._write(self.state.node_processes(cycle, self.job.node_name), rec)

    def node_snapshots(self, rec: records.NodeSnapshots) -> None:
        """Where this node's ranks resumed from in a cycle (every node writes its own file;
        a state dir that cannot take it costs the report a line, never the job a cycle)."""
        with contextlib.suppress(OSError):
            self._write(self.state.node_snapshots(rec.cycle, rec.node), rec)

    def snapshots_persisted(self, rec: records.SnapshotsPersisted) -> None:
        with contextlib.suppress(OSError):
            self._write(self.state.snapshots_persisted(rec.attempt, rec.node), rec)

    # ------------------------------------------------------------------ unhealthy nodes

    def own_unhealthy(self, detail: str, report: JsonDict) -> None:
        self.io.write_json(
            self.state.unhealthy_record(self.job.node_name),
            {"node": self.job.node_name, "reason": detail, "time": self.clock(), "report": report},
        )

    def stuck_workers(self, cycle: int, stuck: list[Survivor]) -> str:
        """This node recorded unhealthy for workers that outlived SIGKILL (best effort);
        returns the detail its joins give from now on (see :func:`stuck_detail`)."""
        detail = stuck_detail(stuck)
        with contextlib.suppress(OSError):
            self.own_unhealthy(detail, {"cycle": cycle, "stuck": [s.to_json() for s in stuck]})
        return detail

    def peers_unhealthy(self, pairs: list[tuple[str, str]], now: float) -> None:
        """Node 0 records the nodes that reported themselves unhealthy, on their behalf: a
        node whose own state dir failed it leaves no record. One that wrote its own record
        of the same finding keeps it (it holds the whole health report)."""
        for node, detail in pairs:
            if node == self.job.node_name:
                continue
            path = self.state.unhealthy_record(node)
            own = self.io.read_json(path)
            if own is not None and own.get("reason") == detail and "reported_by" not in own:
                continue
            self.io.write_json(
                path, {"node": node, "reason": detail, "time": now, "reported_by": self.job.node_name}
            )
