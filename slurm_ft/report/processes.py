"""``slurm-ft-report --processes``: each rank's worker pid, and each node's launcher pid,
in the job's newest cycle, from the launchers' process records.

A warm worker's ``/proc/PID/environ`` is the standby's first environment, without
``RANK`` and the cycle's other variables (the kernel keeps the environment a process
started with), so a script that finds ranks by their environment finds none of the warm
ones: this view is the one way that finds them all. The records are the ones the drill
aims with (``drill.targets``); the pids are the nodes' own, each with the start tick that
tells it from a later process given the same pid.
"""

from __future__ import annotations

from slurm_ft.drill.targets import JobShape
from slurm_ft.records import JsonDict


def to_json(shape: JobShape) -> JsonDict:
    nodes = []
    for name in _node_order(shape):
        rec = shape.processes[name]
        nodes.append(
            {
                "node": rec.node,
                "node_rank": rec.node_rank,
                "launcher_pid": rec.launcher_pid,
                "workers": [
                    {"rank": w.rank, "local_rank": w.local_rank, "pid": w.pid, "start_ticks": w.start_ticks}
                    for w in sorted(rec.workers, key=lambda w: w.rank)
                ],
            }
        )
    return {"cycle": shape.cycle, "world_size": shape.world_size, "nodes": nodes}


def lines(shape: JobShape) -> list[str]:
    """One line per rank (``rank local node pid``), rank order; each node's launcher after."""
    rows = [
        (w.rank, w.local_rank, rec.node, w.pid)
        for name in _node_order(shape)
        for rec in (shape.processes[name],)
        for w in rec.workers
    ]
    width = max((len(node) for *_, node, _ in rows), default=4)
    out = [f"cycle {shape.cycle}: {len(rows)} of {shape.world_size} ranks' worker processes"]
    out.append(f"{'rank':>5} {'local':>5}  {'node':<{width}}  pid")
    out += [f"{rank:>5} {local:>5}  {node:<{width}}  {pid}" for rank, local, node, pid in sorted(rows)]
    out += [f"launcher of {name}: pid {shape.processes[name].launcher_pid}" for name in _node_order(shape)]
    return out


def _node_order(shape: JobShape) -> list[str]:
    """Training nodes in node rank order, then the rest (spares) by name."""
    active = [n for n in shape.active_nodes if n in shape.processes]
    return active + sorted(set(shape.processes) - set(active))
