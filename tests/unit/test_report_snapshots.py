"""The report with snapshots (#43): work resumed from a snapshot is kept work, so the
cycles' kept training, their lost work and the goodput agree with the steps the trainer
really kept; the lost work is split at the newest snapshot the nodes held."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from slurm_ft import records
from slurm_ft.progress.ledger import Ledger
from slurm_ft.records import NodeSnapshots, ProgressReading, RankResume, SnapshotSource
from slurm_ft.report import load
from slurm_ft.report.analysis import analyse
from slurm_ft.report.load import StateFiles
from slurm_ft.statedir import StateDir
from tests.unit.test_report_analysis import RUN_A, T0, cycle, entry, failure, outcome
from tests.unit.test_report_split import drill


def checkpoint(t: float, step: int) -> ProgressReading:
    return ProgressReading(T0 + t, step, f"{step}:step_{step}")


def snap(t: float, step: int) -> ProgressReading:
    return ProgressReading(T0 + t, step, records.SNAPSHOT_MARK)


def node(n: int, name: str, newest: int | None, *resumed: tuple[SnapshotSource, int | None]) -> NodeSnapshots:
    docs = [RankResume(rank, source, step).to_json() for rank, (source, step) in enumerate(resumed)]
    return NodeSnapshots(
        cycle=n, node=name, node_rank=0, run_uuid=RUN_A, time=T0, resumed=docs, newest_step=newest
    )


NOTHING = (SnapshotSource.NONE, None)


def two_ranks(rec: records.CycleRecord) -> records.CycleRecord:
    """A cycle of two nodes of one rank each, as the snapshot records here say."""
    return dataclasses.replace(rec, world_size=2, nproc_per_node=1)


def job(
    resumed_in_1: tuple[SnapshotSource, int | None], held_0: int = 32, ckpt_every: int = 10
) -> StateFiles:
    """One attempt at 1 step/s, a snapshot every step (node 0 reads each), a checkpoint
    every ``ckpt_every`` steps. Cycle 0 (0 -> 40 s) starts up in 5 s (step k at 5 + k s)
    and fails at 38 s, step 32 its last; cycle 1 (41 -> 80 s) resumes from what
    ``resumed_in_1`` says for its second rank (its first resumes from memory at 32),
    starts up in 5 s and succeeds at 80 s."""
    base = 32 if resumed_in_1[0] is not SnapshotSource.NONE else 30
    readings = [snap(5 + k, k) for k in range(1, 33)]
    readings += [checkpoint(5 + k + 0.2, k) for k in range(ckpt_every, 33, ckpt_every)]
    readings += [snap(46 + k - base, k) for k in range(base + 1, base + 35)]
    last = base + 34
    ledger = Ledger(
        cycles=[entry(0, 0, 0, 30, 0, 40), entry(1, 0, 30, last, 41, 80)],
        source="checkpoint-dir:/ckpt",
        seen_source="checkpoint-dir:/ckpt",
    )
    return StateFiles(
        path=Path("/state"),
        cycles=[
            two_ranks(cycle(0, RUN_A, 0, 0, 40, "failed", failure(38))),
            two_ranks(cycle(1, RUN_A, 0, 41, 80, "succeeded")),
        ],
        outcomes=[outcome(RUN_A, 0, 81, 0, "finished")],
        ledger=ledger,
        readings=[r for r in readings if r.mark != records.SNAPSHOT_MARK],
        snapshot_readings=[r for r in readings if r.mark == records.SNAPSHOT_MARK],
        drills=[drill(37.5)],
        snapshots=[
            node(0, "node0", held_0, NOTHING),
            node(0, "node1", held_0, NOTHING),
            node(1, "node0", last, (SnapshotSource.MEMORY, 32)),
            node(1, "node1", last, resumed_in_1),
        ],
    )


def test_work_resumed_from_a_snapshot_is_kept_and_the_goodput_counts_the_steps_kept() -> None:
    r = analyse(job((SnapshotSource.PEER, 32)))
    c0, c1 = r.cycles
    assert c0.split is not None and c1.split is not None
    # kept up to step 32 (37 s), the snapshot cycle 1 resumed from, not the checkpoint of 30 (35 s)
    assert (c0.split.startup_s, c0.split.kept_s, c0.split.lost_s, c0.split.stopping_s) == pytest.approx(
        (5, 32, 1, 2)
    )
    assert c0.split.kept_step == 32
    # cycle 1's start-up is back-dated from step 33, the first past the snapshot it resumed from
    assert (c1.split.startup_s, c1.split.kept_s) == pytest.approx((5, 34))
    t = r.totals
    assert t.progress_s == pytest.approx(66)  # the 66 steps the trainer kept, at 1 s each
    assert t.goodput_ratio == pytest.approx(66 / 81)
    assert t.parts_s == pytest.approx(t.wall_clock_s)
    assert t.lost_work_s == pytest.approx(1) and t.lost_since_snapshot_s == pytest.approx(1)
    assert t.work_lost_iterations == 0
    [f] = r.faults
    assert f.lost_work_s == pytest.approx(0.5)  # step 32 at 37 s -> the fault at 37.5 s
    assert f.lost_since_snapshot_s == pytest.approx(0.5)
    assert [(x.cycle, x.step, x.sources) for x in r.snapshot_restores] == [
        (1, 32, ("memory x1", "peer memory x1"))
    ]


def test_a_cycle_without_a_checkpoint_is_cut_by_the_snapshots_alone() -> None:
    r = analyse(job((SnapshotSource.MEMORY, 32), ckpt_every=100))
    c0 = r.cycles[0]
    assert c0.split is not None
    assert (c0.split.startup_s, c0.split.kept_s, c0.split.lost_s) == pytest.approx((5, 32, 1))
    assert r.totals.goodput_ratio == pytest.approx(66 / 81)


def test_a_rank_that_resumed_from_nothing_keeps_only_the_checkpoint() -> None:
    # the second rank found no snapshot: the trainer went back to its checkpoint of step 30
    r = analyse(job(NOTHING))
    c0 = r.cycles[0]
    assert c0.split is not None
    assert (c0.split.kept_s, c0.split.lost_s) == pytest.approx((30, 3))
    assert c0.split.kept_step == 30
    # every node held step 32: 2 s of the 3 lost were in a snapshot the job did not resume from
    assert r.totals.lost_work_s == pytest.approx(3)
    assert r.totals.lost_since_snapshot_s == pytest.approx(1)
    assert r.totals.progress_s == pytest.approx(30 + 34)


def test_the_loader_reads_node_0s_snapshot_readings(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    records.append_reading(state.snapshot_readings, snap(6, 1))
    records.append_reading(state.snapshot_readings, ProgressReading(T0 + 7, 2))  # marked on load
    state.snapshot_readings.open("a").write('{"time": 1, "st')  # a torn last line
    files = load.load(state)
    assert [(r.step, r.mark) for r in files.snapshot_readings] == [(1, "snapshot"), (2, "snapshot")]
    assert files.readings == []
    assert [u.problem for u in files.unreadable] == ["1 line(s) are not readings: skipped"]


def test_node_0_writes_a_timed_reading_each_time_its_newest_snapshot_changes(tmp_path: Path) -> None:
    from slurm_ft.launch.snapshots import readings
    from tests.support.waiting import wait_until

    steps = iter([None, 3, 3, 3, 4, 4, 9])
    seen: list[int | None] = []

    def newest() -> int | None:
        step = next(steps, 9)
        seen.append(step)
        return step

    path = tmp_path / "progress" / "snapshot-readings.jsonl"
    watch = readings.SnapshotReadings(newest, path, None, iter(range(100, 200)).__next__, period=0.01)
    watch.start()
    try:
        wait_until(lambda: len(seen) >= 8, 30, interval=0.01)
    finally:
        watch.stop()
        watch.join(5)
    got, bad = load.readings_from_text(path.read_text())
    assert bad == 0
    assert [(r.time, r.step, r.mark) for r in got] == [
        (100, 3, "snapshot"),
        (101, 4, "snapshot"),
        (102, 9, "snapshot"),
    ]
    assert readings.watch(None, path, None) is None  # a node without snapshots: no thread


def test_the_logs_reader_leaves_out_what_only_the_accounting_reads(tmp_path: Path) -> None:
    """slurm-ft-logs reads cycles; at 4,096 nodes each cycle of a job with snapshots has
    4,096 snapshot records, which only the report's accounting needs (#45)."""
    state = StateDir(tmp_path)
    records.write(state.node_snapshots(0, "node0"), node(0, "node0", 3, (SnapshotSource.MEMORY, 2)))
    records.append_reading(state.snapshot_readings, snap(6, 1))
    records.append_reading(state.progress_readings, checkpoint(7, 1))
    full = load.load(state)
    assert (len(full.snapshots), len(full.snapshot_readings), len(full.readings)) == (1, 1, 1)
    cycles_only = load.load(state, accounting=False)
    assert (cycles_only.snapshots, cycles_only.snapshot_readings, cycles_only.readings) == ([], [], [])


