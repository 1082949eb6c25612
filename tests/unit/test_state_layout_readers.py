"""The readers of each node's own files (#45): a torn line costs its record only, a node's
last line of a cycle wins, and a state dir of the layout before (a directory per cycle
that every node wrote into, kept by a job requeued across an upgrade) is still read."""

from __future__ import annotations

import json
import os
from pathlib import Path

from slurm_ft import jsonlines, records
from slurm_ft.drill import targets
from slurm_ft.logs import failure, source
from slurm_ft.records import CycleRecord, Failure, FailureKind, NodeProcesses, NodeSnapshots, WorkerProcess
from slurm_ft.report import load
from slurm_ft.statedir import StateDir


def procs(cycle: int, node: str, k: int, pid: int) -> NodeProcesses:
    return NodeProcesses(cycle, node, k, "7", "u", pid, None, 1.0, [WorkerProcess(k, 0, pid + 1)])


def snaps(cycle: int, node: str, step: int) -> NodeSnapshots:
    resumed = [records.RankResume(0, records.SnapshotSource.MEMORY, step).to_json()]
    return NodeSnapshots(cycle, node, 0, "u", 1.0, resumed, step + 1)


def cycle_record(
    state: StateDir, cycle: int, nodes: list[str], first_failure: Failure | None = None
) -> CycleRecord:
    rec = CycleRecord(
        cycle=cycle, attempt=0, restart=cycle, run_id="r", run_uuid="u", start_time=1.0, nodes=nodes,
        world_size=len(nodes), nproc_per_node=1, master_addr=nodes[0], master_port=1,
    )  # fmt: skip
    rec.first_failure = first_failure.to_json() if first_failure else None
    records.write(state.cycle_record(cycle), rec)
    return rec


def test_json_lines_skip_a_torn_line_and_keep_the_rest() -> None:
    raw = b'{"cycle": 0}\n{"cycle": 1, "no\n\n[1, 2]\n{"cycle": 2}\n'
    assert jsonlines.parse(raw) == ([{"cycle": 0}, {"cycle": 2}], 2)
    assert jsonlines.read(Path("/nonexistent/processes.jsonl")) == []


def test_the_report_reads_each_nodes_file_names_a_torn_line_and_keeps_a_nodes_last_word(
    tmp_path: Path,
) -> None:
    state = StateDir(tmp_path)
    for c in range(3):
        jsonlines.add(state.node_snapshots("a"), snaps(c, "a", 10 * c).to_json())
    jsonlines.add(state.node_snapshots("a"), snaps(2, "a", 99).to_json())  # cycle 2 again: the last wins
    jsonlines.add(state.node_snapshots("b"), snaps(0, "b", 0).to_json())
    with open(state.node_snapshots("b"), "ab") as fh:
        fh.write(b'{"cycle": 1, "node": "b", "resu')  # a crash mid-line
    got = load.load(state)
    assert [(s.cycle, s.node, s.newest_step) for s in got.snapshots] == [
        (0, "a", 1), (0, "b", 1), (1, "a", 11), (2, "a", 100),
    ]  # fmt: skip
    assert got.unreadable == [
        load.Unreadable(str(state.node_snapshots("b")), "1 line(s) are not records: skipped")
    ]


def test_the_report_still_reads_snapshot_records_of_the_layout_before(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    old = state.snapshots_dir / "cycle0" / "a.json"
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps(snaps(0, "a", 5).to_json()))
    jsonlines.add(state.node_snapshots("a"), snaps(1, "a", 7).to_json())
    got = load.load(state)
    assert [(s.cycle, s.node, s.newest_step) for s in got.snapshots] == [(0, "a", 6), (1, "a", 8)]
    assert got.unreadable == []


def test_the_drill_takes_each_nodes_newest_cycle_and_else_the_layout_before(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    for c in (0, 1):
        cycle_record(state, c, ["a", "b"])
        for k, node in enumerate("ab"):
            jsonlines.add(state.node_processes(node), procs(c, node, k, 100 * (c + 1) + 10 * k).to_json())
    (state.node_processes("b")).open("ab").write(b"not json\n")
    assert {
        c: sorted((n, p.launcher_pid) for n, p in targets.recorded_processes(state, c).items())
        for c in (0, 1)
    } == {
        0: [("a", 100), ("b", 110)],
        1: [("a", 200), ("b", 210)],
    }
    jsonlines.add(state.node_processes("a"), procs(1, "a", 0, 299).to_json())  # cycle 1 again: the last wins
    assert targets.recorded_processes(state, 1)["a"].launcher_pid == 299
    assert targets.recorded_processes(state, 2) == {}
    shape = targets.newest_shape(state)
    assert shape is not None and shape.cycle == 1

    before = StateDir(tmp_path / "before")  # processes/cycle<N>/<node>.json
    cycle_record(before, 4, ["a"])
    old = before.legacy_processes_dir(4) / "a.json"
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps(procs(4, "a", 0, 400).to_json()))
    shape = targets.newest_shape(before)
    assert shape is not None and (shape.cycle, shape.processes["a"].launcher_pid) == (4, 400)


def test_logs_failure_finds_stacks_in_the_ranks_node_directory_or_the_layout_before(tmp_path: Path) -> None:
    hang = Failure(
        kind=FailureKind.HANG, node="a", node_rank=0, time=1.0, detail="silence", hung_ranks=[0, 1]
    )
    state = StateDir(tmp_path)
    rec = cycle_record(state, 3, ["a", "b"], hang)
    state.node_dir("b").mkdir(parents=True)
    state.stacks_file("b", 3, 1).write_text("in train_step\n")  # rank 1 is on node b
    old = state.legacy_stacks_file(3, 0)  # rank 0's, as a launcher before #45 kept it
    old.parent.mkdir(parents=True)
    old.write_text("in all_reduce\n")
    view = failure.explain(source.logs_of(state, rec), [3])
    assert sorted((g.ranks, g.text) for g in view.stacks) == [
        ((0,), "in all_reduce"),
        ((1,), "in train_step"),
    ]
    assert view.stacks_missing == []
    assert sorted(p for p, _ in view.files) == sorted([str(old), str(state.stacks_file("b", 3, 1))])
    assert not os.path.exists(state.stacks_file("a", 3, 0))
