"""Which processes a fault hits, found from the launchers' own records.

The drill never looks processes up by name: it reads each node's
``nodes/<node>/processes.jsonl`` (``records.NodeProcesses``, a line per cycle; a state dir
of the layout before #45: ``processes/cycle<N>/<node>.json``) and the newest cycle's record
for the job's shape. Everything here is pure once the records are read; the checks on the pids
themselves (still the recorded process, still in this job) happen where the signal is sent.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from slurm_ft import records
from slurm_ft.drill.faults import SPECS, Fault, Target
from slurm_ft.records import CycleRecord, NodeProcesses
from slurm_ft.statedir import StateDir


class TargetError(ValueError):
    """The fault cannot be aimed where it was asked to go; the message says why."""


@dataclass(frozen=True)
class Shot:
    """One process to signal: ``group`` sends to its process group (a worker leads its own,
    so its children, data loaders included, go with it)."""

    pid: int
    start_ticks: int | None
    group: bool = False


@dataclass(frozen=True)
class Aim:
    node: str | None  # None: the batch script (the Slurm controller finds it)
    node_rank: int | None
    rank: int | None
    cycle: int | None
    shots: tuple[Shot, ...]


@dataclass(frozen=True)
class JobShape:
    """The newest cycle of the job: who trains (node rank order), its ranks, its processes."""

    cycle: int
    world_size: int
    active_nodes: tuple[str, ...]
    processes: dict[str, NodeProcesses]

    @property
    def num_nodes(self) -> int:
        return len(self.active_nodes)


def _read(path: Path) -> records.JsonDict | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def newest_shape(state: StateDir) -> JobShape | None:
    """The newest cycle that has both a record and process records; None when there is none."""
    lines = _node_lines(state)
    for cycle in reversed(state.recorded_cycles()):
        doc = _read(state.cycle_record(cycle))
        if doc is None:
            continue
        try:
            rec = CycleRecord.from_json(doc)
        except (TypeError, ValueError):
            continue
        procs = _of_cycle(lines, cycle) or _legacy_processes(state, cycle)
        if procs:
            active = tuple(rec.active_nodes or rec.nodes)
            return JobShape(cycle, rec.world_size, active, procs)
    return None


def recorded_processes(state: StateDir, cycle: int) -> dict[str, NodeProcesses]:
    """Each node's process record of ``cycle`` (its last line of the cycle)."""
    return _of_cycle(_node_lines(state), cycle)


def _node_lines(state: StateDir) -> dict[str, list[bytes]]:
    """Each node's ``processes.jsonl``, as lines not yet parsed: only the lines of the
    cycle asked for are, from the end (a job of 4,096 nodes and 100 cycles has 409,600)."""
    try:
        nodes = sorted(os.listdir(state.nodes_dir))
    except OSError:
        return {}
    out = {}
    for node in nodes:
        try:
            out[node] = state.node_processes(node).read_bytes().splitlines()
        except OSError:
            continue
    return out


def _of_cycle(lines: dict[str, list[bytes]], cycle: int) -> dict[str, NodeProcesses]:
    """A node appends a line per cycle in the cycles' order, so the look from its end stops
    at the first line of an earlier cycle."""
    out = {}
    for node, mine in lines.items():
        for line in reversed(mine):
            try:
                doc = json.loads(line)
            except ValueError:
                continue  # a torn line
            found = _processes(doc if isinstance(doc, dict) else None)
            if found is None or found.node != node or found.cycle > cycle:
                continue
            if found.cycle == cycle:
                out[node] = found
            break
    return out


def _legacy_processes(state: StateDir, cycle: int) -> dict[str, NodeProcesses]:
    try:
        paths = sorted(state.legacy_processes_dir(cycle).glob("*.json"))
    except OSError:
        paths = []
    out = {}
    for path in paths:
        found = _processes(_read(path))
        if found is not None:
            out[found.node] = found
    return out


def _processes(doc: records.JsonDict | None) -> NodeProcesses | None:
    if doc is None:
        return None
    try:
        found = NodeProcesses.from_json(doc)
    except (TypeError, ValueError):
        return None
    ok = isinstance(found.cycle, int) and isinstance(found.node, str) and isinstance(found.workers, list)
    return found if ok else None


def check_aim(fault: Fault, shape: JobShape, rank: int | None, node: int | str | None) -> None:
    """Bad input before anything is sent: a rank or node outside the job, or one the fault
    cannot be aimed with."""
    target = SPECS[fault].target
    if rank is not None:
        if target is not Target.RANK:
            raise TargetError(f"{fault.value} is aimed at a node, not a rank (use --node)")
        if not 0 <= rank < shape.world_size:
            raise TargetError(f"rank {rank} is outside the job (ranks 0-{shape.world_size - 1})")
    if node is not None:
        if target is Target.BATCH:
            raise TargetError(f"{fault.value} goes to the batch script; it takes no --node")
        if isinstance(node, int) and not 0 <= node < shape.num_nodes:
            raise TargetError(f"node {node} is outside the job (node ranks 0-{shape.num_nodes - 1})")
        if isinstance(node, str) and node not in shape.processes and node not in shape.active_nodes:
            raise TargetError(f"node {node} is not one of the job's nodes ({', '.join(shape.active_nodes)})")


def _node_name(shape: JobShape, node: int | str) -> str:
    return node if isinstance(node, str) else shape.active_nodes[node]


def aim(fault: Fault, shape: JobShape, rank: int | None, node: int | str | None) -> Aim:
    """The processes ``fault`` hits. Defaults: the job's last rank; the last training node
    (node rank 0 hosts the job's store: losing it ends the attempt, so it is hit only when
    asked for)."""
    check_aim(fault, shape, rank, node)
    spec = SPECS[fault]
    if spec.target is Target.BATCH:
        return Aim(None, None, None, shape.cycle, ())
    if spec.target is Target.RANK:
        want = shape.world_size - 1 if rank is None else rank
        for holder in shape.processes.values():
            for w in holder.workers:
                if w.rank == want:
                    return Aim(
                        holder.node,
                        _rank_of(shape, holder),
                        want,
                        shape.cycle,
                        (Shot(w.pid, w.start_ticks, True),),
                    )
        raise TargetError(f"rank {want} has no recorded process in cycle {shape.cycle} (not started yet?)")
    name = _node_name(shape, shape.num_nodes - 1 if node is None else node)
    procs = shape.processes.get(name)
    if procs is None:
        raise TargetError(f"node {name} has no recorded launcher in cycle {shape.cycle}")
    shots = [Shot(procs.launcher_pid, procs.launcher_start_ticks)]
    if spec.with_workers:
        shots += [Shot(w.pid, w.start_ticks, True) for w in procs.workers]
    return Aim(name, _rank_of(shape, procs), None, shape.cycle, tuple(shots))


def _rank_of(shape: JobShape, procs: NodeProcesses) -> int:
    """The node's place among the training nodes (its launcher's node rank for a spare)."""
    if procs.node in shape.active_nodes:
        return shape.active_nodes.index(procs.node)
    return procs.node_rank