def test_a_snapshot_of_the_cycle_before_read_late_is_not_the_next_cycles_progress() -> None:
    """Node 0 reads its newest snapshot every 0.5 s: the last step of a failed cycle may be
    read only after the next cycle began. It is not that cycle's first progress (node 0
    held it when the cycle before ended), nor are the steps the next cycle redoes."""
    files = job((SnapshotSource.PEER, 32), held_0=33)
    files.snapshot_readings.append(snap(41.5, 33))  # cycle 0's step 33, read at 41.5 s
    files.snapshot_readings.sort(key=lambda r: r.time)
    _, c1 = analyse(files).cycles
    assert c1.snapshot_floor == 33
    assert c1.split is not None
    assert c1.split.startup_s == pytest.approx(5)  # step 34 at 48 s, back-dated 2 steps


def stand_by_job(learned: float | None) -> StateFiles:
    """#44's run, small: the launcher of node 0 stands by (a suspect) from cycle 1 on, and
    an old launcher read the snapshots on node 0 only: none is read in cycle 1. At 1 step/s
    with a checkpoint every 10 steps. Cycle 0 (0 -> 40 s, step k at 5 + k s) fails at 38 s;
    cycle 1 (41 -> 80 s) resumes from 32, starts up in 5 s (step k at 46 + k - 32 s) and
    fails at 78 s (its last step 63, at 77 s: the fault at 77.5 s); cycle 2 (82 -> 100 s)
    resumes from 63, read again (the launcher of node rank 0 reads), and succeeds."""
    readings = [snap(5 + k, k) for k in range(1, 33)]
    readings += [checkpoint(5 + k + 0.2, k) for k in (10, 20, 30)]
    readings += [checkpoint(46 + k - 32 + 0.2, k) for k in (40, 50, 60)]  # cycle 1: checkpoints only
    readings += [snap(87 + k - 63, k) for k in range(64, 77)]
    entries = [entry(0, 0, 0, 30, 0, 40), entry(1, 0, 30, 60, 41, 80), entry(2, 0, 60, 76, 82, 100)]
    entries[1] = dataclasses.replace(entries[1], startup=learned)
    return StateFiles(
        path=Path("/state"),
        cycles=[
            two_ranks(cycle(0, RUN_A, 0, 0, 40, "failed", failure(38))),
            two_ranks(cycle(1, RUN_A, 0, 41, 80, "failed", failure(78))),
            two_ranks(cycle(2, RUN_A, 0, 82, 100, "succeeded")),
        ],
        outcomes=[outcome(RUN_A, 0, 101, 0, "finished")],
        ledger=Ledger(cycles=entries, source="checkpoint-dir:/ckpt", seen_source="checkpoint-dir:/ckpt"),
        readings=[r for r in readings if r.mark != records.SNAPSHOT_MARK],
        snapshot_readings=[r for r in readings if r.mark == records.SNAPSHOT_MARK],
        drills=[drill(37.5), drill(77.5)],
        snapshots=[
            node(0, "node0", 32, NOTHING),
            node(0, "node1", 32, NOTHING),
            node(1, "node2", 63, (SnapshotSource.PEER, 32)),
            node(1, "node1", 63, (SnapshotSource.MEMORY, 32)),
            node(2, "node2", 76, (SnapshotSource.MEMORY, 63)),
            node(2, "node1", 76, (SnapshotSource.MEMORY, 63)),
        ],
    )


