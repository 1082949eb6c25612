"""The report with snapshots (#43): work resumed from a snapshot is kept work, so the
cycles' kept training, their lost work and the goodput agree with the steps the trainer
really kept; the lost work is split at the newest snapshot the nodes held."""

from __future__ import annotations

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
        cycles=[cycle(0, RUN_A, 0, 0, 40, "failed", failure(38)), cycle(1, RUN_A, 0, 41, 80, "succeeded")],
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
    records.append_record(state.node_snapshots("node0"), node(0, "node0", 3, (SnapshotSource.MEMORY, 2)))
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