def test_a_cycle_with_only_checkpoints_read_keeps_up_to_the_snapshot_step_at_the_pace() -> None:
    """The lose-node fault at 282 s of #44's replicated run: the report said 23.3 s lost,
    the trainer's step log none. The last checkpoint (step 60, read at 74.2 s) is not when
    step 63, the one the next cycle resumed from, was made: 3 steps later at the pace."""
    r = analyse(stand_by_job(learned=None))
    c1 = r.cycles[1]
    assert c1.split is not None and c1.split.kept_step == 63
    assert c1.split.kept_end - T0 == pytest.approx(77.2, abs=0.05)
    f = r.faults[1]
    assert f.lost_work_s == pytest.approx(0.3, abs=0.05)  # was 77.5 - 74.2 = 3.3 s


def test_a_cycle_in_which_nothing_was_read_keeps_the_steps_the_next_cycle_resumed_from() -> None:
    """The lose-node at 282 s of #44's replicated run charged the whole next cycle (67.8 s)
    as start-up, and counted it as no progress, though every step of it was kept: no
    checkpoint was made in it and no snapshot read. Its start-up ends where the hang
    judge saw the workers settle (the ledger's), its steps (up to the step the next cycle
    resumed from) are kept at the pace."""
    files = stand_by_job(learned=5.0)
    files.readings = [r for r in files.readings if not 41 <= r.time - T0 <= 80]  # no checkpoint either
    assert files.ledger is not None
    files.ledger.cycles[1:] = [
        dataclasses.replace(entry(1, 0, 30, 30, 41, 80), startup=5.0),
        entry(2, 0, 30, 76, 82, 100),
    ]
    r = analyse(files)
    c1 = r.cycles[1]
    assert c1.split is not None
    assert (c1.split.startup_s, c1.split.kept_s, c1.split.lost_s) == pytest.approx((5, 31, 1), abs=0.05)
    first, second = r.faults
    assert first.startup_s == pytest.approx(5)
    assert second.lost_work_s == pytest.approx(0.5, abs=0.05)
    # 32 + 31 + 18 (cycle 2: steps 64 to 76 and its exit) of the 101 s
    assert r.totals.progress_s == pytest.approx(32 + 31 + r.cycles[2].split.kept_s, abs=0.1)
    # without the hang judge's start-up: cut as late as the kept steps allow (start-up an upper bound)
    files.ledger.cycles[1] = dataclasses.replace(files.ledger.cycles[1], startup=None)
    c1 = analyse(files).cycles[1]
    assert c1.split is not None
    assert (c1.split.startup_s, c1.split.kept_s, c1.split.lost_s) == pytest.approx((6, 31, 0), abs=0.05)


def test_only_the_launcher_of_node_rank_0_reads_its_snapshots(tmp_path: Path) -> None:
    from slurm_ft.launch.snapshots import readings

    path = tmp_path / "progress" / "snapshot-readings.jsonl"
    assert readings.for_cycle(1, lambda: 3, path, None) is None
    assert readings.for_cycle(None, lambda: 3, path, None) is None  # a spare
    watch = readings.for_cycle(0, lambda: 3, path, None)
    assert watch is not None
    watch.stop()
    assert not watch.is_alive()  # stopped and waited for: the next reader may be on another host


def test_a_restore_counts_the_ranks_of_a_node_lost_in_the_cycle_as_not_recorded() -> None:
    """A node writes where its ranks resumed from at the cycle's end: one lost during the
    cycle (#44's lose-node) writes nothing. The restore says so, not a world of one rank."""
    files = stand_by_job(learned=None)
    files.snapshots = [s for s in files.snapshots if (s.cycle, s.node) != (1, "node2")]
    restores = {x.cycle: x.sources for x in analyse(files).snapshot_restores}
    assert restores == {1: ("memory x1", "not recorded x1"), 2: ("memory x2",)}
